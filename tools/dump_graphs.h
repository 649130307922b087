// The graphs kiln dump draws, sized so that Graphviz finishes: the program op
// by op when it is small, at cluster granularity when it is not (one node per
// jit_launch cluster and one per op left out); and each cluster's own graph,
// op by op with its vars when small, its ops alone when not.
#pragma once

#include <string>
#include <vector>

#include "framework/jit_subgraph.h"
#include "framework/proto/framework.pb.h"
#include "passes/build_jit_pass.h"

namespace kiln::tools {

// What to draw and how long Graphviz may take.
struct GraphLimits {
  // A graph with more nodes (ops plus vars) is drawn coarser: the program at
  // cluster granularity, a cluster by its ops alone. dot's layout time grows
  // much faster than the node count (the ResNet's 680 nodes take minutes).
  size_t max_nodes = 300;
  double seconds = 6;           // for all the drawings of one dump together
  std::string program = "dot";  // the Graphviz command (tests name a script)
};

// The program at cluster granularity.
struct ClusterLevelGraph {
  struct Node {
    int cluster = -1;      // index into the report's clusters, or -1 for an op left out
    std::string op_label;  // the op left out ("op #3 'matmul'"), or ""
    std::string op_type;
    std::string why;       // why it was left out, when build_jit_pass said
  };
  struct Edge {
    int from = 0;
    int to = 0;
    std::vector<std::string> vars;  // what `to` reads that `from` wrote, in program order
  };
  std::vector<Node> nodes;  // in program order of their first op
  std::vector<Edge> edges;  // in order of first read
};

// Block 0 of `program` (the program build_jit_pass saw, before it) at
// cluster granularity: an op whose label is among report.clusters[i].ops
// joins node i; every other op is a node of its own. An edge runs from the
// node whose op last wrote a var to each other node that reads it. Linear
// in the program's size (up to a log factor).
ClusterLevelGraph BuildClusterLevelGraph(const proto::ProgramDesc& program, const BuildJitReport& report);

// Graphviz of that graph: clusters as filled boxes (labelled with ids[i],
// the key and the op count, linked to "#<id>"), ops left out dashed with
// their reason on hover, edges labelled with the var (or the var count).
std::string ClusterLevelDot(const ClusterLevelGraph& graph, const BuildJitReport& report,
                            const std::vector<std::string>& ids, const std::string& why);

// The number of nodes an op-by-op drawing of `block` has: ops plus vars.
size_t OpByOpNodes(const proto::BlockDesc& block);

// Graphviz of cluster `id`'s own ops: op by op with its vars when
// OpByOpNodes(sg.block) <= max_nodes, else its ops alone with an edge per
// op that reads what another wrote.
std::string ClusterOwnDot(const JitSubgraph& sg, const std::string& id, size_t max_nodes);

}  // namespace kiln::tools
