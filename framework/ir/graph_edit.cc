// ir::Graph's edits: adding, reconnecting, renaming, removing and replacing nodes.
#include "framework/ir/graph.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "framework/error.h"
#include "framework/ir/graph_internal.h"
#include "framework/op_desc.h"

namespace kiln::ir {

using detail::EdgeProps;
using detail::NodeKind;

// ---- Impl helpers ------------------------------------------------------------

void Graph::Impl::SetSlot(NodeId op, bool is_input, std::string_view slot, const std::vector<NodeId>& new_vars) {
  CheckOp(op);
  for (NodeId v : new_vars) {
    if (v != kNoNode) CheckVar(v);
  }
  auto* slots = is_input ? g[op].op.mutable_inputs() : g[op].op.mutable_outputs();
  int idx = -1;
  for (int i = 0; i < slots->size(); ++i) {
    if (slots->Get(i).name() == slot) idx = i;
  }
  if (idx < 0) {
    idx = slots->size();
    slots->Add()->set_name(std::string(slot));
  }
  auto in_slot = [&](const auto& e) { return g[e].slot == idx; };
  if (is_input) {
    boost::remove_in_edge_if(op, in_slot, g);
  } else {
    boost::remove_out_edge_if(op, in_slot, g);
  }
  proto::OpDesc::Slot* s = slots->Mutable(idx);
  s->clear_args();
  for (NodeId v : new_vars) s->add_args(v == kNoNode ? std::string(kEmptyVarName) : Name(v));
  for (size_t i = 0; i < new_vars.size(); ++i) {
    if (new_vars[i] == kNoNode) continue;
    EdgeProps e{idx, static_cast<int>(i)};
    if (is_input) {
      boost::add_edge(new_vars[i], op, e, g);
    } else {
      boost::add_edge(op, new_vars[i], e, g);
    }
  }
}

void Graph::Impl::SetArgName(NodeId op, bool is_input, const EdgeProps& e, const std::string& name) {
  auto* slots = is_input ? g[op].op.mutable_inputs() : g[op].op.mutable_outputs();
  slots->Mutable(e.slot)->set_args(e.arg, name);
}

// ---- Edits ---------------------------------------------------------------------

NodeId Graph::AddVarNode(const proto::VarDesc& desc) {
  Impl& im = *impl_;
  int e = im.FindEntry(desc.name());
  if (e < 0) return im.NewVersion(im.NewEntry(desc, true));
  KILN_CHECK(im.vars[e].versions.empty(), "ir::Graph::AddVarNode: var '", desc.name(),
             "' exists (use AddVarVersion)");
  im.vars[e].desc = desc;
  im.vars[e].declared = true;
  return im.NewVersion(e);
}

NodeId Graph::AddVarVersion(std::string_view name) {
  int e = impl_->FindEntry(name);
  KILN_CHECK(e >= 0, "ir::Graph::AddVarVersion: unknown var '", name, "'");
  return impl_->NewVersion(e);
}

NodeId Graph::AddOpNode(proto::OpDesc desc, const std::vector<SlotNodes>& inputs,
                        const std::vector<SlotNodes>& outputs) {
  Impl& im = *impl_;
  desc.clear_inputs();
  desc.clear_outputs();
  NodeId op = im.NewOp(std::move(desc), im.next_order);
  for (const SlotNodes& s : inputs) im.SetSlot(op, true, s.slot, s.vars);
  for (const SlotNodes& s : outputs) im.SetSlot(op, false, s.slot, s.vars);
  return op;
}

NodeId Graph::AppendOp(proto::OpDesc desc) { return impl_->Append(std::move(desc), impl_->next_order); }

void Graph::SetInputs(NodeId op, std::string_view slot, const std::vector<NodeId>& vars) {
  impl_->SetSlot(op, true, slot, vars);
}
void Graph::SetOutputs(NodeId op, std::string_view slot, const std::vector<NodeId>& vars) {
  impl_->SetSlot(op, false, slot, vars);
}

void Graph::ReplaceInput(NodeId op, NodeId from, NodeId to) {
  Impl& im = *impl_;
  im.CheckOp(op);
  im.CheckVar(from);
  im.CheckVar(to);
  std::vector<EdgeProps> args;
  for (auto [it, end] = boost::in_edges(op, im.g); it != end; ++it) {
    if (boost::source(*it, im.g) == from) args.push_back(im.g[*it]);
  }
  KILN_CHECK(!args.empty(), "ir::Graph::ReplaceInput: ", im.OpLabel(op), " does not read ", im.VarLabel(from));
  boost::remove_in_edge_if(op, [&](const auto& e) { return boost::source(e, im.g) == from; }, im.g);
  for (const EdgeProps& e : args) {
    im.SetArgName(op, true, e, im.Name(to));
    boost::add_edge(to, op, e, im.g);
  }
}

void Graph::ReplaceOutput(NodeId op, NodeId from, NodeId to) {
  Impl& im = *impl_;
  im.CheckOp(op);
  im.CheckVar(from);
  im.CheckVar(to);
  std::vector<EdgeProps> args;
  for (auto [it, end] = boost::out_edges(op, im.g); it != end; ++it) {
    if (boost::target(*it, im.g) == from) args.push_back(im.g[*it]);
  }
  KILN_CHECK(!args.empty(), "ir::Graph::ReplaceOutput: ", im.OpLabel(op), " does not write ", im.VarLabel(from));
  boost::remove_out_edge_if(op, [&](const auto& e) { return boost::target(e, im.g) == from; }, im.g);
  for (const EdgeProps& e : args) {
    im.SetArgName(op, false, e, im.Name(to));
    boost::add_edge(op, to, e, im.g);
  }
}

void Graph::RenameVar(NodeId n, const std::string& name, NodeId after) {
  Impl& im = *impl_;
  im.CheckVar(n);
  int from = im.g[n].var;
  int to = im.FindEntry(name);
  if (to < 0) {
    proto::VarDesc desc = im.vars[from].desc;
    desc.set_name(name);
    to = im.NewEntry(desc, im.vars[from].declared);
  }
  if (after != kNoNode) {
    im.CheckVar(after);
    KILN_CHECK(im.g[after].var == to && after != n, "ir::Graph::RenameVar: node ", after,
               " is not another version of '", name, "'");
  }
  auto& old_versions = im.vars[from].versions;
  old_versions.erase(std::find(old_versions.begin(), old_versions.end(), n));
  auto& versions = im.vars[to].versions;
  auto pos = after == kNoNode ? versions.end() : std::find(versions.begin(), versions.end(), after) + 1;
  versions.insert(pos, n);
  im.g[n].var = to;
  for (auto [it, end] = boost::in_edges(n, im.g); it != end; ++it) {
    im.SetArgName(boost::source(*it, im.g), false, im.g[*it], name);
  }
  for (auto [it, end] = boost::out_edges(n, im.g); it != end; ++it) {
    im.SetArgName(boost::target(*it, im.g), true, im.g[*it], name);
  }
}

void Graph::RemoveNode(NodeId n) {
  Impl& im = *impl_;
  KILN_CHECK(im.Live(n), "ir::Graph::RemoveNode: node ", n, " is not live");
  if (im.g[n].kind == NodeKind::kVar) {
    for (auto [it, end] = boost::in_edges(n, im.g); it != end; ++it) {
      im.SetArgName(boost::source(*it, im.g), false, im.g[*it], kEmptyVarName);
    }
    for (auto [it, end] = boost::out_edges(n, im.g); it != end; ++it) {
      im.SetArgName(boost::target(*it, im.g), true, im.g[*it], kEmptyVarName);
    }
    auto& versions = im.Entry(n).versions;
    versions.erase(std::find(versions.begin(), versions.end(), n));
  } else {
    im.g[n].op.Clear();
  }
  boost::clear_vertex(n, im.g);
  im.g[n].removed = true;
}

NodeId Graph::ReplaceOps(const std::vector<NodeId>& ops, proto::OpDesc desc, const std::vector<SlotNodes>& inputs,
                         const std::vector<SlotNodes>& outputs) {
  Impl& im = *impl_;
  KILN_CHECK(!ops.empty(), "ir::Graph::ReplaceOps: empty group");
  std::vector<NodeId> group = ops;
  std::sort(group.begin(), group.end());
  group.erase(std::unique(group.begin(), group.end()), group.end());
  int64_t order = im.g[group.front()].order;
  std::set<NodeId> adjacent;
  for (NodeId o : group) {
    im.CheckOp(o);
    order = std::min(order, im.g[o].order);
    for (auto [it, end] = boost::in_edges(o, im.g); it != end; ++it) adjacent.insert(boost::source(*it, im.g));
    for (auto [it, end] = boost::out_edges(o, im.g); it != end; ++it) adjacent.insert(boost::target(*it, im.g));
  }
  for (NodeId o : group) RemoveNode(o);
  desc.clear_inputs();
  desc.clear_outputs();
  NodeId op = im.NewOp(std::move(desc), order);
  for (const SlotNodes& s : inputs) im.SetSlot(op, true, s.slot, s.vars);
  for (const SlotNodes& s : outputs) im.SetSlot(op, false, s.slot, s.vars);
  for (NodeId v : adjacent) {
    if (boost::in_degree(v, im.g) == 0 && boost::out_degree(v, im.g) == 0 && !im.Entry(v).desc.persistable()) {
      RemoveNode(v);
    }
  }
  return op;
}

}  // namespace kiln::ir
