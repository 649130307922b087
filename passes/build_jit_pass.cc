#include "passes/build_jit_pass.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "framework/attribute.h"
#include "framework/error.h"
#include "framework/op_desc.h"
#include "passes/cluster_graph.h"

namespace kiln {

using ir::NodeId;

const char* JitExclusionName(JitExclusion reason) {
  switch (reason) {
    case JitExclusion::kNotLowerable:
      return "not_lowerable";
    case JitExclusion::kUndeclaredVar:
      return "undeclared_var";
    case JitExclusion::kNotAllowed:
      return "not_allowed";
    case JitExclusion::kDenied:
      return "denied";
    case JitExclusion::kCycle:
      return "cycle";
    case JitExclusion::kClusterTooSmall:
      return "too_small";
  }
  return "?";
}

const BuildJitReport::Exclusion* BuildJitReport::FindExcluded(std::string_view op_label) const {
  for (const Exclusion& e : excluded) {
    if (e.op == op_label) return &e;
  }
  return nullptr;
}

std::string BuildJitReport::ToString() const {
  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  std::string out;
  for (size_t i = 0; i < clusters.size(); ++i) {
    const Cluster& c = clusters[i];
    out += StrCat("cluster ", i, " key=", c.key, " (", c.ops.size(), " ops): ", join(c.ops), "\n");
    out += "  inputs: " + join(c.inputs) + "\n";
    out += "  outputs: " + join(c.outputs) + "\n";
    if (!c.shape_only_inputs.empty()) out += "  shape-only inputs: " + join(c.shape_only_inputs) + "\n";
    if (!c.shape_only_outputs.empty()) out += "  shape-only outputs: " + join(c.shape_only_outputs) + "\n";
    if (!c.donatable_inputs.empty()) out += "  inputs dying here: " + join(c.donatable_inputs) + "\n";
  }
  for (const Exclusion& e : excluded) {
    out += StrCat("excluded ", e.op, ": ", JitExclusionName(e.reason), " (", e.detail, ")\n");
  }
  return out;
}

namespace {

struct Excluded {
  JitExclusion reason;
  std::string detail;
};

// The launch op's view of one cluster.
struct ClusterIo {
  JitSubgraph subgraph;
  std::vector<NodeId> ops;  // topological order
  std::vector<NodeId> inputs;
  std::vector<NodeId> outputs;
  // Inputs every cluster op reads only for their shape (no-need-buffer).
  std::vector<std::string> shape_only_inputs;
};

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

bool ShapeOnlyReader(const ir::Graph& graph, NodeId reader, const std::string& name, const OpRegistry& registry) {
  const proto::OpDesc& desc = graph.op(reader);
  const OpInfo* info = registry.Find(desc.type());
  return info != nullptr && NoNeedBufferVars(*info, desc).count(name) > 0;
}

// Collects a cluster: its ops, the vars they touch and its external vars.
class ClusterCollector {
 public:
  // deps: graph.AllOpDependencies().
  ClusterCollector(const ir::Graph& graph, const std::vector<std::vector<NodeId>>& deps, std::vector<NodeId> ops,
                   const std::set<std::string>& keep_vars, const OpRegistry& registry)
      : graph_(graph), deps_(deps), keep_vars_(keep_vars), registry_(registry), in_cluster_(ops.begin(), ops.end()) {
    io_.ops = std::move(ops);
  }

  // On the unchanged graph.
  ClusterIo Collect() {
    JitSubgraph& sub = io_.subgraph;
    sub.block.set_idx(0);
    sub.block.set_parent_idx(-1);
    for (NodeId op : io_.ops) {
      *sub.block.add_ops() = graph_.op(op);
      for (NodeId v : graph_.inputs(op)) AddInput(v);
      for (NodeId v : graph_.outputs(op)) AddOutput(v);
    }
    const std::map<std::string, bool> shape_only = ShapeOnlyInputs();
    for (const auto& in : sub.inputs) {
      if (shape_only.at(in)) io_.shape_only_inputs.push_back(in);
    }
    AddDonatableInputs(shape_only);
    return std::move(io_);
  }

 private:
  bool Inside(NodeId op) const { return op != ir::kNoNode && in_cluster_.count(op) > 0; }

  void Declare(NodeId v) {
    if (declared_.insert(graph_.VarName(v)).second) *io_.subgraph.block.add_vars() = graph_.var(v);
  }

  void AddInput(NodeId v) {
    Declare(v);
    if (Inside(graph_.Producer(v)) || !seen_inputs_.insert(v).second) return;
    // A second external version of one name would need an outside write
    // between two cluster ops: the merge check rules that cycle out.
    KILN_CHECK(input_names_.insert(graph_.VarName(v)).second, "build_jit_pass: cluster reads two outside versions of '",
               graph_.VarName(v), "'");
    io_.inputs.push_back(v);
    io_.subgraph.inputs.push_back(graph_.VarName(v));
  }

  void AddOutput(NodeId v) {
    Declare(v);
    if (seen_outputs_.count(v) > 0) return;
    const std::string& name = graph_.VarName(v);
    bool read_outside = false;
    for (NodeId reader : graph_.outputs(v)) read_outside = read_outside || !Inside(reader);
    bool overwritten_inside = false;
    const std::vector<NodeId> versions = graph_.VarVersions(name);
    for (auto it = std::find(versions.begin(), versions.end(), v); it != versions.end(); ++it) {
      if (*it != v && Inside(graph_.Producer(*it))) overwritten_inside = true;
    }
    const bool kept = keep_vars_.count(name) > 0 || graph_.var(v).persistable();
    if (!read_outside && !(kept && !overwritten_inside)) return;
    bool shape_only_outside = !kept && read_outside;
    for (NodeId reader : graph_.outputs(v)) {
      if (Inside(reader)) continue;
      shape_only_outside = shape_only_outside && ShapeOnlyReader(graph_, reader, name, registry_);
    }
    seen_outputs_.insert(v);
    KILN_CHECK(output_names_.insert(name).second, "build_jit_pass: cluster writes two needed versions of '", name,
               "'");
    io_.outputs.push_back(v);
    io_.subgraph.outputs.push_back(name);
    if (shape_only_outside && !input_names_.count(name)) io_.subgraph.shape_only_outputs.push_back(name);
  }

  // External input -> read only for its shape by every cluster op.
  std::map<std::string, bool> ShapeOnlyInputs() const {
    std::map<std::string, bool> shape_only;
    for (const auto& in : io_.subgraph.inputs) shape_only[in] = true;
    for (NodeId op : io_.ops) {
      const proto::OpDesc& desc = graph_.op(op);
      const std::set<std::string> meta = NoNeedBufferVars(registry_.Get(desc.type()), desc);
      for (NodeId v : graph_.inputs(op)) {
        auto it = shape_only.find(graph_.VarName(v));
        if (it != shape_only.end() && !meta.count(it->first)) it->second = false;
      }
    }
    return shape_only;
  }

  // Donatable: the value is made in this program and nothing after the
  // cluster needs it (shape readers aside). Readers that must run before the
  // cluster (its ancestors) do not count.
  void AddDonatableInputs(const std::map<std::string, bool>& shape_only) {
    std::set<NodeId> before;
    std::vector<NodeId> stack(io_.ops.begin(), io_.ops.end());
    while (!stack.empty()) {
      const NodeId op = stack.back();
      stack.pop_back();
      for (NodeId dep : deps_[op]) {
        if (!Inside(dep) && before.insert(dep).second) stack.push_back(dep);
      }
    }
    for (NodeId v : io_.inputs) {
      const std::string& name = graph_.VarName(v);
      if (shape_only.at(name) || graph_.Producer(v) == ir::kNoNode || graph_.var(v).persistable() ||
          keep_vars_.count(name)) {
        continue;
      }
      bool dies = true;
      for (NodeId reader : graph_.outputs(v)) {
        if (Inside(reader) || before.count(reader)) continue;
        dies = dies && ShapeOnlyReader(graph_, reader, name, registry_);
      }
      if (dies) io_.subgraph.donatable_inputs.push_back(name);
    }
  }

  const ir::Graph& graph_;
  const std::vector<std::vector<NodeId>>& deps_;
  const std::set<std::string>& keep_vars_;
  const OpRegistry& registry_;
  const std::set<NodeId> in_cluster_;
  ClusterIo io_;
  std::set<std::string> declared_;
  std::set<NodeId> seen_inputs_, seen_outputs_;
  std::set<std::string> input_names_, output_names_;
};

// Step 1: candidates; every other op gets its reason.
std::vector<std::optional<Excluded>> FindCandidates(const ir::Graph& graph, const std::vector<NodeId>& topo,
                                                    const BuildJitPassOptions& options, const OpRegistry& registry) {
  std::vector<std::optional<Excluded>> excluded(topo.size());
  for (size_t i = 0; i < topo.size(); ++i) {
    const proto::OpDesc& op = graph.op(topo[i]);
    const OpInfo* info = registry.Find(op.type());
    if (info == nullptr || info->jit == JitLowering::kNone) {
      excluded[i] = Excluded{JitExclusion::kNotLowerable,
                             info == nullptr ? "op type is not registered" : "no JIT lowering in its registry entry"};
      continue;
    }
    std::vector<NodeId> vars = graph.inputs(topo[i]);
    for (NodeId v : graph.outputs(topo[i])) vars.push_back(v);
    auto undeclared = std::find_if(vars.begin(), vars.end(), [&](NodeId v) { return !graph.IsDeclared(v); });
    if (undeclared != vars.end()) {
      excluded[i] = Excluded{JitExclusion::kUndeclaredVar, "var '" + graph.VarName(*undeclared) + "' is not declared"};
    } else if (Contains(options.deny_ops, op.type())) {
      excluded[i] = Excluded{JitExclusion::kDenied, "type is in deny_ops"};
    } else if (!options.allow_ops.empty() && !Contains(options.allow_ops, op.type())) {
      excluded[i] = Excluded{JitExclusion::kNotAllowed, "type is not in allow_ops"};
    }
  }
  return excluded;
}

// The clusters of the candidates, by their first op in topological order.
struct Clusters {
  std::vector<std::vector<int>> members;  // by representative, topological order
  std::vector<int> kept;                  // representatives of kept clusters
};

// 3b. Horizontal merge: an op that no data edge joined to another stays
// alone; it joins the last such op of its type before it when that closes
// no cycle and no op of a larger cluster lies between them (which keeps
// live ranges as they were). The optimizer updates after a gradient
// average, which cuts them off their gradients' cluster, then compile as
// one cluster. Recompute copies stay where they are.
void MergeLoneOpsByType(const ir::Graph& graph, const std::vector<NodeId>& topo,
                        const std::vector<std::optional<Excluded>>& excluded, ClusterGraph& clusters) {
  const int n = static_cast<int>(topo.size());
  std::map<std::string, int> last_alone;  // op type -> last lone op of that type
  for (int i = 0; i < n; ++i) {
    if (excluded[i]) continue;
    if (clusters.Size(clusters.Find(i)) != 1) {  // in a cluster of step 3
      last_alone.clear();
      continue;
    }
    if (HasOpRole(graph.op(topo[i]), kOpRoleRecompute)) continue;
    const std::string& type = graph.op(topo[i]).type();
    auto it = last_alone.find(type);
    if (it == last_alone.end() || !clusters.TryMergeSiblings(clusters.Find(it->second), i)) last_alone[type] = i;
  }
}

// Steps 2 to 4 over the ops in topological order (`pos` maps node ids to
// positions): merge candidates along data edges without closing a cycle, keep
// the clusters of at least min_cluster_size ops, and give the ops of the
// others their reason.
Clusters MergeCandidates(const ir::Graph& graph, const std::vector<std::vector<NodeId>>& deps,
                         const std::vector<NodeId>& topo, const std::vector<int>& pos, int min_cluster_size,
                         const OpRegistry& registry,
                         std::vector<std::optional<Excluded>>& excluded) {
  const int n = static_cast<int>(topo.size());
  // 2. Dependencies: data and the graph's ordering constraints, so a path
  // through a write-after-read counts as a cycle too.
  std::vector<std::vector<int>> preds(n);
  for (int i = 0; i < n; ++i) {
    for (NodeId d : deps[topo[i]]) preds[i].push_back(pos[d]);
  }
  // A cluster-boundary op (a collective) comes after every op before it and
  // before every op after it: merging across it would close a cycle.
  for (int b = 0; b < n; ++b) {
    const OpInfo* info = registry.Find(graph.op(topo[b]).type());
    if (info == nullptr || !info->cluster_boundary) continue;
    for (int i = 0; i < b; ++i) preds[b].push_back(i);
    for (int i = b + 1; i < n; ++i) preds[i].push_back(b);
  }
  ClusterGraph clusters(preds);

  // 3. Merge along data edges, producers in topological order, each one's
  // consumers in topological order. The first refused merge of a cluster
  // explains it if it stays too small.
  std::vector<std::string> cycle_note(n);
  for (int u = 0; u < n; ++u) {
    if (excluded[u]) continue;
    std::vector<int> consumers;
    for (NodeId v : graph.outputs(topo[u])) {
      for (NodeId reader : graph.outputs(v)) {
        if (!excluded[pos[reader]]) consumers.push_back(pos[reader]);
      }
    }
    std::sort(consumers.begin(), consumers.end());
    consumers.erase(std::unique(consumers.begin(), consumers.end()), consumers.end());
    for (int c : consumers) {
      // A recompute copy (op_role "recompute") joins its backward consumers,
      // never the forward cluster whose values it avoids keeping.
      if (HasOpRole(graph.op(topo[c]), kOpRoleRecompute) && !HasOpRole(graph.op(topo[u]), kOpRoleRecompute)) {
        continue;
      }
      const int a = clusters.Find(u), b = clusters.Find(c);
      if (a == b) continue;
      const int through = clusters.TryContract(a, b);
      if (through < 0) {
        if (cycle_note[a].empty()) cycle_note[a] = std::move(cycle_note[b]);
        continue;
      }
      const std::string note = StrCat("merging ", graph.OpLabel(topo[u]), " with ", graph.OpLabel(topo[c]),
                                      " would create a cycle through ",
                                      clusters.Size(through) > 1 ? "the cluster of " : "", graph.OpLabel(topo[through]));
      if (cycle_note[a].empty()) cycle_note[a] = note;
      if (cycle_note[b].empty()) cycle_note[b] = note;
    }
  }

  MergeLoneOpsByType(graph, topo, excluded, clusters);

  // 4. Keep clusters of at least min_cluster_size ops.
  Clusters out;
  out.members.resize(n);
  for (int i = 0; i < n; ++i) {
    if (!excluded[i]) out.members[clusters.Find(i)].push_back(i);
  }
  for (int i = 0; i < n; ++i) {
    if (excluded[i]) continue;
    const int rep = clusters.Find(i);
    const int size = static_cast<int>(out.members[rep].size());
    if (size >= min_cluster_size) {
      if (out.members[rep].front() == i) out.kept.push_back(rep);
    } else if (!cycle_note[rep].empty()) {
      excluded[i] = Excluded{JitExclusion::kCycle, cycle_note[rep]};
    } else {
      excluded[i] = Excluded{JitExclusion::kClusterTooSmall, StrCat("its cluster has ", size, size == 1 ? " op" : " ops",
                                                                    ", fewer than min_cluster_size ", min_cluster_size)};
    }
  }
  return out;
}

// Step 5: hands the cluster to the sink and replaces it by its jit_launch op.
void ReplaceCluster(ir::Graph& graph, const ClusterIo& io, const SubgraphSink& sink, BuildJitReport* out) {
  const std::string key = sink(io.subgraph);
  KILN_CHECK(!key.empty(), "build_jit_pass: the subgraph sink returned an empty key");
  BuildJitReport::Cluster& c = out->clusters.emplace_back();
  c.key = key;
  for (NodeId op : io.ops) c.ops.push_back(graph.OpLabel(op));
  c.inputs = io.subgraph.inputs;
  c.outputs = io.subgraph.outputs;
  c.shape_only_inputs = io.shape_only_inputs;
  c.shape_only_outputs = io.subgraph.shape_only_outputs;
  c.donatable_inputs = io.subgraph.donatable_inputs;

  proto::OpDesc launch;
  launch.set_type("jit_launch");
  SetAttr(&launch, "compilation_key", Attribute(key));
  if (!io.shape_only_inputs.empty()) SetAttr(&launch, "shape_only_inputs", Attribute(io.shape_only_inputs));
  graph.ReplaceOps(io.ops, std::move(launch), {{"X", io.inputs}}, {{"Out", io.outputs}});
}

}  // namespace

BuildJitPass::BuildJitPass(BuildJitPassOptions options, SubgraphSink sink, BuildJitReport* report,
                           const OpRegistry& registry)
    : options_(std::move(options)), sink_(std::move(sink)), report_(report), registry_(registry) {
  KILN_CHECK(static_cast<bool>(sink_), "build_jit_pass: no subgraph sink");
  auto check_types = [&](const std::vector<std::string>& types, const char* what, const char* flag) {
    for (const auto& t : types) {
      if (registry_.Find(t) == nullptr) {
        ThrowInvalidArgument("build_jit_pass: ", what, " (--", flag, ") names unknown op type '", t, "'");
      }
    }
  };
  check_types(options_.allow_ops, "allow_ops", "jit_allow_ops");
  check_types(options_.deny_ops, "deny_ops", "jit_deny_ops");
  if (options_.min_cluster_size < 1) {
    ThrowInvalidArgument("build_jit_pass: min_cluster_size (--jit_min_cluster_size) must be at least 1, got ",
                         options_.min_cluster_size);
  }
}

bool BuildJitPass::Run(ir::Graph& graph) const { return Run(graph, report_); }

bool BuildJitPass::Run(ir::Graph& graph, BuildJitReport* report) const {
  const std::vector<NodeId> topo = graph.TopologicalOrder();
  const int n = static_cast<int>(topo.size());
  std::vector<int> pos(graph.NodeCapacity(), -1);
  for (int i = 0; i < n; ++i) pos[topo[i]] = i;

  std::vector<std::optional<Excluded>> excluded = FindCandidates(graph, topo, options_, registry_);
  const bool any_candidate = std::any_of(excluded.begin(), excluded.end(), [](const auto& e) { return !e; });
  Clusters clusters;
  std::vector<std::vector<NodeId>> deps;
  if (any_candidate) {
    deps = graph.AllOpDependencies();
    clusters = MergeCandidates(graph, deps, topo, pos, options_.min_cluster_size, registry_, excluded);
  }

  BuildJitReport out;
  for (int i = 0; i < n; ++i) {
    if (!excluded[i]) continue;
    out.excluded.push_back({graph.OpLabel(topo[i]), graph.op(topo[i]).type(), excluded[i]->reason,
                            excluded[i]->detail});
  }

  // Subgraphs and external vars, all on the unchanged graph; then the sink
  // and the replacement, cluster by cluster in order.
  std::vector<ClusterIo> ios;
  for (int rep : clusters.kept) {
    std::vector<NodeId> ops;
    for (int i : clusters.members[rep]) ops.push_back(topo[i]);
    ios.push_back(ClusterCollector(graph, deps, std::move(ops), options_.keep_vars, registry_).Collect());
  }
  for (const ClusterIo& io : ios) ReplaceCluster(graph, io, sink_, &out);

  if (report != nullptr) *report = std::move(out);
  return !ios.empty();
}

}  // namespace kiln
