// recompute_pass: selective activation recomputation. A forward activation
// that the backward pass reads is recomputed there from values the backward
// keeps anyway, instead of being kept alive from the forward pass to its use.
//
// The backward region starts at the first op writing an @GRAD var. A forward
// var V is recomputed when
//   - V is written once, by a forward op P, is not persistable, not in
//     keep_vars, and backward ops read it;
//   - P's type is in op_types and P's inputs are anchors: persistable, fed
//     (no producer), or read by the backward pass anyway and not recomputed
//     themselves; or (up to max_chain ops) the output of another such op
//     whose only reader is the chain (the attention scores before softmax).
// Each accepted chain is copied, outputs renamed to "<name>@RECOMPUTE" (for
// the reader; no pass depends on the name) and marked op_role="recompute"
// (kOpRoleAttr in framework/operator.h), just before the first backward op
// reading V, and every backward reader of V reads the copy. Anchors of an accepted chain are never recomputed later. Forward
// vars are visited in program order, so the result is deterministic.
//
// Then V dies in the forward pass. Run before build_jit_pass, so the copies
// join the backward cluster (and its arena plan): build_jit_pass never merges
// a marked op along an edge from an unmarked producer. The recomputed values equal
// the forward ones: same ops, same inputs.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"

namespace kiln {

struct RecomputePassOptions {
  // Feeds and fetch targets: never recomputed.
  std::set<std::string> keep_vars;
  // Op types that may be recomputed. The default, layer_norm, is cheap next
  // to keeping its output; softmax (with matmul for its scores) and the
  // activations save more and cost more compute (kiln's --recompute_ops).
  std::set<std::string> op_types = {"layer_norm"};
  // Longest chain of ops copied for one var.
  int max_chain = 2;
};

struct RecomputeReport {
  struct Var {
    std::string name;                  // the forward var no longer kept
    std::vector<std::string> op_types;  // the chain copied, in order
    int64_t bytes_per_sample = 0;      // declared size with the batch dim as 1
  };
  std::vector<Var> vars;
  // "recomputed softmax_0 (matmul, softmax), ..." or "recomputed nothing".
  std::string ToString() const;
};

// Rewrites block 0 of `program`; returns true when anything was recomputed.
bool RecomputePass(proto::ProgramDesc* program, const RecomputePassOptions& options, RecomputeReport* report,
                   const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln
