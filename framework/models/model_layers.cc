#include "framework/models/model_layers.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "framework/backward.h"
#include "framework/optimizer_builder.h"

namespace kiln::model_layers {

std::string Fc(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, Act act, const std::string& name) {
  const Init w_init = act == Act::kRelu ? Init::HeUniform(in) : Init::XavierUniform(in, out);
  const std::string w = b.Param(name + ".w", {in, out}, w_init);
  const std::string bias = b.Param(name + ".b", {out}, Init::Constant(0.f));
  std::string y = b.Op1("matmul", {{"X", {x}}, {"Y", {w}}});
  y = b.Op1("elementwise_add", {{"X", {y}}, {"Y", {bias}}});
  if (act == Act::kRelu) y = b.Op1("relu", {{"X", {y}}});
  if (act == Act::kGelu) y = b.Op1("gelu", {{"X", {y}}});
  return y;
}

std::string LayerNorm(ProgramBuilder& b, const std::string& x, int64_t width, int64_t begin_norm_axis,
                      const std::string& name) {
  const std::string sc = b.Param(name + ".scale", {width}, Init::Constant(1.f));
  const std::string bi = b.Param(name + ".bias", {width}, Init::Constant(0.f));
  return b.Op("layer_norm", {{"X", {x}}, {"Scale", {sc}}, {"Bias", {bi}}}, {"Y", "Mean", "Variance"},
              {{"begin_norm_axis", begin_norm_axis}, {"epsilon", 1e-5f}}, name)[0];
}

std::string SelfAttention(ProgramBuilder& b, const std::string& x, int64_t d, int64_t heads, bool causal,
                          const std::string& name) {
  const int64_t dh = d / heads;
  // [B,S,D] -> [B,H,S,Dh]
  auto split_heads = [&](const std::string& t) {
    std::string r = b.Op1("reshape2", {{"X", {t}}}, {{"shape", std::vector<int64_t>{0, 0, heads, dh}}});
    return b.Op1("transpose2", {{"X", {r}}}, {{"axis", std::vector<int64_t>{0, 2, 1, 3}}});
  };
  const std::string q = split_heads(Fc(b, x, d, d, Act::kNone, name + ".q"));
  const std::string k = split_heads(Fc(b, x, d, d, Act::kNone, name + ".k"));
  const std::string v = split_heads(Fc(b, x, d, d, Act::kNone, name + ".v"));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::string s = b.Op1("matmul", {{"X", {q}}, {"Y", {k}}}, {{"transpose_Y", true}, {"alpha", scale}});
  s = b.Op1(causal ? "fused_softmax_mask_upper_triangle" : "softmax", {{"X", {s}}});
  std::string ctx = b.Op1("matmul", {{"X", {s}}, {"Y", {v}}});
  ctx = b.Op1("transpose2", {{"X", {ctx}}}, {{"axis", std::vector<int64_t>{0, 2, 1, 3}}});
  ctx = b.Op1("reshape2", {{"X", {ctx}}}, {{"shape", std::vector<int64_t>{0, 0, d}}});
  return Fc(b, ctx, d, d, Act::kNone, name + ".out");
}

std::pair<std::string, std::string> SoftmaxCrossEntropy(ProgramBuilder& b, const std::string& logits,
                                                        const std::string& labels) {
  auto outs = b.Op("softmax_with_cross_entropy", {{"Logits", {logits}}, {"Label", {labels}}}, {"Softmax", "Loss"});
  return {outs[0], b.Op1("mean", {{"X", {outs[1]}}})};
}

void ClassifierLoss(ProgramBuilder& b, Model& m, const std::string& logits) {
  std::tie(m.probs, m.loss) = SoftmaxCrossEntropy(b, logits, m.labels);
}

Model Finish(ProgramBuilder& b, Model m, const TrainConfig& tc) {
  m.forward = b.main();
  const auto params_grads = AppendBackward(&b.main(), m.loss);
  OptimizerConfig oc;
  oc.kind = tc.optimizer;
  oc.lr = tc.lr;
  oc.momentum = tc.momentum;
  oc.weight_decay = tc.weight_decay;
  oc.grad_clip_norm = tc.grad_clip_norm;
  oc.grad_merge_steps = tc.grad_merge_steps;
  const std::string lr = AppendOptimizer(b, params_grads, oc);
  if (tc.lr_schedule) AppendLrSchedule(b, lr, *tc.lr_schedule);
  m.train = b.main();
  m.startup = b.startup();
  m.params = b.params();
  // A program built elsewhere declared its parameters itself: they are the
  // persistable vars that got a gradient.
  if (m.params.empty()) {
    for (const auto& pg : params_grads) m.params.push_back(pg.first);
  }
  return m;
}

}  // namespace kiln::model_layers
