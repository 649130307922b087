#include "passes/build_jit_pass.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "framework/attribute.h"
#include "framework/error.h"
#include "framework/op_desc.h"

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

// The op DAG contracted cluster by cluster. Stays acyclic: an edge a -> b is
// contracted only when no other path leads from a to b. Keeps a topological
// rank per live node valid across contractions, so the searches only visit
// nodes ranked between the two ends (Pearce and Kelly's dynamic topological
// order, as XLA's GraphCycles).
class ClusterGraph {
 public:
  // Node i is the op at topological position i; preds[i] holds positions < i.
  explicit ClusterGraph(const std::vector<std::vector<int>>& preds)
      : parent_(preds.size()), rank_(preds.size()), size_(preds.size(), 1), succ_(preds.size()),
        pred_(preds.size()), mark_(preds.size(), 0) {
    for (size_t i = 0; i < preds.size(); ++i) {
      parent_[i] = static_cast<int>(i);
      rank_[i] = static_cast<int>(i);
      for (int p : preds[i]) {
        KILN_CHECK(p < static_cast<int>(i), "build_jit_pass: dependency ", p, " -> ", i, " against topological order");
        pred_[i].insert(p);
        succ_[p].insert(static_cast<int>(i));
      }
    }
  }

  // The node that stands for `node`'s cluster.
  int Find(int node) {
    int root = node;
    while (parent_[root] != root) root = parent_[root];
    while (parent_[node] != root) node = std::exchange(parent_[node], root);
    return root;
  }
  int Size(int rep) const { return size_[rep]; }

  // Contracts the edge a -> b of two representatives into a, unless another
  // path from a to b exists (the merged node would lie on a cycle). Returns
  // -1 when contracted, else the first node of such a path.
  int TryContract(int a, int b) {
    KILN_CHECK(succ_[a].count(b) == 1 && rank_[a] < rank_[b], "build_jit_pass: no edge ", a, " -> ", b);
    // Nodes reachable from a (not through b) ranked before b; a node ranked
    // after b cannot reach b.
    std::vector<int> forward;
    std::vector<std::pair<int, int>> stack;  // (node, successor of a it was reached from)
    ++epoch_;
    for (int s : succ_[a]) {
      if (s != b && rank_[s] < rank_[b]) Visit(s, s, &stack);
    }
    while (!stack.empty()) {
      auto [x, root] = stack.back();
      stack.pop_back();
      forward.push_back(x);
      for (int y : succ_[x]) {
        if (y == b) return root;
        if (rank_[y] < rank_[b]) Visit(y, root, &stack);
      }
    }
    // Nodes reaching b (not through a) ranked after a. None is in `forward`
    // (that would be a path a -> b).
    std::vector<int> backward;
    ++epoch_;
    for (int p : pred_[b]) {
      if (p != a && rank_[p] > rank_[a]) Visit(p, p, &stack);
    }
    while (!stack.empty()) {
      int x = stack.back().first;
      stack.pop_back();
      backward.push_back(x);
      for (int y : pred_[x]) {
        if (rank_[y] > rank_[a]) Visit(y, y, &stack);
      }
    }
    Reorder(a, b, forward, backward);
    Merge(a, b);
    return -1;
  }

 private:
  void Visit(int node, int root, std::vector<std::pair<int, int>>* stack) {
    if (mark_[node] == epoch_) return;
    mark_[node] = epoch_;
    stack->push_back({node, root});
  }

  // Re-ranks the affected window so that `backward`, then the merged a+b,
  // then `forward` are in order, reusing the window's ranks: backward takes
  // the lowest (each rank only drops), forward the highest (each only rises),
  // so edges to and from the rest of the graph stay ordered. b's rank is
  // dropped.
  void Reorder(int a, int b, std::vector<int>& forward, std::vector<int>& backward) {
    auto by_rank = [&](int x, int y) { return rank_[x] < rank_[y]; };
    std::sort(forward.begin(), forward.end(), by_rank);
    std::sort(backward.begin(), backward.end(), by_rank);
    std::vector<int> pool = {rank_[a], rank_[b]};
    for (int x : forward) pool.push_back(rank_[x]);
    for (int x : backward) pool.push_back(rank_[x]);
    std::sort(pool.begin(), pool.end());
    size_t i = 0;
    for (int x : backward) rank_[x] = pool[i++];
    rank_[a] = pool[i++];
    ++i;
    for (int x : forward) rank_[x] = pool[i++];
  }

  void Merge(int a, int b) {
    parent_[b] = a;
    size_[a] += size_[b];
    for (int p : pred_[b]) {
      succ_[p].erase(b);
      if (p == a) continue;
      succ_[p].insert(a);
      pred_[a].insert(p);
    }
    for (int s : succ_[b]) {
      pred_[s].erase(b);
      succ_[a].insert(s);
      pred_[s].insert(a);
    }
    pred_[b].clear();
    succ_[b].clear();
  }

  std::vector<int> parent_;
  std::vector<int> rank_;
  std::vector<int> size_;
  std::vector<std::set<int>> succ_;
  std::vector<std::set<int>> pred_;
  std::vector<unsigned> mark_;
  unsigned epoch_ = 0;
};

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

// An op recompute_pass copied into the backward pass: it writes "...@RECOMPUTE".
bool IsRecomputeOp(const proto::OpDesc& op) {
  static const std::string kSuffix = "@RECOMPUTE";
  for (const auto& s : op.outputs()) {
    for (const auto& a : s.args()) {
      if (a.size() >= kSuffix.size() && a.compare(a.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
        return true;
      }
    }
  }
  return false;
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// Builds the subgraph and external vars of `ops` (topological order) on the
// unchanged graph.
ClusterIo CollectCluster(const ir::Graph& graph, std::vector<NodeId> ops, const std::set<std::string>& keep_vars,
                         const OpRegistry& registry) {
  ClusterIo io;
  io.ops = std::move(ops);
  const std::set<NodeId> in_cluster(io.ops.begin(), io.ops.end());
  auto inside = [&](NodeId op) { return op != ir::kNoNode && in_cluster.count(op) > 0; };

  JitSubgraph& sub = io.subgraph;
  sub.block.set_idx(0);
  sub.block.set_parent_idx(-1);
  std::set<std::string> declared;
  auto declare = [&](NodeId v) {
    if (declared.insert(graph.VarName(v)).second) *sub.block.add_vars() = graph.var(v);
  };
  std::set<NodeId> seen_inputs, seen_outputs;
  std::set<std::string> input_names, output_names;
  for (NodeId op : io.ops) {
    *sub.block.add_ops() = graph.op(op);
    for (NodeId v : graph.inputs(op)) {
      declare(v);
      if (inside(graph.Producer(v)) || !seen_inputs.insert(v).second) continue;
      // A second external version of one name would need an outside write
      // between two cluster ops: the merge check rules that cycle out.
      KILN_CHECK(input_names.insert(graph.VarName(v)).second, "build_jit_pass: cluster reads two outside versions of '",
                 graph.VarName(v), "'");
      io.inputs.push_back(v);
      sub.inputs.push_back(graph.VarName(v));
    }
    for (NodeId v : graph.outputs(op)) {
      declare(v);
      if (seen_outputs.count(v) > 0) continue;
      const std::string& name = graph.VarName(v);
      bool read_outside = false;
      for (NodeId reader : graph.outputs(v)) read_outside = read_outside || !inside(reader);
      bool overwritten_inside = false;
      const std::vector<NodeId> versions = graph.VarVersions(name);
      for (auto it = std::find(versions.begin(), versions.end(), v); it != versions.end(); ++it) {
        if (*it != v && inside(graph.Producer(*it))) overwritten_inside = true;
      }
      const bool kept = keep_vars.count(name) > 0 || graph.var(v).persistable();
      if (!read_outside && !(kept && !overwritten_inside)) continue;
      bool shape_only_outside = !kept && read_outside;
      for (NodeId reader : graph.outputs(v)) {
        if (inside(reader)) continue;
        const proto::OpDesc& desc = graph.op(reader);
        const OpInfo* info = registry.Find(desc.type());
        shape_only_outside = shape_only_outside && info != nullptr && NoNeedBufferVars(*info, desc).count(name) > 0;
      }
      seen_outputs.insert(v);
      KILN_CHECK(output_names.insert(name).second, "build_jit_pass: cluster writes two needed versions of '", name,
                 "'");
      io.outputs.push_back(v);
      sub.outputs.push_back(name);
      if (shape_only_outside && !input_names.count(name)) sub.shape_only_outputs.push_back(name);
    }
  }
  std::map<std::string, bool> shape_only;  // external input -> read only for its shape so far
  for (const auto& in : sub.inputs) shape_only[in] = true;
  for (NodeId op : io.ops) {
    const proto::OpDesc& desc = graph.op(op);
    const std::set<std::string> meta = NoNeedBufferVars(registry.Get(desc.type()), desc);
    for (NodeId v : graph.inputs(op)) {
      auto it = shape_only.find(graph.VarName(v));
      if (it != shape_only.end() && !meta.count(it->first)) it->second = false;
    }
  }
  for (const auto& in : sub.inputs) {
    if (shape_only[in]) io.shape_only_inputs.push_back(in);
  }
  // Donatable: the value is made in this program and nothing after the
  // cluster needs it (shape readers aside). Readers that must run before the
  // cluster (its ancestors) do not count.
  std::set<NodeId> before;
  std::vector<NodeId> stack(io.ops.begin(), io.ops.end());
  while (!stack.empty()) {
    const NodeId op = stack.back();
    stack.pop_back();
    for (NodeId dep : graph.OpDependencies(op)) {
      if (!inside(dep) && before.insert(dep).second) stack.push_back(dep);
    }
  }
  for (NodeId v : io.inputs) {
    const std::string& name = graph.VarName(v);
    if (shape_only[name] || graph.Producer(v) == ir::kNoNode || graph.var(v).persistable() || keep_vars.count(name)) {
      continue;
    }
    bool dies = true;
    for (NodeId reader : graph.outputs(v)) {
      if (inside(reader) || before.count(reader)) continue;
      const proto::OpDesc& desc = graph.op(reader);
      const OpInfo* info = registry.Find(desc.type());
      dies = dies && info != nullptr && NoNeedBufferVars(*info, desc).count(name) > 0;
    }
    if (dies) sub.donatable_inputs.push_back(name);
  }
  return io;
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

  // 1. Candidates; the others get their reason now.
  std::vector<std::optional<Excluded>> excluded(n);
  bool any_candidate = false;
  for (int i = 0; i < n; ++i) {
    const proto::OpDesc& op = graph.op(topo[i]);
    const OpInfo* info = registry_.Find(op.type());
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
    } else if (Contains(options_.deny_ops, op.type())) {
      excluded[i] = Excluded{JitExclusion::kDenied, "type is in deny_ops"};
    } else if (!options_.allow_ops.empty() && !Contains(options_.allow_ops, op.type())) {
      excluded[i] = Excluded{JitExclusion::kNotAllowed, "type is not in allow_ops"};
    } else {
      any_candidate = true;
    }
  }

  std::vector<std::vector<int>> members(n);  // by representative, topological order
  std::vector<int> kept;                     // representatives of kept clusters, by first op
  if (any_candidate) {
    // 2. Dependencies: data and the graph's ordering constraints, so a path
    // through a write-after-read counts as a cycle too.
    std::vector<std::vector<int>> preds(n);
    for (int i = 0; i < n; ++i) {
      for (NodeId d : graph.OpDependencies(topo[i])) preds[i].push_back(pos[d]);
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
        // A recompute copy (recompute_pass) joins its backward consumers,
        // never the forward cluster whose values it avoids keeping.
        if (IsRecomputeOp(graph.op(topo[c])) && !IsRecomputeOp(graph.op(topo[u]))) continue;
        const int a = clusters.Find(u), b = clusters.Find(c);
        if (a == b) continue;
        const int through = clusters.TryContract(a, b);
        if (through < 0) {
          if (cycle_note[a].empty()) cycle_note[a] = std::move(cycle_note[b]);
          continue;
        }
        const std::string note =
            StrCat("merging ", graph.OpLabel(topo[u]), " with ", graph.OpLabel(topo[c]),
                   " would create a cycle through ", clusters.Size(through) > 1 ? "the cluster of " : "",
                   graph.OpLabel(topo[through]));
        if (cycle_note[a].empty()) cycle_note[a] = note;
        if (cycle_note[b].empty()) cycle_note[b] = note;
      }
    }

    // 4. Keep clusters of at least min_cluster_size ops.
    for (int i = 0; i < n; ++i) {
      if (!excluded[i]) members[clusters.Find(i)].push_back(i);
    }
    for (int i = 0; i < n; ++i) {
      if (excluded[i]) continue;
      const int rep = clusters.Find(i);
      const int size = static_cast<int>(members[rep].size());
      if (size >= options_.min_cluster_size) {
        if (members[rep].front() == i) kept.push_back(rep);
      } else if (!cycle_note[rep].empty()) {
        excluded[i] = Excluded{JitExclusion::kCycle, cycle_note[rep]};
      } else {
        excluded[i] = Excluded{JitExclusion::kClusterTooSmall,
                                StrCat("its cluster has ", size, size == 1 ? " op" : " ops",
                                       ", fewer than min_cluster_size ", options_.min_cluster_size)};
      }
    }
  }

  BuildJitReport out;
  for (int i = 0; i < n; ++i) {
    if (!excluded[i]) continue;
    out.excluded.push_back({graph.OpLabel(topo[i]), graph.op(topo[i]).type(), excluded[i]->reason,
                            excluded[i]->detail});
  }

  // 5. Subgraphs and external vars, all on the unchanged graph; then the
  // sink and the replacement, cluster by cluster in order.
  std::vector<ClusterIo> ios;
  for (int rep : kept) {
    std::vector<NodeId> ops;
    for (int i : members[rep]) ops.push_back(topo[i]);
    ios.push_back(CollectCluster(graph, std::move(ops), options_.keep_vars, registry_));
  }
  for (ClusterIo& io : ios) {
    const std::string key = sink_(io.subgraph);
    KILN_CHECK(!key.empty(), "build_jit_pass: the subgraph sink returned an empty key");
    BuildJitReport::Cluster& c = out.clusters.emplace_back();
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

  if (report != nullptr) *report = std::move(out);
  return !ios.empty();
}

}  // namespace kiln
