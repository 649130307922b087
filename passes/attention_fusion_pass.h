// attention_fusion_pass: scaled dot-product attention becomes one
// fused_attention op, and its grad ops one fused_attention_grad, so the
// [..., Sq, Sk] scores and probabilities (and their gradients) never exist:
// the fused kernels work tile by tile with an online softmax and save each
// row's log-sum-exp (LSE) instead (framework/ops/fused_attention_op.cc).
//
// The forward pattern, all f32:
//   S = matmul(Q, K)[transpose_X=false, transpose_Y=true, alpha=scale]
//   P = softmax(S)[axis=last]   or   fused_softmax_mask_upper_triangle(S)
//   O = matmul(P, V)[transpose_X=false, transpose_Y=false, alpha=1]
// with Q [..., Sq, D], K [..., Sk, D], V [..., Sk, Dv] of one rank and the
// same declared batch dims, becomes
//   O, O.lse = fused_attention(Q, K, V)[scale, causal]
// (causal for the masked softmax). With append_backward's grad ops of the
// pattern present,
//   dP, dV = matmul_grad(P, V, dO)        dS = softmax_grad(P, dP)
//   dQ, dK = matmul_grad(Q, K, dS)        (the _grad of the masked softmax)
// they become
//   dQ, dK, dV = fused_attention_grad(Q, K, V, O, O.lse, dO)
// and any of dQ, dK, dV that was @EMPTY@ stays so (when Q and K need no
// gradient, append_backward leaves dS unread and adds no matmul_grad for
// the scores: dQ and dK are then @EMPTY@). The pass fires only when
//   - S, P (and dP, dS) are intermediates: declared, not persistable, not in
//     keep_vars (never fetched), each name written once;
//   - S is read only by the softmax, P only by the second matmul and (with
//     the backward) the two grad ops above, dP only by softmax_grad and dS
//     by nothing or the scores' matmul_grad, which reads the same Q and K;
//   - no op is one of recompute_pass's copies (op_role "recompute");
//   - merging the grad ops into one would not close a cycle through other ops.
// A pattern whose grad ops are there only in part is left unfused. The LSE
// var is named after O ("<O>.lse", numbered when taken). Patterns are found
// in topological order of their softmax, so the result is deterministic.
//
// Placement: before recompute_pass (which would otherwise copy the scores'
// matmul and softmax into the backward) and before build_jit_pass, which
// clusters the fused ops like any other. The pipeline runs it only with the
// JIT on: the fast kernels are the compiler's (compiler/kernels/attention/attention_kernels.h);
// the framework runs the fused ops on their reference kernels.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "framework/op_registry.h"
#include "passes/pass.h"

namespace kiln {

struct AttentionFusionPassOptions {
  // Feeds and fetch targets: never fused away.
  std::set<std::string> keep_vars;
};

struct AttentionFusionReport {
  struct Fused {
    std::string out;          // O, the attention output
    std::string probs;        // P, no longer computed
    bool causal = false;
    bool backward = false;    // the grad ops were fused too
  };
  std::vector<Fused> fused;
  // "fused attention matmul_1 (probs softmax_0, with backward), ..." or
  // "fused no attention".
  std::string ToString() const;
};

class AttentionFusionPass : public Pass {
 public:
  // When `report` is not null every Run overwrites it. `registry` must
  // outlive the pass.
  explicit AttentionFusionPass(AttentionFusionPassOptions options, AttentionFusionReport* report = nullptr,
                               const OpRegistry& registry = OpRegistry::Global());

  std::string_view name() const override { return "attention_fusion_pass"; }
  bool Run(ir::Graph& graph) const override;

 private:
  AttentionFusionPassOptions options_;
  AttentionFusionReport* report_;
  const OpRegistry& registry_;
};

}  // namespace kiln
