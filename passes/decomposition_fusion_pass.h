// decomposition_fusion_pass: turns what an exporter decomposed back into
// kiln's fused ops, so the JIT lowers an imported model as it lowers one
// written with kiln's layers (issue 28, point 3). PyTorch exports
// nn.LayerNorm / x.mean(-1) arithmetic and the erf GELU as chains of
// elementwise ops; the ONNX importer maps each node onto one kiln op.
//
// LayerNorm, all f32, x of rank r >= 2 with a known last dim N, axis = last:
//   m = reduce_mean(x)[dim=[-1 or r-1], keep_dim, !reduce_all]
//   d = elementwise_sub(x, m)
//   p = pow(d)[factor=2]
//   v = reduce_mean(p)[as m]
//   a = elementwise_add(v, eps)      (either order; eps a scalar constant)
//   s = sqrt(a)
//   y = elementwise_div(d, s)
//   [y = elementwise_mul(y, g)]      (either order; g declared [N])
//   [y = elementwise_add(y, b)]      (either order; b declared [N])
// becomes y = layer_norm(x, Scale=g, Bias=b)[epsilon=eps, begin_norm_axis=r-1].
//
// GELU (erf form), all f32, c1 ~ sqrt(2), c2 = 1, c3 = 0.5 scalar constants:
//   t = elementwise_div(x, c1)  e = erf(t)  u = elementwise_add(e, c2)
//   then y = elementwise_mul(elementwise_mul(x, u), c3)   (F.gelu's export)
//     or y = elementwise_mul(elementwise_mul(x, c3), u)   (0.5*x*(1+erf(..)))
// (each mul and the add in either order) becomes y = gelu(x)[approximate=false].
//
// A scalar constant is a declared f32 var of one element that is
// persistable, stop_gradient, written by no op of the graph, and whose value
// options.constants gives (the importer's initializers: ScalarConstants()
// reads them from the startup program). sqrt(2) matches within 1e-6
// relative, the others exactly. Every elementwise op has axis -1 and its
// output the dims of x, so no broadcast hides in the pattern.
//
// The pass fires only when every intermediate (all but x, the constants, g,
// b and y) is declared f32, not persistable, not in keep_vars, its name
// written once, and read only by the pattern's ops; no op of the pattern is
// a recompute copy. So on a program with append_backward's grad ops, which
// read the intermediates, it leaves the pattern as it is (the gradients stay
// right); fusing there needs the pass to run before append_backward, which
// the ONNX import paths do (kiln.onnx.load, kiln import): the fused ops'
// own grad ops then give the gradients.
//
// Attention (passes/decomposition_fusion_attention.cc), from a
// softmax(S2)[axis last] whose P only a matmul reads as its X:
//   S0 = matmul(Q, Kt)[!transpose_X]   Kt = transpose2(K0)[perm] unless the
//        matmul has transpose_Y already (the perm's last two then swap, so
//        the transpose gives K and the matmul transposes it)
//   S1 = S0 multiplied / divided by constant scalars (any number of ops; a
//        division of Q by a constant the matmul alone reads folds too)
//   S2 = where(C, F, S1) with C folding to "j > i" over the last two dims
//        and F to all -inf, or S1 + M (either order) with M folding to -inf
//        where j > i and 0 elsewhere (broadcast over the leading dims), or
//        S2 = S1 (no mask)
// becomes S2 = matmul(Q, K)[transpose_Y, alpha = the product of the
// scales], P = fused_softmax_mask_upper_triangle(S2) when masked (square
// scores), softmax as it was otherwise: attention_fusion_pass's pattern.
// "Folding" runs the ops producing C, F or M (slice, equal, expand_v2,
// reshape2, cast, elementwise ops, ..., at most 32) on the constants with
// the reference kernels; the mask's ops are removed after. A mask that does
// not fold (fed at run time, a trainable buffer) or is not exactly causal
// leaves the attention as it is, and so does a fill other than -inf.
//
// Placement: first in the pipeline, before attention_fusion_pass and
// build_jit_pass, which see the fused ops like a native program's.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"
#include "passes/pass.h"

namespace kiln {

struct DecompositionFusionPassOptions {
  // Feeds and fetch targets: never fused away.
  std::set<std::string> keep_vars;
  // Values of constants (persistable, stop_gradient vars no op of the
  // graph writes): the importer's initializers of buffers and constants.
  std::map<std::string, Tensor> constants;
};

struct DecompositionFusionReport {
  // Output var of each fused op, in the order fused.
  std::vector<std::string> layer_norms, gelus;
  // Probabilities of each attention put into attention_fusion_pass's form,
  // "<P> (causal)" for a causal one.
  std::vector<std::string> attentions;
  // "fused 2 layer_norm (Add_1_output_0, ...), 1 gelu (Mul_3_output_0)" or
  // "fused no decomposition".
  std::string ToString() const;
};

// The values `startup` gives the vars that `main` declares persistable and
// stop_gradient (its ops writing them, run on the reference kernels), by
// var name. Throws what the executor throws for a broken startup program.
std::map<std::string, Tensor> ImportedConstants(const proto::ProgramDesc& main, const proto::ProgramDesc& startup);

class DecompositionFusionPass : public Pass {
 public:
  // When `report` is not null every Run overwrites it. `registry` must
  // outlive the pass.
  explicit DecompositionFusionPass(DecompositionFusionPassOptions options, DecompositionFusionReport* report = nullptr,
                                   const OpRegistry& registry = OpRegistry::Global());

  std::string_view name() const override { return "decomposition_fusion_pass"; }
  bool Run(ir::Graph& graph) const override;

 private:
  DecompositionFusionPassOptions options_;
  DecompositionFusionReport* report_;
  const OpRegistry& registry_;
};

// Runs the pass over block 0 of an imported `main` with the constants of its
// `startup` and `keep` (its inputs and outputs) kept; returns the report.
DecompositionFusionReport FuseImportedDecompositions(proto::ProgramDesc* main, const proto::ProgramDesc& startup,
                                                     const std::set<std::string>& keep);

}  // namespace kiln
