// build_jit_pass: carves clusters of JIT-lowerable ops out of a graph and
// replaces each by one jit_launch op (seed 003's build_cinn_pass).
//
// Candidates are ops whose registry entry has a JIT lowering (jit != kNone)
// and that touch only declared vars; when allow_ops is given only those
// types, and never a type in deny_ops. Candidates connected through a var
// (one writes it, the other reads it) are merged greedily in topological
// order, unless the merged cluster would sit on a cycle: a path that leaves
// it and re-enters it through another op (data or the graph's write-after-
// read/write ordering). Clusters of at least min_cluster_size ops are kept.
// Forward, backward and optimizer ops are all clustered alike, except that an
// op marked op_role="recompute" (recompute_pass's copies in the backward pass)
// never merges with an unmarked producer: it joins its backward consumers.
//
// Each kept cluster becomes a JitSubgraph (ops in topological order, every
// var they touch) handed to the sink, which stores it and returns its
// compilation key; the cluster is then replaced by
//   jit_launch[compilation_key="<key>"](X: inputs) -> (Out: outputs)
// at the cluster's place. Inputs are vars read in the cluster and produced
// outside it (or by no op); outputs are vars written in the cluster and read
// by an op outside it, named in keep_vars, or persistable (the last write of
// the name in the cluster). An in-place update inside the cluster (sgd:
// ParamOut is Param) yields the same name in X and Out; the launch op aliases
// them. Two launch ops end up reading each other's outputs directly only
// where merging them was refused because of a path through other ops.
//
// Deterministic: the same graph and options give the same clusters, in the
// same order (by their first op in topological order), the same subgraphs
// and so the same keys from a deterministic sink.
//
// Complexity, K ops, V var nodes, E edges: the dependencies of every op
// come from one walk of the graph (Graph::AllOpDependencies, O(V + E) plus
// sorting each op's list; a query per op cost O(K * (V + E)), ~0.3 s for a
// 2000-op chain). Each merge attempt searches only the nodes ranked between the two clusters in
// a topological order maintained across merges (passes/cluster_graph.h:
// Pearce-Kelly, as XLA's GraphCycles): O(K + E) log K at worst, one attempt
// per data edge between candidates.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"
#include "passes/pass.h"

namespace kiln {

struct BuildJitPassOptions {
  // Op types; empty allow_ops means every lowerable type. Unknown types throw
  // InvalidArgument when the pass is constructed.
  std::vector<std::string> allow_ops;
  std::vector<std::string> deny_ops;
  int min_cluster_size = 2;  // >= 1
  // Feeds and fetch targets: always cluster inputs / outputs.
  std::set<std::string> keep_vars;
};

// Stores a cluster's subgraph and returns its compilation key (the tools wire
// it to jit::DefaultJit()'s compile cache; tests to a cache of their own or
// to JitSubgraphFingerprint).
using SubgraphSink = std::function<std::string(const JitSubgraph&)>;

// Why an op was not put in a cluster.
enum class JitExclusion {
  kNotLowerable,     // registry entry has jit = kNone, or the type is not registered
  kUndeclaredVar,    // reads or writes a var the block does not declare
  kNotAllowed,       // allow_ops is given and does not name the type
  kDenied,           // deny_ops names the type
  kCycle,            // a merge with a neighbour was refused (cycle) and its cluster stayed too small
  kClusterTooSmall,  // its cluster has fewer than min_cluster_size ops
};
// "not_lowerable", "undeclared_var", "not_allowed", "denied", "cycle", "too_small".
const char* JitExclusionName(JitExclusion reason);

// What one Run did, for explain-why reporting (kiln dump).
struct BuildJitReport {
  struct Cluster {
    std::string key;
    std::vector<std::string> ops;  // op labels (graph.OpLabel), topological order
    std::vector<std::string> inputs;
    std::vector<std::string> outputs;
    std::vector<std::string> shape_only_inputs;   // read only for their dims (jit_launch attr)
    std::vector<std::string> shape_only_outputs;  // handed out without a buffer
    std::vector<std::string> donatable_inputs;    // die in the cluster: their memory may hold temps
  };
  struct Exclusion {
    std::string op;  // op label
    std::string type;
    JitExclusion reason;
    std::string detail;  // e.g. which merge would have closed which cycle
  };
  std::vector<Cluster> clusters;    // numbered by position: cluster i
  std::vector<Exclusion> excluded;  // every op not clustered, topological order

  // First exclusion of the op with this label, or nullptr.
  const Exclusion* FindExcluded(std::string_view op_label) const;
  // One line per cluster (plus its inputs and outputs) and per exclusion.
  std::string ToString() const;
};

class BuildJitPass : public Pass {
 public:
  // Throws InvalidArgument for unknown op types in allow_ops/deny_ops and a
  // min_cluster_size below 1. `sink` must be callable. When `report` is not
  // null, every Run(graph) overwrites it. `registry` must outlive the pass.
  BuildJitPass(BuildJitPassOptions options, SubgraphSink sink, BuildJitReport* report = nullptr,
               const OpRegistry& registry = OpRegistry::Global());

  std::string_view name() const override { return "build_jit_pass"; }
  bool Run(ir::Graph& graph) const override;
  // Same, writing what it did to `report` (when not null).
  bool Run(ir::Graph& graph, BuildJitReport* report) const;

  const BuildJitPassOptions& options() const { return options_; }

 private:
  BuildJitPassOptions options_;
  SubgraphSink sink_;
  BuildJitReport* report_;
  const OpRegistry& registry_;
};

}  // namespace kiln
