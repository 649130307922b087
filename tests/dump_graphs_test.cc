// The graphs kiln dump draws for big programs (tools/dump_graphs.h): the
// program at cluster granularity (one node per cluster and per op left out,
// an edge per var one reads that another wrote) and a cluster's own graph.
#include "tools/dump_graphs.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/op_desc.h"

namespace kiln::tools {
namespace {

using Edge = ClusterLevelGraph::Edge;

proto::OpDesc Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out}).Build();
}

// x -> relu -> a -> sigmoid -> b (cluster 0); a -> print_like -> c (left
// out); c -> relu -> d, add(b, d) -> e, then sgd updates w in place reading e
// (cluster 1); then a left-out op reads the updated w.
proto::ProgramDesc Program() {
  proto::ProgramDesc p;
  proto::BlockDesc* b = p.add_blocks();
  *b->add_ops() = Unary("relu", "x", "a");
  *b->add_ops() = Unary("sigmoid", "a", "b");
  *b->add_ops() = Unary("print_like", "a", "c");
  *b->add_ops() = Unary("relu", "c", "d");
  *b->add_ops() = OpBuilder("elementwise_add").In("X", {"b"}).In("Y", {"d"}).Out("Out", {"e"}).Build();
  *b->add_ops() = OpBuilder("sgd").In("Param", {"w"}).In("Grad", {"e"}).Out("ParamOut", {"w"}).Build();
  *b->add_ops() = Unary("print_like", "w", "f");
  for (const char* v : {"x", "a", "b", "c", "d", "e", "w", "f"}) b->add_vars()->set_name(v);
  return p;
}

BuildJitReport Report(const proto::ProgramDesc& p) {
  const proto::BlockDesc& b = p.blocks(0);
  BuildJitReport r;
  r.clusters.resize(2);
  r.clusters[0].key = "k0";
  r.clusters[0].ops = {OpLabel(b.ops(0), 0), OpLabel(b.ops(1), 1)};
  r.clusters[1].key = "k1";
  r.clusters[1].ops = {OpLabel(b.ops(3), 3), OpLabel(b.ops(4), 4), OpLabel(b.ops(5), 5)};
  r.excluded.push_back({OpLabel(b.ops(2), 2), "print_like", JitExclusion::kNotLowerable, ""});
  return r;
}

TEST(DumpGraphsTest, ClusterLevelGraphHasANodePerClusterAndPerOpLeftOut) {
  const proto::ProgramDesc p = Program();
  const ClusterLevelGraph g = BuildClusterLevelGraph(p, Report(p));
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[0].cluster, 0);
  EXPECT_EQ(g.nodes[1].cluster, -1);
  EXPECT_EQ(g.nodes[1].op_label, OpLabel(p.blocks(0).ops(2), 2));
  EXPECT_EQ(g.nodes[1].why, "not_lowerable");
  EXPECT_EQ(g.nodes[2].cluster, 1);
  EXPECT_EQ(g.nodes[3].cluster, -1);
  EXPECT_EQ(g.nodes[3].why, "") << "build_jit_pass gave no reason for it";
  ASSERT_EQ(g.edges.size(), 4u);
  // In order of first read; the read of a inside cluster 0 and of d inside
  // cluster 1 are no edges; w's reader sees the sgd's write, not the feed.
  EXPECT_EQ(g.edges[0].from, 0);
  EXPECT_EQ(g.edges[0].to, 1);
  EXPECT_EQ(g.edges[0].vars, std::vector<std::string>{"a"});
  EXPECT_EQ(g.edges[1].from, 1);
  EXPECT_EQ(g.edges[1].to, 2);
  EXPECT_EQ(g.edges[1].vars, std::vector<std::string>{"c"});
  EXPECT_EQ(g.edges[2].from, 0);
  EXPECT_EQ(g.edges[2].to, 2);
  EXPECT_EQ(g.edges[2].vars, std::vector<std::string>{"b"});
  EXPECT_EQ(g.edges[3].from, 2);
  EXPECT_EQ(g.edges[3].to, 3);
  EXPECT_EQ(g.edges[3].vars, std::vector<std::string>{"w"});
}

TEST(DumpGraphsTest, EdgeListsEachVarOnce) {
  proto::ProgramDesc p;
  proto::BlockDesc* b = p.add_blocks();
  *b->add_ops() = OpBuilder("split_like").In("X", {"x"}).Out("Out", {"a", "b"}).Build();
  *b->add_ops() = OpBuilder("elementwise_add").In("X", {"a"}).In("Y", {"b"}).Out("Out", {"c"}).Build();
  *b->add_ops() = OpBuilder("elementwise_mul").In("X", {"a"}).In("Y", {"c"}).Out("Out", {"d"}).Build();
  BuildJitReport r;
  r.clusters.resize(1);
  r.clusters[0].ops = {OpLabel(b->ops(1), 1), OpLabel(b->ops(2), 2)};
  const ClusterLevelGraph g = BuildClusterLevelGraph(p, r);
  ASSERT_EQ(g.nodes.size(), 2u);
  ASSERT_EQ(g.edges.size(), 1u);
  EXPECT_EQ(g.edges[0].vars, (std::vector<std::string>{"a", "b"}));
}

TEST(DumpGraphsTest, ClusterLevelDotLinksClustersAndDashesOpsLeftOut) {
  const proto::ProgramDesc p = Program();
  const BuildJitReport r = Report(p);
  const std::string dot = ClusterLevelDot(BuildClusterLevelGraph(p, r), r, {"c0", "c1"}, "too big");
  EXPECT_EQ(dot.rfind("// cluster granularity: too big\ndigraph kiln {\n", 0), 0u) << dot;
  EXPECT_NE(dot.find("label=\"c0 jit_launch k0\\n2 ops\", URL=\"#c0\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"c1 jit_launch k1\\n3 ops\", URL=\"#c1\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("n1 [shape=box, style=dashed, label=\"print_like\", tooltip=\"op #2 'print_like': left out: "
                     "not_lowerable\"]"),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  n0 -> n2 [label=\"b\", tooltip=\"b\"];\n"), std::string::npos) << dot;
  EXPECT_EQ(dot.find("nslimit"), std::string::npos) << "a small graph keeps dot's full layout";
}

TEST(DumpGraphsTest, ClusterOwnDotDrawsOpsAloneOverTheLimit) {
  JitSubgraph sg;
  sg.block = Program().blocks(0);
  EXPECT_EQ(OpByOpNodes(sg.block), 15u);
  const std::string full = ClusterOwnDot(sg, "c3", 15);
  EXPECT_EQ(full.rfind("// cluster c3 op by op\n", 0), 0u) << full;
  EXPECT_NE(full.find("shape=ellipse"), std::string::npos) << "vars are drawn";

  const std::string ops = ClusterOwnDot(sg, "c3", 14);
  EXPECT_NE(ops.find("its ops alone (15 ops and vars, over the limit of 14"), std::string::npos) << ops;
  EXPECT_EQ(ops.find("shape=ellipse"), std::string::npos) << ops;
  EXPECT_NE(ops.find("nslimit=2;"), std::string::npos) << ops;
  EXPECT_NE(ops.find("  n6 [label=\"print_like\""), std::string::npos) << ops;
  EXPECT_NE(ops.find("  n2 -> n3 [tooltip=\"c\"];\n"), std::string::npos) << ops;
  EXPECT_NE(ops.find("  n5 -> n6 [tooltip=\"w\"];\n"), std::string::npos) << ops;
  EXPECT_EQ(ops.find("n1 -> n2"), std::string::npos) << "sigmoid's output b goes to the add, not to print_like";
}

}  // namespace
}  // namespace kiln::tools
