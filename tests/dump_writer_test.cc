// What kiln dump writes when Graphviz is slow (tools/dump_writer.h): the text
// files all arrive, the drawing is stopped at the budget, index.html says so
// in the graph's place, and no SVG is written; a program over the size limit
// is drawn at cluster granularity.
#include "tools/dump_writer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "framework/file_util.h"
#include "framework/program_io.h"

namespace kiln::tools {
namespace {

DumpSource AddRelu() {
  DumpSource src;
  src.program = LoadProgram(std::string(KILN_SOURCE_DIR) + "/tests/data/dump/add_relu.pbtxt");
  src.keep = ProgramFeedsAndResults(src.program.blocks(0));
  src.description = "add_relu";
  src.batch = 8;
  return src;
}

TEST(DumpWriterTest, SlowGraphvizIsStoppedAndTheDumpIsWhole) {
  const std::string dir = ::testing::TempDir() + "/kiln_dump_writer_slow";
  ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
  const std::string slow = ::testing::TempDir() + "/kiln_dump_writer_slow_dot";
  std::ofstream(slow) << "#!/bin/sh\nexec sleep 60\n";
  ::chmod(slow.c_str(), 0755);
  DumpSource src = AddRelu();
  src.graphs.program = slow;
  src.graphs.seconds = 0.5;
  src.graphs.max_nodes = 0;  // everything is big
  const auto start = std::chrono::steady_clock::now();
  const DumpResult r = WriteDump(src, dir);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  EXPECT_EQ(r.clusters, 1u);
  for (const char* f : {"index.md", "program.before.pbtxt", "program.after.pbtxt", "cluster_c0/subgraph.txt"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
  EXPECT_EQ(ReadFile(dir + "/program.dot").rfind("// cluster granularity: the program has 6 ops and vars, over the "
                                             "drawing limit of 0",
                                             0),
            0u);
  EXPECT_NE(ReadFile(dir + "/cluster_c0/graph.dot").find("its ops alone"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/program.svg"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/cluster_c0/graph.svg"));
  const std::string html = ReadFile(dir + "/index.html");
  EXPECT_NE(html.find("The program graph is not drawn: Graphviz (`" + slow + "`) did not finish within the 0.5 s"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("Not drawn: the drawings before it used up the 0.5 s Graphviz may take, so it was not started."), std::string::npos) << html;
  EXPECT_EQ(html.rfind("</html>\n"), html.size() - 8);
}

TEST(DumpWriterTest, SmallProgramIsDrawnOpByOp) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz is not installed";
  const std::string dir = ::testing::TempDir() + "/kiln_dump_writer_small";
  ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
  DumpSource src = AddRelu();
  src.graphs.seconds = 120;
  WriteDump(src, dir);
  EXPECT_EQ(ReadFile(dir + "/program.dot").rfind("digraph kiln {", 0), 0u);
  EXPECT_EQ(ReadFile(dir + "/cluster_c0/graph.dot").rfind("// cluster c0 op by op\n", 0), 0u);
  const std::string svg = ReadFile(dir + "/cluster_c0/graph.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(ReadFile(dir + "/index.html").find(svg), std::string::npos) << "the cluster's section shows its graph";
  EXPECT_TRUE(std::filesystem::exists(dir + "/program.svg"));
}

}  // namespace
}  // namespace kiln::tools
