#include "passes/recompute_pass.h"

#include <algorithm>
#include <map>
#include <utility>

#include "framework/error.h"
#include "framework/op_desc.h"

namespace kiln {
namespace {

using ir::Graph;
using ir::kNoNode;
using ir::NodeId;

// One accepted chain: forward ops to copy and where the copies go.
struct Chain {
  std::vector<int> ops;              // topological positions, producers first
  std::vector<std::string> renamed;  // chain outputs the backward reads
  int insert_before = 0;             // first backward reader of any of them
  int64_t saved = 0, transient = 0;  // bytes per sample
};

// Decides what to recompute, by var name over the ops in topological order
// (positions index `topo`).
class Planner {
 public:
  Planner(const Graph& graph, const RecomputePassOptions& options, const OpRegistry& registry)
      : graph_(graph), topo_(graph.TopologicalOrder()), options_(options) {
    const int n = static_cast<int>(topo_.size());
    for (int i = 0; i < n; ++i) {
      for (const auto& a : OutputVars(op(i))) {
        writers_[a].push_back(i);
        if (bwd_start_ < 0 && a.find(kGradSuffix) != std::string::npos) bwd_start_ = i;
      }
    }
    for (int i = 0; i < n; ++i) {
      const OpInfo* info = registry.Find(op(i).type());
      const std::set<std::string> shape_only =
          info != nullptr ? NoNeedBufferVars(*info, op(i)) : std::set<std::string>{};
      for (const auto& a : InputVars(op(i))) {
        readers_[a].push_back(i);
        if (bwd_start_ >= 0 && i >= bwd_start_ && !shape_only.count(a)) bwd_data_readers_[a].push_back(i);
      }
    }
  }

  const std::vector<NodeId>& topo() const { return topo_; }

  // Vars to recompute and their chains, in forward order.
  std::vector<Chain> Plan() {
    std::vector<Chain> chains;
    for (int i = 0; i < bwd_start_; ++i) {
      for (const auto& v : OutputVars(op(i))) {
        if (!Candidate(v)) continue;
        Chain c;
        if (!Extend(v, 0, &c.ops)) continue;
        std::set<std::string> leaves;
        for (int p : c.ops) {
          for (const auto& a : OutputVars(op(p))) {
            const bool read_back = bwd_data_readers_.count(a) > 0;
            if (read_back) c.renamed.push_back(a);
            (read_back ? c.saved : c.transient) += Bytes(a);
          }
          for (const auto& a : InputVars(op(p))) {
            if (!InChain(c, a)) leaves.insert(a);
          }
        }
        // Worth it only when it keeps at least as many bytes out of the
        // forward-to-backward window as the copies make in passing.
        if (c.saved < c.transient || c.saved == 0) continue;
        c.insert_before = static_cast<int>(topo_.size());
        bool kept = false;
        for (const auto& r : c.renamed) {
          kept = kept || keep(r);
          c.insert_before = std::min(c.insert_before, bwd_data_readers_[r].front());
        }
        if (kept) continue;
        for (const auto& r : c.renamed) recomputed_.insert(r);
        pinned_.insert(leaves.begin(), leaves.end());
        chains.push_back(std::move(c));
      }
    }
    return chains;
  }

 private:
  const proto::OpDesc& op(int i) const { return graph_.op(topo_[i]); }
  // The declared VarDesc of `v`, or nullptr.
  const proto::VarDesc* Desc(const std::string& v) const {
    const NodeId n = graph_.FindVar(v);
    return n == kNoNode || !graph_.IsDeclared(n) ? nullptr : &graph_.var(n);
  }
  bool keep(const std::string& v) const {
    const proto::VarDesc* d = Desc(v);
    return options_.keep_vars.count(v) > 0 || d == nullptr || d->persistable();
  }
  bool Candidate(const std::string& v) const {
    return !keep(v) && bwd_data_readers_.count(v) > 0 && !pinned_.count(v) && !recomputed_.count(v);
  }
  // Kept until the backward pass anyway: a chain may read it.
  bool Anchor(const std::string& v) const {
    const proto::VarDesc* d = Desc(v);
    if (d != nullptr && d->persistable()) return true;
    if (!writers_.count(v)) return true;  // fed
    return bwd_data_readers_.count(v) > 0 && !recomputed_.count(v);
  }
  bool InChain(const Chain& c, const std::string& v) const {
    for (int p : c.ops) {
      for (const auto& a : OutputVars(op(p))) {
        if (a == v) return true;
      }
    }
    return false;
  }
  int64_t Bytes(const std::string& v) const {
    const proto::VarDesc* d = Desc(v);
    if (d == nullptr) return 0;
    int64_t n = SizeOf(FromProto(d->dtype()));
    for (int64_t x : d->dims()) n *= x < 0 ? 1 : x;
    return n;
  }
  // Appends the ops computing v (producers first); false when it cannot be
  // recomputed from anchors within max_chain ops.
  bool Extend(const std::string& v, int depth, std::vector<int>* ops) const {
    auto w = writers_.find(v);
    if (w == writers_.end() || w->second.size() != 1) return false;
    const int p = w->second.front();
    if (p >= bwd_start_ || depth >= options_.max_chain) return false;
    if (!options_.op_types.count(op(p).type())) return false;
    for (const auto& out : OutputVars(op(p))) {
      if (writers_.at(out).size() != 1 || keep(out)) return false;
    }
    for (const auto& in : InputVars(op(p))) {
      if (Anchor(in)) continue;
      // An intermediate only this op reads (the scores before softmax).
      auto r = readers_.find(in);
      if (r == readers_.end() || r->second != std::vector<int>{p}) return false;
      if (!Extend(in, depth + 1, ops)) return false;
    }
    if (std::find(ops->begin(), ops->end(), p) == ops->end()) ops->push_back(p);
    return true;
  }

  const Graph& graph_;
  const std::vector<NodeId> topo_;
  const RecomputePassOptions& options_;
  int bwd_start_ = -1;
  std::map<std::string, std::vector<int>> writers_, readers_, bwd_data_readers_;
  std::set<std::string> pinned_, recomputed_;
};

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// A name no live var has: "<name>@RECOMPUTE", numbered when taken.
std::string CopyName(const Graph& graph, const std::string& name) {
  std::string out = name + "@RECOMPUTE";
  for (int k = 1; graph.FindVar(out) != kNoNode; ++k) out = name + "@RECOMPUTE_" + std::to_string(k);
  return out;
}

// Adds the copies of one chain's ops. Records original output node -> its
// copy in `copy_of` for every output of the chain.
void CopyChain(Graph& graph, const std::vector<NodeId>& topo, const Chain& chain, std::map<NodeId, NodeId>* copy_of) {
  for (int p : chain.ops) {
    const NodeId original = topo[p];
    proto::OpDesc desc = graph.op(original);
    SetAttr(&desc, kOpRoleAttr, Attribute(std::string(kOpRoleRecompute)));
    std::vector<ir::SlotNodes> inputs, outputs;
    for (const auto& slot : desc.inputs()) {
      ir::SlotNodes s{slot.name(), graph.InputSlot(original, slot.name())};
      for (NodeId& v : s.vars) {
        if (auto it = copy_of->find(v); it != copy_of->end()) v = it->second;
      }
      inputs.push_back(std::move(s));
    }
    for (const auto& slot : desc.outputs()) {
      ir::SlotNodes s{slot.name(), graph.OutputSlot(original, slot.name())};
      for (NodeId& v : s.vars) {
        if (v == kNoNode) continue;
        proto::VarDesc var = graph.var(v);
        var.set_name(CopyName(graph, graph.VarName(v)));
        v = (*copy_of)[v] = graph.AddVarNode(var);
      }
      outputs.push_back(std::move(s));
    }
    graph.AddOpNode(std::move(desc), inputs, outputs);
  }
}

}  // namespace

std::string RecomputeReport::ToString() const {
  if (vars.empty()) return "recomputed nothing";
  std::string s = "recomputed";
  for (size_t i = 0; i < vars.size(); ++i) {
    s += (i ? ", " : " ") + vars[i].name + " (";
    for (size_t k = 0; k < vars[i].op_types.size(); ++k) s += (k ? ", " : "") + vars[i].op_types[k];
    s += ")";
  }
  return s;
}

RecomputePass::RecomputePass(RecomputePassOptions options, RecomputeReport* report, const OpRegistry& registry)
    : options_(std::move(options)), report_(report), registry_(registry) {
  for (const auto& t : options_.op_types) {
    if (registry_.Find(t) == nullptr) {
      ThrowInvalidArgument("recompute_pass: op_types (--recompute_ops) names unknown op type '", t, "'");
    }
  }
  if (options_.max_chain < 1) {
    ThrowInvalidArgument("recompute_pass: max_chain must be at least 1, got ", options_.max_chain);
  }
}

bool RecomputePass::Run(ir::Graph& graph) const { return Run(graph, report_); }

bool RecomputePass::Run(ir::Graph& graph, RecomputeReport* report) const {
  RecomputeReport out;
  Planner planner(graph, options_, registry_);
  const std::vector<Chain> chains = planner.Plan();
  const std::vector<NodeId>& topo = planner.topo();
  std::vector<int> pos(graph.NodeCapacity(), -1);
  for (size_t i = 0; i < topo.size(); ++i) pos[topo[i]] = static_cast<int>(i);
  std::vector<const Chain*> by_insertion;
  for (const Chain& c : chains) {
    by_insertion.push_back(&c);
    RecomputeReport::Var& rv = out.vars.emplace_back();
    rv.name = c.renamed.front();
    for (int p : c.ops) rv.op_types.push_back(graph.op(topo[p]).type());
    rv.bytes_per_sample = c.saved;
  }
  // New ops sort after every older op among the ready ones (AddOpNode), so
  // each copy runs as late as it can: once no older op is ready, just before
  // its first reader. Adding the copies in the order of their first readers
  // keeps a copy needed later from running early, along with one needed now.
  std::stable_sort(by_insertion.begin(), by_insertion.end(),
                   [](const Chain* a, const Chain* b) { return a->insert_before < b->insert_before; });
  for (const Chain* c : by_insertion) {
    std::map<NodeId, NodeId> copy_of;
    CopyChain(graph, topo, *c, &copy_of);
    // Backward readers of the renamed vars from the insertion point on read
    // the copy; shape readers before it keep the forward var (its dims).
    for (const auto& [original, copy] : copy_of) {
      if (!Contains(c->renamed, graph.VarName(original))) continue;
      for (NodeId reader : graph.outputs(original)) {
        // Copies made before lie past `pos`; none reads `original`.
        if (reader < pos.size() && pos[reader] >= c->insert_before) graph.ReplaceInput(reader, original, copy);
      }
    }
  }
  if (report != nullptr) *report = std::move(out);
  return !chains.empty();
}

}  // namespace kiln
