#include "framework/ir/graph.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>

#include "framework/attribute.h"
#include "framework/data_type.h"
#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/tensor.h"

namespace kiln::ir {
namespace {

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

std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

struct Graph::Impl {
  BoostGraph g;
  std::vector<VarEntry> vars;  // declaration order, new names appended
  std::unordered_map<std::string, int> var_index;
  int32_t block_idx = 0;
  int32_t parent_idx = -1;
  int64_t next_order = 0;

  size_t Capacity() const { return boost::num_vertices(g); }
  bool Live(NodeId n) const { return n < Capacity() && !g[n].removed; }
  bool IsOp(NodeId n) const { return Live(n) && g[n].kind == NodeKind::kOp; }
  bool IsVar(NodeId n) const { return Live(n) && g[n].kind == NodeKind::kVar; }
  void CheckOp(NodeId n) const { KILN_CHECK(IsOp(n), "ir::Graph: node ", n, " is not a live op node"); }
  void CheckVar(NodeId n) const { KILN_CHECK(IsVar(n), "ir::Graph: node ", n, " is not a live var node"); }

  VarEntry& Entry(NodeId v) { return vars[g[v].var]; }
  const VarEntry& Entry(NodeId v) const { return vars[g[v].var]; }
  const std::string& Name(NodeId v) const { return Entry(v).desc.name(); }
  OrderKey Key(NodeId op) const { return {g[op].order, op}; }

  int FindEntry(std::string_view name) const {
    auto it = var_index.find(std::string(name));
    return it == var_index.end() ? -1 : it->second;
  }
  int NewEntry(const proto::VarDesc& desc, bool declared) {
    int e = static_cast<int>(vars.size());
    vars.push_back(VarEntry{desc, declared, {}});
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
    g[v].kind = NodeKind::kVar;
    g[v].var = entry;
    vars[entry].versions.push_back(v);
    return v;
  }
  NodeId NewOp(proto::OpDesc desc, int64_t order) {
    NodeId o = boost::add_vertex(g);
    g[o].kind = NodeKind::kOp;
    g[o].op = std::move(desc);
    g[o].order = order;
    next_order = std::max(next_order, order + 1);
    return o;
  }

  std::vector<NodeId> Producers(NodeId v) const {
    std::vector<NodeId> out;
    for (auto [it, end] = boost::in_edges(v, g); it != end; ++it) out.push_back(boost::source(*it, g));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  std::vector<NodeId> Readers(NodeId v) const {
    std::vector<NodeId> out;
    for (auto [it, end] = boost::out_edges(v, g); it != end; ++it) out.push_back(boost::target(*it, g));
    std::sort(out.begin(), out.end(), [&](NodeId a, NodeId b) { return Key(a) < Key(b); });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // The var nodes of one slot, kNoNode for @EMPTY@ (or an arg without edge).
  std::vector<NodeId> SlotVars(NodeId op, bool is_input, int slot) const {
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
  std::vector<NodeId> AllSlotVars(NodeId op, bool is_input) const {
    std::vector<NodeId> out;
    int n = is_input ? g[op].op.inputs_size() : g[op].op.outputs_size();
    for (int s = 0; s < n; ++s) {
      for (NodeId v : SlotVars(op, is_input, s)) {
        if (v != kNoNode) out.push_back(v);
      }
    }
    return out;
  }

  void SetSlot(NodeId op, bool is_input, std::string_view slot, const std::vector<NodeId>& new_vars) {
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

  // Connects desc's args by name, as if the op were appended to the block.
  NodeId Append(proto::OpDesc desc, int64_t order) {
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

  void SetArgName(NodeId op, bool is_input, const EdgeProps& e, const std::string& name) {
    auto* slots = is_input ? g[op].op.mutable_inputs() : g[op].op.mutable_outputs();
    slots->Mutable(e.slot)->set_args(e.arg, name);
  }

  std::string OpLabel(NodeId op) const {
    const NodeProps& p = g[op];
    if (p.block_index >= 0) return kiln::OpLabel(p.op, static_cast<int>(p.block_index));
    return StrCat("new op '", p.op.type(), "' (node ", op, ")");
  }
  std::string VarLabel(NodeId v) const {
    const auto& versions = Entry(v).versions;
    auto it = std::find(versions.begin(), versions.end(), v);
    return StrCat("var '", Name(v), "' version ", it - versions.begin());
  }

  // preds[op]: ops that must run before op. Data: producers of its inputs
  // (op itself for a self-loop). Ordering: the writer of version k of a name
  // follows the readers and the writer of version k-1; when k-1 has no writer
  // the walk continues to older versions, so the chain of writers carries the
  // order even after a pass removed a producer.
  std::vector<std::vector<NodeId>> Preds() const {
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

  // Kahn's algorithm with the smallest (order, id) first. On a cycle, sets
  // *cycle to a description of one strongly connected component and appends
  // the unscheduled ops by (order, id).
  std::vector<NodeId> Topo(std::string* cycle) const {
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
  std::string DescribeCycle(const std::vector<NodeId>& left, const std::vector<std::vector<NodeId>>& preds) const {
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

  std::string ShapeString(NodeId v) const {
    const VarEntry& e = Entry(v);
    if (!e.declared) return "?";
    return std::string(DataTypeName(FromProto(e.desc.dtype()))) + DimsToString(VarDims(e.desc));
  }
};

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

  // Op args and edges: one edge per non-@EMPTY@ arg, to a var of that name.
  for (NodeId o = 0; o < im.Capacity(); ++o) {
    if (!im.IsOp(o)) continue;
    for (bool is_input : {true, false}) {
      const auto& slots = is_input ? g[o].op.inputs() : g[o].op.outputs();
      std::vector<std::vector<int>> count(slots.size());
      for (int s = 0; s < slots.size(); ++s) count[s].assign(slots.Get(s).args_size(), 0);
      auto check_edge = [&](const EdgeProps& e, NodeId v) {
        if (e.slot < 0 || e.slot >= slots.size() || e.arg < 0 || e.arg >= slots.Get(e.slot).args_size()) {
          problems.push_back(StrCat(im.OpLabel(o), ": edge to node ", v, " names no ", is_input ? "input" : "output",
                                    " arg (slot ", e.slot, ", arg ", e.arg, ")"));
          return;
        }
        ++count[e.slot][e.arg];
        const std::string& arg = slots.Get(e.slot).args(e.arg);
        if (im.IsVar(v) && arg != im.Name(v)) {
          problems.push_back(StrCat(im.OpLabel(o), " ", is_input ? "input " : "output ", slots.Get(e.slot).name(),
                                    "[", e.arg, "] is '", arg, "' but its edge goes to var '", im.Name(v), "'"));
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
          problems.push_back(StrCat(im.OpLabel(o), " ", is_input ? "input " : "output ", slots.Get(s).name(), "[", a,
                                    "] '", slots.Get(s).args(a), "' has ", count[s][a], " edges, expected ", want));
        }
      }
    }
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

// ---- Output --------------------------------------------------------------------

std::string Graph::ToDot(std::string_view graph_name) const {
  const Impl& im = *impl_;
  const BoostGraph& g = im.g;
  std::ostringstream os;
  os << "digraph \"" << DotEscape(std::string(graph_name)) << "\" {\n";
  os << "  node [fontname=\"monospace\"];\n";
  for (NodeId n = 0; n < im.Capacity(); ++n) {
    if (!im.Live(n)) continue;
    if (g[n].kind == NodeKind::kOp) {
      os << "  n" << n << " [shape=box, label=\"" << DotEscape(g[n].op.type()) << "\"];\n";
      continue;
    }
    const VarEntry& e = im.Entry(n);
    std::string label = DotEscape(e.desc.name());
    int version = static_cast<int>(std::find(e.versions.begin(), e.versions.end(), n) - e.versions.begin());
    if (version > 0) label += StrCat(" (v", version, ")");
    label += "\\n" + im.ShapeString(n);
    os << "  n" << n << " [shape=ellipse, label=\"" << label << "\"";
    if (e.desc.persistable()) os << ", style=filled, fillcolor=lightgrey";
    if (!e.declared) os << ", style=dashed";
    os << "];\n";
  }
  struct DotEdge {
    NodeId src, dst;
    int slot, arg;
    bool operator<(const DotEdge& o) const {
      return std::tie(src, slot, arg, dst) < std::tie(o.src, o.slot, o.arg, o.dst);
    }
  };
  std::vector<DotEdge> edges;
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    edges.push_back({boost::source(*it, g), boost::target(*it, g), g[*it].slot, g[*it].arg});
  }
  std::sort(edges.begin(), edges.end());
  for (const DotEdge& e : edges) {
    bool into_op = g[e.dst].kind == NodeKind::kOp;
    const proto::OpDesc& op = g[into_op ? e.dst : e.src].op;
    const auto& slot = into_op ? op.inputs(e.slot) : op.outputs(e.slot);
    std::string label = slot.name();
    if (slot.args_size() > 1) label += StrCat("[", e.arg, "]");
    os << "  n" << e.src << " -> n" << e.dst << " [label=\"" << DotEscape(label) << "\"];\n";
  }
  os << "}\n";
  return os.str();
}

std::string Graph::Print() const {
  const Impl& im = *impl_;
  const BoostGraph& g = im.g;
  std::string cycle;
  std::vector<NodeId> order = im.Topo(&cycle);

  std::ostringstream os;
  if (!cycle.empty()) os << "# " << cycle << "\n";
  std::vector<long> num(im.Capacity(), -1);
  long counter = 0;
  // Vars nobody writes, in declaration order then version order.
  for (const VarEntry& e : im.vars) {
    for (NodeId v : e.versions) {
      if (boost::in_degree(v, g) > 0) continue;
      num[v] = counter++;
      os << "%" << num[v] << " = " << (e.desc.persistable() ? "param" : "var") << " \"" << e.desc.name()
         << "\" : " << im.ShapeString(v) << "\n";
    }
  }
  for (NodeId o : order) {
    num[o] = counter++;
    std::vector<std::vector<NodeId>> outs;
    const proto::OpDesc& op = g[o].op;
    for (int s = 0; s < op.outputs_size(); ++s) {
      outs.push_back(im.SlotVars(o, false, s));
      for (NodeId v : outs.back()) {
        if (v != kNoNode && num[v] < 0) num[v] = counter++;
      }
    }
    auto ref = [&](NodeId v) { return v == kNoNode ? std::string("_") : StrCat("%", num[v]); };

    std::string attrs;
    AttrMap sorted;
    for (const auto& a : op.attrs()) sorted[a.name()] = AttrFromProto(a);
    for (const auto& [name, value] : sorted) attrs += (attrs.empty() ? "" : ", ") + name + "=" + AttrToString(value);
    std::string args;
    for (int s = 0; s < op.inputs_size(); ++s) {
      for (NodeId v : im.SlotVars(o, true, s)) args += (args.empty() ? "" : ", ") + ref(v);
    }
    std::string call = op.type() + (attrs.empty() ? "" : "[" + attrs + "]") + "(" + args + ")";

    std::vector<NodeId> flat;
    for (const auto& slot : outs) flat.insert(flat.end(), slot.begin(), slot.end());
    std::string names;
    for (NodeId v : flat) {
      if (v != kNoNode) names += (names.empty() ? "" : ", ") + im.Name(v);
    }
    if (flat.size() == 1 && flat[0] != kNoNode) {
      os << ref(flat[0]) << " = " << call << " : " << im.ShapeString(flat[0]);
    } else {
      os << "%" << num[o] << " = " << call << " -> (";
      for (size_t i = 0; i < flat.size(); ++i) {
        os << (i ? ", " : "") << ref(flat[i]);
        if (flat[i] != kNoNode) os << " : " << im.ShapeString(flat[i]);
      }
      os << ")";
    }
    if (!names.empty()) os << "  # " << names;
    os << "\n";
  }
  return os.str();
}

}  // namespace kiln::ir
