// ir::Graph's representation for the graph*.cc files: Boost.Graph node and edge properties, Graph::Impl.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "framework/error.h"
#include "framework/ir/graph.h"

namespace kiln::ir {
namespace detail {

enum class NodeKind { kOp, kVar };

struct NodeProps {
  NodeKind kind = NodeKind::kVar;
  bool removed = false;
  // Op nodes.
  proto::OpDesc op;
  int64_t order = 0;
  int64_t block_index = -1;  // index in the source block; -1 for added ops
  // Var nodes: index into Graph::Impl::vars.
  int var = -1;
};

// One argument: index of the slot in the op's inputs (var -> op edge) or
// outputs (op -> var edge) and the position in that slot.
struct EdgeProps {
  int slot = 0;
  int arg = 0;
};

// vecS vertices give dense NodeIds; they are never erased from the boost
// graph (removal = clear_vertex + tombstone), so ids stay valid. vecS out-edge
// lists allow the parallel edges of `matmul(x, x)`.
using BoostGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, NodeProps, EdgeProps>;

struct VarEntry {
  proto::VarDesc desc;
  bool declared = false;
  std::vector<NodeId> versions;  // live var nodes of this name, oldest first
};

using OrderKey = std::pair<int64_t, NodeId>;

}  // namespace detail

struct Graph::Impl {
  detail::BoostGraph g;
  std::vector<detail::VarEntry> vars;  // declaration order, new names appended
  std::unordered_map<std::string, int> var_index;
  int32_t block_idx = 0;
  int32_t parent_idx = -1;
  int64_t next_order = 0;

  size_t Capacity() const { return boost::num_vertices(g); }
  bool Live(NodeId n) const { return n < Capacity() && !g[n].removed; }
  bool IsOp(NodeId n) const { return Live(n) && g[n].kind == detail::NodeKind::kOp; }
  bool IsVar(NodeId n) const { return Live(n) && g[n].kind == detail::NodeKind::kVar; }
  void CheckOp(NodeId n) const { KILN_CHECK(IsOp(n), "ir::Graph: node ", n, " is not a live op node"); }
  void CheckVar(NodeId n) const { KILN_CHECK(IsVar(n), "ir::Graph: node ", n, " is not a live var node"); }

  detail::VarEntry& Entry(NodeId v) { return vars[g[v].var]; }
  const detail::VarEntry& Entry(NodeId v) const { return vars[g[v].var]; }
  const std::string& Name(NodeId v) const { return Entry(v).desc.name(); }
  detail::OrderKey Key(NodeId op) const { return {g[op].order, op}; }

  int FindEntry(std::string_view name) const {
    auto it = var_index.find(std::string(name));
    return it == var_index.end() ? -1 : it->second;
  }
  int NewEntry(const proto::VarDesc& desc, bool declared) {
    int e = static_cast<int>(vars.size());
    vars.push_back(detail::VarEntry{desc, declared, {}});
    var_index[desc.name()] = e;
    return e;
  }
  int EntryOrUndeclared(const std::string& name) {
    int e = FindEntry(name);
    if (e >= 0) return e;
    proto::VarDesc desc;
    desc.set_name(name);
    return NewEntry(desc, false);
  }
  NodeId NewVersion(int entry) {
    NodeId v = boost::add_vertex(g);
    g[v].kind = detail::NodeKind::kVar;
    g[v].var = entry;
    vars[entry].versions.push_back(v);
    return v;
  }
  NodeId NewOp(proto::OpDesc desc, int64_t order) {
    NodeId o = boost::add_vertex(g);
    g[o].kind = detail::NodeKind::kOp;
    g[o].op = std::move(desc);
    g[o].order = order;
    next_order = std::max(next_order, order + 1);
    return o;
  }

  // ---- graph.cc
  // Producer ops of a var by id; reader ops by (order, id); each once.
  std::vector<NodeId> Producers(NodeId v) const;
  std::vector<NodeId> Readers(NodeId v) const;
  // The var nodes of one slot, kNoNode for @EMPTY@ (or an arg without edge).
  std::vector<NodeId> SlotVars(NodeId op, bool is_input, int slot) const;
  // The var nodes of every slot, @EMPTY@ skipped.
  std::vector<NodeId> AllSlotVars(NodeId op, bool is_input) const;
  // Connects desc's args by name, as if the op were appended to the block.
  NodeId Append(proto::OpDesc desc, int64_t order);
  std::string OpLabel(NodeId op) const;
  std::string VarLabel(NodeId v) const;
  std::string ShapeString(NodeId v) const;

  // ---- graph_edit.cc
  void SetSlot(NodeId op, bool is_input, std::string_view slot, const std::vector<NodeId>& new_vars);
  void SetArgName(NodeId op, bool is_input, const detail::EdgeProps& e, const std::string& name);

  // ---- graph_analysis.cc
  // preds[op]: ops that must run before op (see graph_analysis.cc).
  std::vector<std::vector<NodeId>> Preds() const;
  // Kahn's algorithm with the smallest (order, id) first. On a cycle, sets
  // *cycle to a description of one strongly connected component and appends
  // the unscheduled ops by (order, id).
  std::vector<NodeId> Topo(std::string* cycle) const;
  std::string DescribeCycle(const std::vector<NodeId>& left, const std::vector<std::vector<NodeId>>& preds) const;
  // Appends a line to *problems for each op arg out of sync with the edges.
  void VerifyOpArgs(NodeId o, std::vector<std::string>* problems) const;
};

}  // namespace kiln::ir
