// ir::Graph's output: Graphviz (ToDot) and the readable IR (Print).
#include "framework/ir/graph.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "framework/attribute.h"
#include "framework/error.h"
#include "framework/ir/graph_internal.h"

namespace kiln::ir {

using detail::BoostGraph;
using detail::NodeKind;
using detail::VarEntry;

namespace {

std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

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
