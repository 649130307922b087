#include "framework/models/models.h"

#include "framework/checkpoint/inference.h"
#include "framework/op_desc.h"
#include "framework/models/model_layers.h"
#include "framework/ops/assign_value_op.h"
#include "framework/program_builder.h"

namespace kiln {

using model_layers::Act;
using model_layers::ClassifierLoss;
using model_layers::Fc;
using model_layers::Finish;

namespace {

// The checks of BuildFromProgram on its feed, its logits and the values of
// its persistable vars.
void CheckProgramClassifier(const ProgramClassifier& c) {
  if (c.program.blocks_size() == 0) ThrowInvalidArgument("the program has no blocks");
  const proto::BlockDesc& block = c.program.blocks(0);
  const proto::VarDesc& in = RequireVarDesc(block, c.input, "input");
  const Dims in_dims = VarDims(in);
  if (FromProto(in.dtype()) != DataType::kFP32) {
    ThrowInvalidArgument("the program's input '", c.input, "' takes ", DataTypeName(FromProto(in.dtype())),
                         " (token ids?); kiln train's datasets feed f32 features");
  }
  bool known = in_dims.size() >= 2;
  for (size_t i = 1; i < in_dims.size(); ++i) known = known && in_dims[i] > 0;
  if (!known) {
    ThrowInvalidArgument("the program's input '", c.input, "' is ", DimsToString(in_dims),
                         ": kiln train needs [batch, sample dims...] with every sample dim known (kiln import "
                         "--input_shape NAME=-1,d1,... sets them)");
  }
  const proto::VarDesc& out = RequireVarDesc(block, c.output, "output");
  const Dims out_dims = VarDims(out);
  if (out_dims.size() == 3) {
    ThrowInvalidArgument("the program's output '", c.output, "' is ", DimsToString(out_dims),
                         ", logits per token [batch, tokens, classes]; kiln train's datasets have one label per "
                         "sample, so it trains only models with logits [batch, classes]");
  }
  if (out_dims.size() != 2 || out_dims[1] < 1 || FromProto(out.dtype()) != DataType::kFP32) {
    ThrowInvalidArgument("the program's output '", c.output, "' is ", DataTypeName(FromProto(out.dtype())),
                         DimsToString(out_dims), "; kiln train needs f32 logits [batch, classes]");
  }
  for (const proto::VarDesc& v : block.vars()) {
    if (!v.persistable()) continue;
    const auto it = c.values.find(v.name());
    if (it == c.values.end()) ThrowInvalidArgument("persistable var '", v.name(), "' of the program has no value");
    if (it->second.dtype() != FromProto(v.dtype()) || it->second.dims() != VarDims(v)) {
      ThrowInvalidArgument("the value of '", v.name(), "' is ", it->second.ShapeString(), "; the program declares ",
                           DataTypeName(FromProto(v.dtype())), DimsToString(VarDims(v)));
    }
  }
  for (const auto& [name, value] : c.values) {
    const proto::VarDesc* v = FindVarDesc(block, name);
    if (v == nullptr || !v->persistable()) {
      ThrowInvalidArgument("value '", name, "': the program has no persistable var of that name");
    }
  }
}

}  // namespace

Model BuildFromProgram(const ProgramClassifier& c, const TrainConfig& tc) {
  CheckProgramClassifier(c);
  proto::ProgramDesc main = c.program;
  proto::ProgramDesc startup = EmptyProgram();
  // The values first: the optimizer's state initialisers follow them.
  for (const auto& [name, value] : c.values) {
    const proto::VarDesc& v = *FindVarDesc(main.blocks(0), name);
    *startup.mutable_blocks(0)->add_vars() = v;
    *startup.mutable_blocks(0)->add_ops() = AssignValueOp(name, value);
  }
  ProgramBuilder b(&main, &startup, tc.seed);
  Model m;
  const Dims in_dims = VarDims(RequireVarDesc(main.blocks(0), c.input, "input"));
  m.sample_dims.assign(in_dims.begin() + 1, in_dims.end());
  m.features = c.input;
  const int64_t batch = VarDims(RequireVarDesc(main.blocks(0), c.output, "output"))[0];
  const std::string labels = FindVarDesc(main.blocks(0), "labels") == nullptr ? "labels" : b.UniqueName("labels");
  m.labels = b.Data(labels, {batch, 1}, DataType::kINT64);
  ClassifierLoss(b, m, c.output);
  m = Finish(b, std::move(m), tc);
  if (m.params.empty()) {
    ThrowInvalidArgument("no var of the program trains: the loss depends on no persistable var that is not "
                         "stop_gradient (kiln import --trainable names the initializers that train)");
  }
  SetIsTest(&m.forward);
  return m;
}

Model BuildMlp(const MlpConfig& c, const TrainConfig& tc) {
  ProgramBuilder b(tc.seed);
  Model m;
  m.sample_dims = {c.input};
  m.features = b.Data("features", {-1, c.input});
  m.labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  std::string h = m.features;
  int64_t width = c.input;
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    h = Fc(b, h, width, c.hidden[i], Act::kRelu, "fc" + std::to_string(i));
    width = c.hidden[i];
  }
  ClassifierLoss(b, m, Fc(b, h, width, c.classes, Act::kNone, "fc" + std::to_string(c.hidden.size())));
  return Finish(b, std::move(m), tc);
}

Model BuildCnn(const CnnConfig& c, const TrainConfig& tc) {
  ProgramBuilder b(tc.seed);
  Model m;
  m.sample_dims = {c.channels, c.height, c.width};
  m.features = b.Data("features", {-1, c.channels, c.height, c.width});
  m.labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  std::string h = m.features;
  int64_t in_ch = c.channels, height = c.height, width = c.width;
  const int64_t out_chs[2] = {6, 16};
  for (int i = 0; i < 2; ++i) {
    const int64_t fan_in = in_ch * 25;
    const std::string f = b.Param("conv" + std::to_string(i) + ".w", {out_chs[i], in_ch, 5, 5}, Init::HeUniform(fan_in));
    const std::string bias = b.Param("conv" + std::to_string(i) + ".b", {out_chs[i]}, Init::Constant(0.f));
    h = b.Op1("conv2d", {{"Input", {h}}, {"Filter", {f}}},
              {{"strides", std::vector<int64_t>{1, 1}}, {"paddings", std::vector<int64_t>{2, 2}}}, "Output");
    h = b.Op1("elementwise_add", {{"X", {h}}, {"Y", {bias}}}, {{"axis", int64_t{1}}});
    h = b.Op1("relu", {{"X", {h}}});
    h = b.Op1("pool2d", {{"X", {h}}},
              {{"pooling_type", std::string("max")},
               {"ksize", std::vector<int64_t>{2, 2}},
               {"strides", std::vector<int64_t>{2, 2}}});
    in_ch = out_chs[i];
    height /= 2;
    width /= 2;
  }
  const int64_t flat = in_ch * height * width;
  h = b.Op1("reshape2", {{"X", {h}}}, {{"shape", std::vector<int64_t>{0, flat}}});
  h = Fc(b, h, flat, 120, Act::kRelu, "fc0");
  h = Fc(b, h, 120, 84, Act::kRelu, "fc1");
  ClassifierLoss(b, m, Fc(b, h, 84, c.classes, Act::kNone, "fc2"));
  return Finish(b, std::move(m), tc);
}

Model BuildTransformer(const TransformerConfig& c, const TrainConfig& tc) {
  if (c.d_model % c.num_heads != 0) {
    ThrowInvalidArgument("transformer: d_model ", c.d_model, " is not a multiple of num_heads ", c.num_heads);
  }
  ProgramBuilder b(tc.seed);
  Model m;
  const int64_t d = c.d_model;
  m.sample_dims = {c.seq_len, d};
  m.features = b.Data("features", {-1, c.seq_len, d});
  m.labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  const std::string x = m.features;
  const std::string attn = model_layers::SelfAttention(b, x, d, c.num_heads, /*causal=*/false, "attn");

  auto layer_norm = [&](const std::string& t, const std::string& name) {
    return model_layers::LayerNorm(b, t, d, 2, name);
  };
  const std::string ln1 = layer_norm(b.Op1("elementwise_add", {{"X", {x}}, {"Y", {attn}}}), "ln1");
  const std::string ffn = Fc(b, Fc(b, ln1, d, c.ffn_dim, Act::kGelu, "ffn0"), c.ffn_dim, d, Act::kNone, "ffn1");
  const std::string ln2 = layer_norm(b.Op1("elementwise_add", {{"X", {ln1}}, {"Y", {ffn}}}), "ln2");
  const std::string pooled = b.Op1("reduce_mean", {{"X", {ln2}}}, {{"dim", std::vector<int64_t>{1}}});
  ClassifierLoss(b, m, Fc(b, pooled, d, c.classes, Act::kNone, "head"));
  return Finish(b, std::move(m), tc);
}

}  // namespace kiln
