// ir::Graph: construction and ToBlock, node, op and var queries, and Impl helpers shared by graph*.cc.
#include "framework/ir/graph.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "framework/data_type.h"
#include "framework/error.h"
#include "framework/ir/graph_internal.h"
#include "framework/op_desc.h"
#include "framework/tensor.h"

namespace kiln::ir {

using detail::EdgeProps;
using detail::NodeProps;
using detail::VarEntry;

// ---- Impl helpers ------------------------------------------------------------

std::vector<NodeId> Graph::Impl::Producers(NodeId v) const {
  std::vector<NodeId> out;
  for (auto [it, end] = boost::in_edges(v, g); it != end; ++it) out.push_back(boost::source(*it, g));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<NodeId> Graph::Impl::Readers(NodeId v) const {
  std::vector<NodeId> out;
  for (auto [it, end] = boost::out_edges(v, g); it != end; ++it) out.push_back(boost::target(*it, g));
  std::sort(out.begin(), out.end(), [&](NodeId a, NodeId b) { return Key(a) < Key(b); });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<NodeId> Graph::Impl::SlotVars(NodeId op, bool is_input, int slot) const {
  const auto& slots = is_input ? g[op].op.inputs() : g[op].op.outputs();
  std::vector<NodeId> out(slots.Get(slot).args_size(), kNoNode);
  auto place = [&](const EdgeProps& e, NodeId v) {
    if (e.slot == slot && e.arg >= 0 && e.arg < static_cast<int>(out.size())) out[e.arg] = v;
  };
  if (is_input) {
    for (auto [it, end] = boost::in_edges(op, g); it != end; ++it) place(g[*it], boost::source(*it, g));
  } else {
    for (auto [it, end] = boost::out_edges(op, g); it != end; ++it) place(g[*it], boost::target(*it, g));
  }
  return out;
}

std::vector<NodeId> Graph::Impl::AllSlotVars(NodeId op, bool is_input) const {
  std::vector<NodeId> out;
  int n = is_input ? g[op].op.inputs_size() : g[op].op.outputs_size();
  for (int s = 0; s < n; ++s) {
    for (NodeId v : SlotVars(op, is_input, s)) {
      if (v != kNoNode) out.push_back(v);
    }
  }
  return out;
}

NodeId Graph::Impl::Append(proto::OpDesc desc, int64_t order) {
  struct Arg {
    int slot, arg;
    std::string name;
  };
  std::vector<Arg> ins, outs;
  for (int s = 0; s < desc.inputs_size(); ++s) {
    const auto& slot = desc.inputs(s);
    for (int a = 0; a < slot.args_size(); ++a) {
      if (slot.args(a) != kEmptyVarName) ins.push_back({s, a, slot.args(a)});
    }
  }
  for (int s = 0; s < desc.outputs_size(); ++s) {
    const auto& slot = desc.outputs(s);
    for (int a = 0; a < slot.args_size(); ++a) {
      if (slot.args(a) != kEmptyVarName) outs.push_back({s, a, slot.args(a)});
    }
  }
  NodeId op = NewOp(std::move(desc), order);
  // Inputs first, so an op writing a name it reads sees that version read
  // and gets a new one.
  for (const Arg& a : ins) {
    int e = EntryOrUndeclared(a.name);
    NodeId v = vars[e].versions.empty() ? NewVersion(e) : vars[e].versions.back();
    boost::add_edge(v, op, EdgeProps{a.slot, a.arg}, g);
  }
  for (const Arg& a : outs) {
    int e = EntryOrUndeclared(a.name);
    NodeId v = kNoNode;
    if (!vars[e].versions.empty()) {
      NodeId latest = vars[e].versions.back();
      if (boost::in_degree(latest, g) == 0 && boost::out_degree(latest, g) == 0) v = latest;
    }
    if (v == kNoNode) v = NewVersion(e);
    boost::add_edge(op, v, EdgeProps{a.slot, a.arg}, g);
  }
  return op;
}

std::string Graph::Impl::OpLabel(NodeId op) const {
  const NodeProps& p = g[op];
  if (p.block_index >= 0) return kiln::OpLabel(p.op, static_cast<int>(p.block_index));
  return StrCat("new op '", p.op.type(), "' (node ", op, ")");
}

std::string Graph::Impl::VarLabel(NodeId v) const {
  const auto& versions = Entry(v).versions;
  auto it = std::find(versions.begin(), versions.end(), v);
  return StrCat("var '", Name(v), "' version ", it - versions.begin());
}

std::string Graph::Impl::ShapeString(NodeId v) const {
  const VarEntry& e = Entry(v);
  if (!e.declared) return "?";
  return std::string(DataTypeName(FromProto(e.desc.dtype()))) + DimsToString(VarDims(e.desc));
}

// ---- Construction ------------------------------------------------------------

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;
Graph::Graph(const Graph& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Graph& Graph::operator=(const Graph& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Graph::Graph(Graph&& other) noexcept = default;
Graph& Graph::operator=(Graph&& other) noexcept = default;

Graph Graph::FromBlock(const proto::BlockDesc& block) {
  Graph graph;
  Impl& im = *graph.impl_;
  im.block_idx = block.idx();
  im.parent_idx = block.parent_idx();
  for (const auto& v : block.vars()) {
    if (im.FindEntry(v.name()) >= 0) {
      ThrowInvalidArgument("block ", block.idx(), ": variable '", v.name(), "' is declared twice");
    }
    im.NewVersion(im.NewEntry(v, true));
  }
  for (int i = 0; i < block.ops_size(); ++i) {
    const proto::OpDesc& op = block.ops(i);
    if (op.type().empty()) ThrowInvalidArgument("block ", block.idx(), ": op #", i, " has no type");
    NodeId n = im.Append(op, i);
    im.g[n].block_index = i;
  }
  return graph;
}

proto::BlockDesc Graph::ToBlock() const {
  const Impl& im = *impl_;
  std::string cycle;
  std::vector<NodeId> order = im.Topo(&cycle);
  if (!cycle.empty()) throw Error(ErrorCode::kInternal, "ir::Graph::ToBlock: " + cycle);
  proto::BlockDesc block;
  block.set_idx(im.block_idx);
  block.set_parent_idx(im.parent_idx);
  for (const VarEntry& e : im.vars) {
    if (e.declared && !e.versions.empty()) *block.add_vars() = e.desc;
  }
  for (NodeId o : order) *block.add_ops() = im.g[o].op;
  return block;
}

// ---- Nodes -------------------------------------------------------------------

bool Graph::IsOp(NodeId n) const { return impl_->IsOp(n); }
bool Graph::IsVar(NodeId n) const { return impl_->IsVar(n); }
bool Graph::IsRemoved(NodeId n) const { return n < impl_->Capacity() && impl_->g[n].removed; }

std::vector<NodeId> Graph::OpNodes() const {
  std::vector<NodeId> out;
  for (NodeId n = 0; n < impl_->Capacity(); ++n) {
    if (impl_->IsOp(n)) out.push_back(n);
  }
  return out;
}
std::vector<NodeId> Graph::VarNodes() const {
  std::vector<NodeId> out;
  for (NodeId n = 0; n < impl_->Capacity(); ++n) {
    if (impl_->IsVar(n)) out.push_back(n);
  }
  return out;
}
size_t Graph::NumNodes() const {
  size_t count = 0;
  for (NodeId n = 0; n < impl_->Capacity(); ++n) count += impl_->Live(n) ? 1 : 0;
  return count;
}
size_t Graph::NodeCapacity() const { return impl_->Capacity(); }

std::vector<NodeId> Graph::inputs(NodeId n) const {
  KILN_CHECK(impl_->Live(n), "ir::Graph: node ", n, " is not live");
  if (impl_->IsOp(n)) return impl_->AllSlotVars(n, true);
  return impl_->Producers(n);
}
std::vector<NodeId> Graph::outputs(NodeId n) const {
  KILN_CHECK(impl_->Live(n), "ir::Graph: node ", n, " is not live");
  if (impl_->IsOp(n)) return impl_->AllSlotVars(n, false);
  return impl_->Readers(n);
}

// ---- Ops -----------------------------------------------------------------------

const proto::OpDesc& Graph::op(NodeId n) const {
  impl_->CheckOp(n);
  return impl_->g[n].op;
}
proto::OpDesc* Graph::mutable_op(NodeId n) {
  impl_->CheckOp(n);
  return &impl_->g[n].op;
}

static int SlotIndex(const google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>& slots, std::string_view name) {
  for (int i = 0; i < slots.size(); ++i) {
    if (slots.Get(i).name() == name) return i;
  }
  return -1;
}

std::vector<NodeId> Graph::InputSlot(NodeId op, std::string_view slot) const {
  impl_->CheckOp(op);
  int idx = SlotIndex(impl_->g[op].op.inputs(), slot);
  return idx < 0 ? std::vector<NodeId>{} : impl_->SlotVars(op, true, idx);
}
std::vector<NodeId> Graph::OutputSlot(NodeId op, std::string_view slot) const {
  impl_->CheckOp(op);
  int idx = SlotIndex(impl_->g[op].op.outputs(), slot);
  return idx < 0 ? std::vector<NodeId>{} : impl_->SlotVars(op, false, idx);
}
int64_t Graph::OpOrder(NodeId op) const {
  impl_->CheckOp(op);
  return impl_->g[op].order;
}
std::string Graph::OpLabel(NodeId op) const {
  impl_->CheckOp(op);
  return impl_->OpLabel(op);
}

// ---- Vars ----------------------------------------------------------------------

const proto::VarDesc& Graph::var(NodeId n) const {
  impl_->CheckVar(n);
  return impl_->Entry(n).desc;
}
proto::VarDesc* Graph::mutable_var(NodeId n) {
  impl_->CheckVar(n);
  return &impl_->Entry(n).desc;
}
const std::string& Graph::VarName(NodeId n) const {
  impl_->CheckVar(n);
  return impl_->Name(n);
}
int Graph::VarVersion(NodeId n) const {
  impl_->CheckVar(n);
  const auto& versions = impl_->Entry(n).versions;
  return static_cast<int>(std::find(versions.begin(), versions.end(), n) - versions.begin());
}
bool Graph::IsDeclared(NodeId n) const {
  impl_->CheckVar(n);
  return impl_->Entry(n).declared;
}
std::string Graph::VarShapeString(NodeId n) const {
  impl_->CheckVar(n);
  return impl_->ShapeString(n);
}
NodeId Graph::FindVar(std::string_view name) const {
  int e = impl_->FindEntry(name);
  if (e < 0 || impl_->vars[e].versions.empty()) return kNoNode;
  return impl_->vars[e].versions.back();
}
std::vector<NodeId> Graph::VarVersions(std::string_view name) const {
  int e = impl_->FindEntry(name);
  return e < 0 ? std::vector<NodeId>{} : impl_->vars[e].versions;
}
NodeId Graph::Producer(NodeId var) const {
  impl_->CheckVar(var);
  auto producers = impl_->Producers(var);
  return producers.empty() ? kNoNode : producers.front();
}

}  // namespace kiln::ir
