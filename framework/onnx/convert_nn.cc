// Layers: Gemm and MatMul (matmul), BatchNormalization (batch_norm, training
// mode updating the running statistics in place), LayerNormalization
// (layer_norm), InstanceNormalization (instance_norm) and Dropout (dropout,
// or the identity at inference).
#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

// Gemm = alpha * op(A) @ op(B) + beta * C, as ONNX defines it: matmul, scale
// and elementwise_add (C broadcasts into [M, N]).
void ConvertGemm(NodeContext& ctx) {
  if (ctx.InputDims(0).size() != 2 || ctx.InputDims(1).size() != 2) ctx.Refuse("A and B must be 2-D");
  const AttrMap mm = {{"transpose_X", ctx.Int("transA", 0) != 0},
                      {"transpose_Y", ctx.Int("transB", 0) != 0},
                      {"alpha", ctx.Float("alpha", 1.0f)}};
  const bool has_c = ctx.HasInput(2);
  const std::string out = ctx.Op1("matmul", {{"X", {ctx.Input(0)}}, {"Y", {ctx.Input(1)}}}, mm,
                                  has_c ? "" : ctx.Out(0));
  if (!has_c) return;
  std::string c = ctx.Input(2);
  const float beta = ctx.Float("beta", 1.0f);
  if (beta != 1.0f) c = ctx.Op1("scale", {{"X", {c}}}, {{"scale", beta}});
  ctx.Op1("elementwise_add", {{"X", {out}}, {"Y", {c}}}, {}, ctx.Out(0));
}

void ConvertMatMul(NodeContext& ctx) {
  if (ctx.InputDims(0).size() < 2 || ctx.InputDims(1).size() < 2) {
    ctx.Refuse("a 1-D operand (", DimsToString(ctx.InputDims(0)), " @ ", DimsToString(ctx.InputDims(1)),
               "); kiln's matmul takes rank >= 2");
  }
  ctx.Op1("matmul", {{"X", {ctx.Input(0)}}, {"Y", {ctx.Input(1)}}}, {}, ctx.Out(0));
}

// Training mode (opset 14+ training_mode = 1): normalise with the batch
// statistics and update the running ones in place, which must therefore be
// initializers (persistable state vars). kiln updates the running variance
// with the unbiased batch variance, as PyTorch does; ONNX's reference uses
// the biased one, so a model that reads running_var (output 2) is refused.
void ConvertBatchNormalization(NodeContext& ctx) {
  const bool training = ctx.opset() >= 14 && ctx.Int("training_mode", 0) != 0;
  if (ctx.opset() < 14) {
    for (size_t i = 1; i < ctx.OutputCount(); ++i) {
      if (ctx.OutputUsed(i)) ctx.Refuse("output ", i, ": the training outputs of opsets before 14");
    }
  }
  AttrMap attrs = {{"epsilon", ctx.Float("epsilon", 1e-5f)},
                   {"momentum", ctx.Float("momentum", 0.9f)},
                   {"is_test", !training}};
  SlotArgsList in = {{"X", {ctx.Input(0)}}, {"Scale", {ctx.Input(1)}}, {"Bias", {ctx.Input(2)}}};
  if (!training) {
    in.push_back({"Mean", {ctx.Input(3, VarRole::kConstant)}});
    in.push_back({"Variance", {ctx.Input(4, VarRole::kConstant)}});
    ctx.Op("batch_norm", in, {{"Y", {ctx.Out(0)}}}, attrs);
    return;
  }
  for (size_t i : {3, 4}) {
    if (ctx.InputValue(i).kind != Value::Kind::kInitializer) {
      ctx.Refuse("training mode updates input ", i, " (a running statistic) in place, so it must be an initializer");
    }
  }
  if (ctx.OutputUsed(2)) {
    ctx.Refuse("output running_var: kiln updates it with the unbiased batch variance (as PyTorch), ONNX with the "
               "biased one");
  }
  const std::string mean = ctx.Input(3, VarRole::kState);
  const std::string var = ctx.Input(4, VarRole::kState);
  in.push_back({"Mean", {mean}});
  in.push_back({"Variance", {var}});
  ctx.Op("batch_norm", in,
         {{"Y", {ctx.Out(0)}},
          {"MeanOut", {mean}},
          {"VarianceOut", {var}},
          {"SavedMean", {ctx.Temp("saved_mean")}},
          {"SavedVariance", {ctx.Temp("saved_inv_std")}}},
         attrs);
  if (ctx.HasOutput(1)) ctx.Alias(1, mean);  // the updated running mean
}

// layer_norm over dims >= axis; Scale and Bias flattened to one dim as
// layer_norm takes them. Output Mean is layer_norm's reshaped; InvStdDev has
// no counterpart (layer_norm gives the variance).
void ConvertLayerNormalization(NodeContext& ctx) {
  const Dims x = ctx.InputDims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", -1), rank, "axis");
  if (ctx.OutputUsed(2)) ctx.Refuse("output InvStdDev: kiln's layer_norm gives the variance");
  auto flat = [&](size_t i) {
    const Dims d = ctx.InputDims(i);
    const std::string v = ctx.Input(i);
    if (d.size() == 1) return v;
    int64_t n = 1;
    for (int64_t k : d) n = k < 0 || n < 0 ? -1 : n * k;
    return ReshapeTo(ctx, v, d, {n}, {-1});
  };
  SlotArgsList in = {{"X", {ctx.Input(0)}}, {"Scale", {flat(1)}}};
  if (ctx.HasInput(2)) in.push_back({"Bias", {flat(2)}});
  SlotArgsList out = {{"Y", {ctx.Out(0)}}};
  const std::string mean = ctx.OutputUsed(1) ? ctx.Temp("mean") : "";
  if (!mean.empty()) out.push_back({"Mean", {mean}});
  ctx.Op("layer_norm", in, out, {{"epsilon", ctx.Float("epsilon", 1e-5f)}, {"begin_norm_axis", axis}});
  if (mean.empty()) return;
  Dims to(x.begin(), x.begin() + axis);
  std::vector<int> src(to.size(), -1);
  if (!src.empty()) src[0] = 0;
  to.resize(x.size(), 1);
  src.resize(x.size(), -1);
  ReshapeTo(ctx, mean, ctx.VarDims(mean), to, src, ctx.Out(1));
}

void ConvertInstanceNormalization(NodeContext& ctx) {
  ctx.Op("instance_norm", {{"X", {ctx.Input(0)}}, {"Scale", {ctx.Input(1)}}, {"Bias", {ctx.Input(2)}}},
         {{"Y", {ctx.Out(0)}}}, {{"epsilon", ctx.Float("epsilon", 1e-5f)}});
}

// Opsets before 12 and training_mode false: the identity. Training: kiln's
// dropout with a seed state var, so every run draws a new mask. The mask
// output is X's dtype in kiln (the factor each element got), bool in ONNX.
void ConvertDropout(NodeContext& ctx) {
  if (ctx.OutputUsed(1)) ctx.Refuse("output mask: kiln's mask is the scale factor (X's dtype), ONNX's a bool");
  const bool training = ctx.opset() >= 12 && ctx.HasInput(2) && ctx.ConstantScalar(2, "training_mode") != 0;
  const double ratio = ctx.opset() >= 12 ? (ctx.HasInput(1) ? ctx.ConstantScalar(1, "ratio") : 0.5)
                                         : ctx.Float("ratio", 0.5f);
  if (!training || ratio == 0) {
    ctx.Alias(0, ctx.Input(0));
    return;
  }
  if (!(ratio > 0 && ratio < 1)) ctx.Refuse("ratio ", ratio, ": expected [0, 1)");
  Tensor seed(DataType::kINT64, {1});
  seed.mutable_data<int64_t>()[0] = ctx.Int("seed", 0);
  const std::string state = ctx.import().NewStateVar(ctx.Out(0) + ".seed", seed);
  ctx.Op("dropout", {{"X", {ctx.Input(0)}}, {"Seed", {state}}},
         {{"Out", {ctx.Out(0)}}, {"Mask", {ctx.Temp("mask")}}, {"SeedOut", {state}}},
         {{"dropout_prob", static_cast<float>(ratio)}, {"is_test", false}});
}

}  // namespace

void AddNnConverters(std::vector<Converter>* t) {
  t->push_back(MakeConverter("Gemm", 7, ConvertGemm));
  t->push_back(MakeConverter("MatMul", 1, ConvertMatMul));
  t->push_back(MakeConverter("BatchNormalization", 9, ConvertBatchNormalization));
  t->push_back(MakeConverter("LayerNormalization", 17, ConvertLayerNormalization));
  // Opset 1 had consumed_inputs.
  t->push_back(MakeConverter("InstanceNormalization", 6, ConvertInstanceNormalization));
  Converter dropout = MakeConverter("Dropout", 7, ConvertDropout);
  dropout.random = true;
  t->push_back(dropout);
}

}  // namespace kiln::onnx_import
