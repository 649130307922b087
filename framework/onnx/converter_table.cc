#include "framework/onnx/converter_table.h"

#include <algorithm>

namespace kiln::onnx_import {
namespace {

// Op types of the ONNX node tests that no kiln op computes, and why: the
// ops to add to the registry next (docs/onnx.md shows each with its count).
void AddMissing(std::vector<Converter>* table) {
  const auto missing = [table](const std::vector<std::string>& ops, const std::string& why) {
    for (const std::string& op : ops) {
      Converter c;
      c.op_type = op;
      c.since = c.until = 0;
      c.missing = why;
      table->push_back(std::move(c));
    }
  };
  missing({"Shrink", "Hardmax"}, "no kiln activation op for it");
  missing({"BitShift"}, "no bitwise ops in kiln (kiln has no unsigned dtypes)");
  missing({"Resize", "Upsample", "GridSample", "RoiAlign", "MaxUnpool", "SpaceToDepth", "DepthToSpace"},
          "no kiln op for resampling or rearranging images");
  missing({"ConvTranspose", "ConvInteger", "QLinearConv", "LRN",
           "MeanVarianceNormalization", "LpNormalization", "LpPool", "GlobalLpPool"},
          "no kiln op for it (conv2d, pool2d, batch_norm and layer_norm only)");
  missing({"ReduceLogSum", "ReduceSumSquare"},
          "no kiln reduction for it (reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod, reduce_l1, reduce_l2, "
          "logsumexp)");
  missing({"GatherND", "Scatter", "ScatterElements", "ScatterND", "Compress", "NonZero", "TopK", "Unique",
           "ReverseSequence", "EyeLike"},
          "no kiln indexing op for it (gather, take_along_axis and one_hot only)");
  missing({"Einsum", "MatMulInteger", "QLinearMatMul", "Det"}, "no kiln op for it (matmul only)");
  missing({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}, "kiln has no quantized dtypes");
  missing({"RNN", "GRU", "LSTM"}, "no recurrent ops in kiln");
  missing({"If", "Loop", "Scan", "SequenceMap"}, "control flow: kiln programs have one block");
  missing({"SequenceEmpty", "SequenceInsert", "SequenceLength", "SequenceAt", "SequenceConstruct", "SequenceErase",
           "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement"},
          "kiln values are tensors, not sequences or optionals");
  missing({"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Multinomial"},
          "no kiln op for it (uniform_random draws a fixed shape only)");
  missing({"StringNormalizer", "TfIdfVectorizer", "RegexFullMatch"}, "kiln has no string dtype");
  missing({"DFT", "STFT", "BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix"},
          "no signal-processing ops in kiln");
  missing({"Adagrad", "Adam", "Momentum", "Gradient"},
          "no kiln op for it (kiln's optimizers are added by kiln, not imported)");
  missing({"NonMaxSuppression"}, "no kiln op for detection post-processing");
}

std::vector<Converter> Build() {
  std::vector<Converter> t;
  AddNnConverters(&t);
  AddConvPoolConverters(&t);
  AddMathConverters(&t);
  AddReduceConverters(&t);
  AddShapeConverters(&t);
  AddConstantConverters(&t);
  AddUnaryConverters(&t);
  AddTilePadConverters(&t);
  AddLossConverters(&t);
  AddMissing(&t);
  std::stable_sort(t.begin(), t.end(), [](const Converter& a, const Converter& b) { return a.op_type < b.op_type; });
  for (size_t i = 1; i < t.size(); ++i) {
    KILN_CHECK(t[i - 1].op_type != t[i].op_type, "ONNX op ", t[i].op_type, " is in the converter table twice");
  }
  return t;
}

}  // namespace

const std::vector<Converter>& ConverterTable() {
  static const std::vector<Converter> table = Build();
  return table;
}

const Converter* FindConverter(const std::string& op_type) {
  const auto& t = ConverterTable();
  auto it = std::lower_bound(t.begin(), t.end(), op_type,
                             [](const Converter& c, const std::string& op) { return c.op_type < op; });
  return it != t.end() && it->op_type == op_type ? &*it : nullptr;
}

}  // namespace kiln::onnx_import
