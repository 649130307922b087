// Graphviz under a time budget (tools/dot_render.h): a drawing that runs out
// of time is stopped and says so, a missing or failing `dot` says so, and no
// call leaves a file behind or outlives its budget by much.
#include "tools/dot_render.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

// An executable script `name` in the test's temp dir.
std::string Script(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/kiln_dot_render_" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(DotRenderTest, SlowDotIsStoppedAtTheBudget) {
  // Reads nothing and never answers, like dot laying out a huge graph.
  const DotBudget budget{Script("slow", "exec sleep 60"), 0.5};
  const std::string big(4 << 20, 'x');  // more than a pipe holds
  const Clock::time_point t = Clock::now();
  const DotRender r = RenderDotSvg(big, budget);
  EXPECT_LT(SecondsSince(t), 5.0);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.not_installed);
  EXPECT_EQ(r.svg, "");
  EXPECT_NE(r.note.find("did not finish drawing within 0.5 s and was stopped"), std::string::npos) << r.note;
}

TEST(DotRenderTest, MissingAndFailingDotSayWhy) {
  const DotRender missing = RenderDotSvg("digraph g {}", {"kiln-no-such-dot-program", 5});
  EXPECT_TRUE(missing.not_installed);
  EXPECT_EQ(missing.note, "Graphviz is not installed (no `kiln-no-such-dot-program` on PATH)");

  const DotRender failed = RenderDotSvg("digraph g {}", {Script("fail", "cat >/dev/null; exit 3"), 5});
  EXPECT_FALSE(failed.timed_out);
  EXPECT_EQ(failed.svg, "");
  EXPECT_NE(failed.note.find("failed (exit status 3)"), std::string::npos) << failed.note;

  // Output that holds no <svg> element is a failure too, not a drawing.
  const DotRender garbage = RenderDotSvg("digraph g {}", {Script("garbage", "cat"), 5});
  EXPECT_EQ(garbage.svg, "");
  EXPECT_NE(garbage.note.find("failed (exit status 0)"), std::string::npos) << garbage.note;
}

TEST(DotRenderTest, AnswerIsTheSvgElement) {
  // Echoes its input back after a prolog, as dot writes its SVG.
  const std::string echo = Script("echo", "printf '<?xml version=\"1.0\"?>\\n'; cat");
  const std::string input = "<svg width=\"1\">" + std::string(1 << 20, 'y') + "</svg>\n";
  const DotRender r = RenderDotSvg(input, {echo, 10});
  EXPECT_EQ(r.note, "");
  EXPECT_EQ(r.svg, input) << "the whole answer arrives, without the prolog";
}

TEST(DotRenderTest, RealDotDrawsASmallGraph) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz is not installed";
  const DotRender r = RenderDotSvg("digraph g { a -> b; }", {"dot", 60});
  EXPECT_EQ(r.note, "");
  EXPECT_EQ(r.svg.rfind("<svg", 0), 0u);
  EXPECT_NE(r.svg.find("</svg>"), std::string::npos);
}

TEST(DotRenderTest, DrawingsShareOneBudget) {
  const std::string slow = Script("slow_all", "exec sleep 60");
  const Clock::time_point t = Clock::now();
  const std::vector<DotRender> rs = RenderAllDotSvg({"a", "b", "c"}, {slow, 0.5});
  EXPECT_LT(SecondsSince(t), 5.0) << "the three together, not 0.5 s each plus waiting";
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_NE(rs[0].note.find("did not finish within the 0.5 s the dump gives its drawings"), std::string::npos)
      << rs[0].note;
  for (int i = 1; i < 3; ++i) {
    EXPECT_TRUE(rs[i].timed_out);
    EXPECT_NE(rs[i].note.find("the drawings before it used up the 0.5 s Graphviz may take, so it was not started"), std::string::npos)
        << rs[i].note;
  }

  const std::vector<DotRender> missing = RenderAllDotSvg({"a", "b"}, {"kiln-no-such-dot-program", 5});
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_TRUE(missing[1].not_installed);
}

}  // namespace
}  // namespace kiln::tools
