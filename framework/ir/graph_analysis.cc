// ir::Graph's analyses: op dependencies, topological order, cycles, Verify.
#include "framework/ir/graph.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>

#include "framework/error.h"
#include "framework/ir/graph_internal.h"
#include "framework/op_desc.h"

namespace kiln::ir {

using detail::BoostGraph;
using detail::EdgeProps;
using detail::NodeKind;
using detail::OrderKey;
using detail::VarEntry;

// ---- Impl helpers ------------------------------------------------------------

// preds[op]: ops that must run before op. Data: producers of its inputs
// (op itself for a self-loop). Ordering: the writer of version k of a name
// follows the readers and the writer of version k-1; when k-1 has no writer
// the walk continues to older versions, so the chain of writers carries the
// order even after a pass removed a producer.
std::vector<std::vector<NodeId>> Graph::Impl::Preds() const {
  std::vector<std::vector<NodeId>> preds(Capacity());
  for (NodeId o = 0; o < Capacity(); ++o) {
    if (!IsOp(o)) continue;
    for (auto [it, end] = boost::in_edges(o, g); it != end; ++it) {
      NodeId v = boost::source(*it, g);
      for (auto [pi, pe] = boost::in_edges(v, g); pi != pe; ++pi) preds[o].push_back(boost::source(*pi, g));
    }
  }
  for (const VarEntry& e : vars) {
    for (size_t k = 1; k < e.versions.size(); ++k) {
      NodeId vk = e.versions[k];
      if (boost::in_degree(vk, g) == 0) continue;
      std::vector<NodeId> before;
      for (size_t j = k; j-- > 0;) {
        NodeId vj = e.versions[j];
        for (auto [it, end] = boost::out_edges(vj, g); it != end; ++it) before.push_back(boost::target(*it, g));
        for (auto [it, end] = boost::in_edges(vj, g); it != end; ++it) before.push_back(boost::source(*it, g));
        if (boost::in_degree(vj, g) > 0) break;
      }
      for (auto [it, end] = boost::in_edges(vk, g); it != end; ++it) {
        NodeId w = boost::source(*it, g);
        for (NodeId x : before) {
          if (x != w) preds[w].push_back(x);
        }
      }
    }
  }
  for (auto& p : preds) {
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
  }
  return preds;
}

std::vector<NodeId> Graph::Impl::Topo(std::string* cycle) const {
  const auto preds = Preds();
  std::vector<size_t> indeg(Capacity(), 0);
  std::vector<std::vector<NodeId>> succs(Capacity());
  std::priority_queue<OrderKey, std::vector<OrderKey>, std::greater<OrderKey>> ready;
  size_t num_ops = 0;
  for (NodeId o = 0; o < Capacity(); ++o) {
    if (!IsOp(o)) continue;
    ++num_ops;
    indeg[o] = preds[o].size();
    for (NodeId p : preds[o]) succs[p].push_back(o);
    if (indeg[o] == 0) ready.push(Key(o));
  }
  std::vector<NodeId> order;
  std::vector<bool> done(Capacity(), false);
  while (!ready.empty()) {
    NodeId o = ready.top().second;
    ready.pop();
    order.push_back(o);
    done[o] = true;
    for (NodeId s : succs[o]) {
      if (--indeg[s] == 0) ready.push(Key(s));
    }
  }
  if (order.size() == num_ops) return order;

  std::vector<NodeId> left;
  for (NodeId o = 0; o < Capacity(); ++o) {
    if (IsOp(o) && !done[o]) left.push_back(o);
  }
  std::sort(left.begin(), left.end(), [&](NodeId a, NodeId b) { return Key(a) < Key(b); });
  if (cycle != nullptr) *cycle = DescribeCycle(left, preds);
  order.insert(order.end(), left.begin(), left.end());
  return order;
}

// `left` holds every op on a cycle plus ops downstream of one; the
// strongly connected components tell them apart.
std::string Graph::Impl::DescribeCycle(const std::vector<NodeId>& left,
                                       const std::vector<std::vector<NodeId>>& preds) const {
  using Digraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  std::unordered_map<NodeId, size_t> local;
  for (size_t i = 0; i < left.size(); ++i) local[left[i]] = i;
  Digraph d(left.size());
  std::vector<bool> self_loop(left.size(), false);
  for (size_t i = 0; i < left.size(); ++i) {
    for (NodeId p : preds[left[i]]) {
      auto it = local.find(p);
      if (it == local.end()) continue;
      boost::add_edge(it->second, i, d);
      if (it->second == i) self_loop[i] = true;
    }
  }
  std::vector<int> comp(left.size());
  boost::strong_components(d, boost::make_iterator_property_map(comp.begin(), boost::get(boost::vertex_index, d)));
  std::unordered_map<int, size_t> comp_size;
  for (int c : comp) ++comp_size[c];
  // `left` is sorted by (order, id): the first op on a cycle names it.
  for (size_t i = 0; i < left.size(); ++i) {
    if (comp_size[comp[i]] < 2 && !self_loop[i]) continue;
    std::string msg = "cycle through";
    const char* sep = " ";
    for (size_t j = 0; j < left.size(); ++j) {
      if (comp[j] != comp[i]) continue;
      msg += sep + OpLabel(left[j]);
      sep = ", ";
    }
    return msg;
  }
  return "cycle among unscheduled ops";  // unreachable: Kahn stops only on a cycle
}

// Op args and edges: one edge per non-@EMPTY@ arg, to a var of that name.
void Graph::Impl::VerifyOpArgs(NodeId o, std::vector<std::string>* problems) const {
  for (bool is_input : {true, false}) {
    const auto& slots = is_input ? g[o].op.inputs() : g[o].op.outputs();
    std::vector<std::vector<int>> count(slots.size());
    for (int s = 0; s < slots.size(); ++s) count[s].assign(slots.Get(s).args_size(), 0);
    auto check_edge = [&](const EdgeProps& e, NodeId v) {
      if (e.slot < 0 || e.slot >= slots.size() || e.arg < 0 || e.arg >= slots.Get(e.slot).args_size()) {
        problems->push_back(StrCat(OpLabel(o), ": edge to node ", v, " names no ", is_input ? "input" : "output",
                                   " arg (slot ", e.slot, ", arg ", e.arg, ")"));
        return;
      }
      ++count[e.slot][e.arg];
      const std::string& arg = slots.Get(e.slot).args(e.arg);
      if (IsVar(v) && arg != Name(v)) {
        problems->push_back(StrCat(OpLabel(o), " ", is_input ? "input " : "output ", slots.Get(e.slot).name(),
                                   "[", e.arg, "] is '", arg, "' but its edge goes to var '", Name(v), "'"));
      }
    };
    if (is_input) {
      for (auto [it, end] = boost::in_edges(o, g); it != end; ++it) check_edge(g[*it], boost::source(*it, g));
    } else {
      for (auto [it, end] = boost::out_edges(o, g); it != end; ++it) check_edge(g[*it], boost::target(*it, g));
    }
    for (int s = 0; s < slots.size(); ++s) {
      for (int a = 0; a < slots.Get(s).args_size(); ++a) {
        int want = slots.Get(s).args(a) == kEmptyVarName ? 0 : 1;
        if (count[s][a] == want) continue;
        problems->push_back(StrCat(OpLabel(o), " ", is_input ? "input " : "output ", slots.Get(s).name(), "[", a,
                                   "] '", slots.Get(s).args(a), "' has ", count[s][a], " edges, expected ", want));
      }
    }
  }
}

// ---- Analysis ------------------------------------------------------------------

std::vector<NodeId> Graph::OpDependencies(NodeId op) const {
  impl_->CheckOp(op);
  return impl_->Preds()[op];
}

std::vector<std::vector<NodeId>> Graph::AllOpDependencies() const { return impl_->Preds(); }

std::vector<NodeId> Graph::TopologicalOrder() const {
  std::string cycle;
  std::vector<NodeId> order = impl_->Topo(&cycle);
  if (!cycle.empty()) throw Error(ErrorCode::kInternal, "ir::Graph: " + cycle);
  return order;
}

std::string Graph::VerifyMessage() const {
  const Impl& im = *impl_;
  const BoostGraph& g = im.g;
  std::vector<std::string> problems;

  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    NodeId s = boost::source(*it, g), t = boost::target(*it, g);
    if (!im.Live(s) || !im.Live(t)) {
      problems.push_back(StrCat("edge ", s, " -> ", t, " touches a removed node"));
    } else if (g[s].kind == g[t].kind) {
      problems.push_back(StrCat("edge ", s, " -> ", t, " joins two ", g[s].kind == NodeKind::kOp ? "ops" : "vars"));
    }
  }

  for (NodeId o = 0; o < im.Capacity(); ++o) {
    if (im.IsOp(o)) im.VerifyOpArgs(o, &problems);
  }

  for (NodeId v = 0; v < im.Capacity(); ++v) {
    if (!im.IsVar(v)) continue;
    const auto& versions = im.Entry(v).versions;
    if (std::find(versions.begin(), versions.end(), v) == versions.end()) {
      problems.push_back(StrCat("var node ", v, " '", im.Name(v), "' is missing from its versions"));
      continue;
    }
    auto producers = im.Producers(v);
    if (producers.size() > 1) {
      std::string msg = StrCat(im.VarLabel(v), " has ", producers.size(), " producers:");
      for (NodeId p : producers) msg += " " + im.OpLabel(p);
      problems.push_back(msg);
    }
  }
  for (const auto& [name, e] : im.var_index) {
    if (im.vars[e].desc.name() != name) {
      problems.push_back(StrCat("var '", name, "' has a VarDesc named '", im.vars[e].desc.name(), "'"));
    }
  }

  std::string cycle;
  im.Topo(&cycle);
  if (!cycle.empty()) problems.push_back(cycle);

  // Var entries iterate in hash order above; sort for a stable message.
  std::sort(problems.begin(), problems.end());
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "\n") + p;
  return out;
}

void Graph::Verify() const {
  std::string msg = VerifyMessage();
  if (!msg.empty()) throw Error(ErrorCode::kInternal, "ir::Graph::Verify failed:\n" + msg);
}

}  // namespace kiln::ir
