// Layers the built-in models share (models.cc, resnet.cc, gpt.cc). Internal
// to framework/models/: user code builds models through models.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "framework/models/models.h"
#include "framework/program_builder.h"

namespace kiln::model_layers {

enum class Act { kNone, kRelu, kGelu };

// y = act(x @ w + b); x's last dim is `in` (any rank >= 2). w is He-uniform
// before a relu, Xavier-uniform otherwise; b starts at zero.
std::string Fc(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, Act act, const std::string& name);

// layer_norm over the dims from begin_norm_axis on (`width` values), with a
// learned scale (ones) and bias (zeros), epsilon 1e-5.
std::string LayerNorm(ProgramBuilder& b, const std::string& x, int64_t width, int64_t begin_norm_axis,
                      const std::string& name);

// Multi-head self-attention over x [B, S, d]: q, k, v projections split into
// `heads` heads, softmax(q k^T / sqrt(d / heads)) v (causal:
// fused_softmax_mask_upper_triangle, position i sees j <= i), the heads merged
// and projected. Parameters are named <name>.q, .k, .v and .out. Requires d a
// multiple of heads.
std::string SelfAttention(ProgramBuilder& b, const std::string& x, int64_t d, int64_t heads, bool causal,
                          const std::string& name);

// softmax_with_cross_entropy of `logits` against `labels` (INT64, the logits'
// dims with the last one 1), then mean; returns {softmax, mean loss}.
std::pair<std::string, std::string> SoftmaxCrossEntropy(ProgramBuilder& b, const std::string& logits,
                                                        const std::string& labels);

// SoftmaxCrossEntropy against m.labels; fills m.probs and m.loss.
void ClassifierLoss(ProgramBuilder& b, Model& m, const std::string& logits);

// m.forward is the program as built so far; then append_backward from
// m.loss, the optimizer of `tc` (and its learning-rate schedule) make m.train.
Model Finish(ProgramBuilder& b, Model m, const TrainConfig& tc);

}  // namespace kiln::model_layers
