// recompute_pass: selective activation recomputation. A forward activation
// that the backward pass reads is recomputed there from values the backward
// keeps anyway, instead of being kept alive from the forward pass to its use.
//
// The backward region starts at the first op (in topological order) writing
// an @GRAD var (append_backward's naming). A forward var V is recomputed when
//   - V is written once, by a forward op P, is not persistable, not in
//     keep_vars, and backward ops read it;
//   - P's type is in op_types and P's inputs are anchors: persistable, fed
//     (no producer), or read by the backward pass anyway and not recomputed
//     themselves; or (up to max_chain ops) the output of another such op
//     whose only reader is the chain (the attention scores before softmax).
// Each accepted chain is copied into the backward pass: the copies read the
// same var nodes as the originals, write new vars (named "<name>@RECOMPUTE"
// for the reader; no pass depends on the name) and carry the attribute
// op_role="recompute" (kOpRoleAttr, kOpRoleRecompute in framework/operator.h).
// Every backward reader of V from the first backward op reading it on (in
// topological order) reads the copy; shape-only readers before it keep V.
// Anchors of an accepted chain are never recomputed later. Forward vars are
// visited in topological order, so the result is deterministic.
//
// Placement: the copies are new ops, which sort after every older op that is
// ready (ir::Graph::AddOpNode), so each copy runs just before its first
// reader, as late as it can; ops that depend on no copy keep their order but
// may move ahead of one (an sgd whose gradient is ready).
//
// Then V dies in the forward pass. Run before build_jit_pass, so the copies
// join the backward cluster (and its arena plan): build_jit_pass never merges
// a marked op along an edge from an unmarked producer, so it joins its
// backward consumers. The recomputed values equal the forward ones: same
// ops, same inputs.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "framework/op_registry.h"
#include "passes/pass.h"

namespace kiln {

struct RecomputePassOptions {
  // Feeds and fetch targets: never recomputed.
  std::set<std::string> keep_vars;
  // Op types that may be recomputed. The default, layer_norm, is cheap next
  // to keeping its output; softmax (with matmul for its scores) and the
  // activations save more and cost more compute (kiln's --recompute_ops).
  // Unknown types throw InvalidArgument when the pass is constructed.
  std::set<std::string> op_types = {"layer_norm"};
  // Longest chain of ops copied for one var (>= 1).
  int max_chain = 2;
};

struct RecomputeReport {
  struct Var {
    std::string name;                   // the forward var no longer kept
    std::vector<std::string> op_types;  // the chain copied, in order
    int64_t bytes_per_sample = 0;       // declared size with the batch dim as 1
  };
  std::vector<Var> vars;
  // "recomputed softmax_0 (matmul, softmax), ..." or "recomputed nothing".
  std::string ToString() const;
};

class RecomputePass : public Pass {
 public:
  // Throws InvalidArgument for an op type in op_types that `registry` does not
  // know and a max_chain below 1. When `report` is not null every Run
  // overwrites it. `registry` must outlive the pass.
  explicit RecomputePass(RecomputePassOptions options, RecomputeReport* report = nullptr,
                         const OpRegistry& registry = OpRegistry::Global());

  std::string_view name() const override { return "recompute_pass"; }
  bool Run(ir::Graph& graph) const override;
  // Same, writing what it did to `report` (when not null).
  bool Run(ir::Graph& graph, RecomputeReport* report) const;

  const RecomputePassOptions& options() const { return options_; }

 private:
  RecomputePassOptions options_;
  RecomputeReport* report_;
  const OpRegistry& registry_;
};

}  // namespace kiln
