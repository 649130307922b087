#include "tools/dump_graphs.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "framework/op_desc.h"
#include "tools/dump_report.h"

namespace kiln::tools {
namespace {

// "a, b, c and 4 more": a tooltip's list of names.
std::string NameList(const std::vector<std::string>& names) {
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

// Edges between the nodes of `node_of_op` (one per op of `block`): from the
// node whose op last wrote a var to every other node that reads it. Ops
// without a node (-1) neither read nor write for this purpose.
std::vector<ClusterLevelGraph::Edge> EdgesBetween(const proto::BlockDesc& block, const std::vector<int>& node_of_op) {
  std::vector<ClusterLevelGraph::Edge> edges;
  std::map<std::pair<int, int>, size_t> edge_of;
  std::set<std::pair<size_t, std::string>> listed;  // (edge, var) already in edges[edge].vars
  std::unordered_map<std::string, int> last_writer;
  for (int i = 0; i < block.ops_size(); ++i) {
    const int to = node_of_op[i];
    for (const auto& slot : block.ops(i).inputs()) {
      for (const auto& var : slot.args()) {
        auto w = last_writer.find(var);
        if (w == last_writer.end() || w->second == to) continue;
        auto [it, added] = edge_of.emplace(std::make_pair(w->second, to), edges.size());
        if (added) edges.push_back({w->second, to, {}});
        if (listed.emplace(it->second, var).second) edges[it->second].vars.push_back(var);
      }
    }
    for (const auto& slot : block.ops(i).outputs()) {
      for (const auto& var : slot.args()) {
        if (var != kEmptyVarName) last_writer[var] = to;
      }
    }
  }
  return edges;
}

std::string EdgeLabel(const std::vector<std::string>& vars) {
  return vars.size() == 1 ? vars[0] : std::to_string(vars.size()) + " vars";
}

// Big graphs: bound the network-simplex and crossing-minimisation rounds,
// which is where dot spends its time on long forward-to-backward edges.
const char* kFastLayout = "  nslimit=2;\n  nslimit1=2;\n  mclimit=0.2;\n";

}  // namespace

ClusterLevelGraph BuildClusterLevelGraph(const proto::ProgramDesc& program, const BuildJitReport& report) {
  const proto::BlockDesc& block = program.blocks(0);
  std::unordered_map<std::string, int> cluster_of_label;
  for (size_t c = 0; c < report.clusters.size(); ++c) {
    for (const auto& label : report.clusters[c].ops) cluster_of_label[label] = static_cast<int>(c);
  }
  std::unordered_map<std::string, std::string> why;  // op label -> reason
  for (const auto& e : report.excluded) {
    why.emplace(e.op, std::string(JitExclusionName(e.reason)) + (e.detail.empty() ? "" : " (" + e.detail + ")"));
  }
  ClusterLevelGraph g;
  std::vector<int> node_of_cluster(report.clusters.size(), -1);
  std::vector<int> node_of_op(block.ops_size());
  for (int i = 0; i < block.ops_size(); ++i) {
    const std::string label = OpLabel(block.ops(i), i);
    auto c = cluster_of_label.find(label);
    if (c != cluster_of_label.end() && node_of_cluster[c->second] >= 0) {
      node_of_op[i] = node_of_cluster[c->second];
      continue;
    }
    node_of_op[i] = static_cast<int>(g.nodes.size());
    ClusterLevelGraph::Node node;
    if (c != cluster_of_label.end()) {
      node.cluster = c->second;
      node_of_cluster[c->second] = node_of_op[i];
    } else {
      node.op_label = label;
      node.op_type = block.ops(i).type();
      auto w = why.find(label);
      if (w != why.end()) node.why = w->second;
    }
    g.nodes.push_back(std::move(node));
  }
  g.edges = EdgesBetween(block, node_of_op);
  return g;
}

std::string ClusterLevelDot(const ClusterLevelGraph& graph, const BuildJitReport& report,
                            const std::vector<std::string>& ids, const std::string& why) {
  std::string out = "// cluster granularity: " + why + "\ndigraph kiln {\n  rankdir=TB;\n" +
                    (graph.nodes.size() > 100 ? kFastLayout : "") + "  node [fontsize=10];\n";
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const ClusterLevelGraph::Node& node = graph.nodes[n];
    const std::string name = "  n" + std::to_string(n);
    if (node.cluster >= 0) {
      const auto& c = report.clusters[node.cluster];
      const std::string& id = ids[node.cluster];
      // A filled box that links to the cluster's section of index.html.
      out += name + " [shape=box, style=\"rounded,filled\", color=blue, fillcolor=" + DotQuote(ClusterFill(node.cluster)) +
             ", label=" + DotQuote(id + " jit_launch " + c.key + "\n" + std::to_string(c.ops.size()) + " ops") +
             ", URL=" + DotQuote("#" + id) + ", tooltip=" + DotQuote(id + ": " + std::to_string(c.ops.size()) +
             " ops; click for its kernels and its own graph") + "];\n";
      continue;
    }
    // An op left out of clusters: dashed, its reason on hover.
    out += name + " [shape=box, style=dashed, label=" + DotQuote(node.op_type) + ", tooltip=" +
           DotQuote(node.op_label + ": left out" + (node.why.empty() ? "" : ": " + node.why)) + "];\n";
  }
  for (const auto& e : graph.edges) {
    out += "  n" + std::to_string(e.from) + " -> n" + std::to_string(e.to) + " [label=" + DotQuote(EdgeLabel(e.vars)) +
           ", tooltip=" + DotQuote(NameList(e.vars)) + "];\n";
  }
  return out + "}\n";
}

size_t OpByOpNodes(const proto::BlockDesc& block) {
  return static_cast<size_t>(block.ops_size()) + static_cast<size_t>(block.vars_size());
}

std::string ClusterOwnDot(const JitSubgraph& sg, const std::string& id, size_t max_nodes) {
  const size_t nodes = OpByOpNodes(sg.block);
  if (nodes <= max_nodes) {
    proto::ProgramDesc program;
    *program.add_blocks() = sg.block;
    return "// cluster " + id + " op by op\n" + ClusteredDot(program, BuildJitReport{}, {});
  }
  // Its ops alone: one node per op, an edge where one reads what another wrote.
  std::string out = "// cluster " + id + ": its ops alone (" + std::to_string(nodes) +
                    " ops and vars, over the limit of " + std::to_string(max_nodes) +
                    "; subgraph.txt lists the vars)\ndigraph kiln {\n  rankdir=TB;\n" + kFastLayout +
                    "  node [fontsize=10, shape=box];\n";
  std::vector<int> node_of_op(sg.block.ops_size());
  for (int i = 0; i < sg.block.ops_size(); ++i) {
    node_of_op[i] = i;
    out += "  n" + std::to_string(i) + " [label=" + DotQuote(sg.block.ops(i).type()) +
           ", tooltip=" + DotQuote(OpLabel(sg.block.ops(i), i)) + "];\n";
  }
  for (const auto& e : EdgesBetween(sg.block, node_of_op)) {
    out += "  n" + std::to_string(e.from) + " -> n" + std::to_string(e.to) + " [tooltip=" + DotQuote(NameList(e.vars)) +
           "];\n";
  }
  return out + "}\n";
}

}  // namespace kiln::tools
