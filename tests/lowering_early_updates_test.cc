// Lowering step early_updates (compiler/lowering/early_updates.h).
#include <gtest/gtest.h>

#include <cctype>
#include <sstream>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

proto::OpDesc Momentum(const std::string& w, const std::string& scale = "") {
  OpBuilder b("momentum");
  b.In("Param", {w}).In("Grad", {w + "_grad"}).In("Velocity", {w + "_v"}).In("LearningRate", {"lr"});
  if (!scale.empty()) b.In("GradScale", {scale});
  return b.Out("ParamOut", {w}).Out("VelocityOut", {w + "_v"}).Build();
}

// The backward of two layers, h = relu(x w1), y = h w2, given dy, with the
// momentum updates listed after it, as a program lists them.
LoweringCase TwoLayers(const std::string& name) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w1"}).Out("Out", {"z"}).Build(),
           OpBuilder("relu").In("X", {"z"}).Out("Out", {"h"}).Build(),
           OpBuilder("matmul_grad")
               .In("X", {"h"})
               .In("Y", {"w2"})
               .In("Out@GRAD", {"dy"})
               .Out("X@GRAD", {"dh"})
               .Out("Y@GRAD", {"w2_grad"})
               .Build(),
           OpBuilder("relu_grad").In("Out", {"h"}).In("Out@GRAD", {"dh"}).Out("X@GRAD", {"dz"}).Build(),
           OpBuilder("matmul_grad")
               .In("X", {"x"})
               .In("Y", {"w1"})
               .In("Out@GRAD", {"dz"})
               .Out("X@GRAD", {kEmptyVarName})
               .Out("Y@GRAD", {"w1_grad"})
               .Build(),
           Momentum("w2"),
           Momentum("w1")};
  c.inputs = {{"x", {16, 12}}, {"w1", {12, 24}}, {"w2", {24, 10}}, {"dy", {16, 10}},
              {"w2_v", {24, 10}}, {"lr", {1}}, {"w1_v", {12, 24}}};
  c.outputs = {"w2", "w2_v", "w1", "w1_v"};
  return c;
}

// The instruction of the listing that writes `var` ("3: ew_1 (... -> %9:var,
// ...)"); -1 when none does.
int Writer(const jit::CompiledObject& obj, const std::string& var) {
  std::istringstream in(obj.Listing());
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0]))) continue;
    const size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    for (const char* end : {",", ")"}) {
      if (line.find(":" + var + end, arrow) != std::string::npos) return std::stoi(line);
    }
  }
  return -1;
}

TEST(EarlyUpdatesTest, EachUpdateRunsRightAfterItsGradient) {
  const LoweringCase c = TwoLayers("early_updates");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "early_updates")) << obj->lowering;
  // w2's update runs before w1's gradient is made, right after its own.
  EXPECT_LT(Writer(*obj, "w2_v"), Writer(*obj, "w1_grad")) << obj->Listing();
  EXPECT_GT(Writer(*obj, "w2_v"), Writer(*obj, "w2_grad")) << obj->Listing();
}

// The update of a parameter a layout op reads (a view of it may be read
// under another name) stays where it is.
TEST(EarlyUpdatesTest, DoesNotMoveTheUpdateOfAParameterALayoutOpReads) {
  LoweringCase c = TwoLayers("early_updates_not_fired_view");
  c.ops.insert(c.ops.begin() + 5, OpBuilder("reshape2")
                                      .In("X", {"w2"})
                                      .Out("Out", {"w2_flat"})
                                      .Attr("shape", std::vector<int64_t>{240})
                                      .Build());
  c.ops.insert(c.ops.begin() + 6, OpBuilder("scale").In("X", {"w2_flat"}).Out("Out", {"w2_scaled"}).Build());
  c.outputs.push_back("w2_scaled");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  // w1's update moves; w2's stays after the view's reader.
  EXPECT_GT(Writer(*obj, "w2_v"), Writer(*obj, "w2_scaled")) << obj->Listing();
  EXPECT_GT(Writer(*obj, "w2_v"), Writer(*obj, "w1_grad")) << obj->Listing();
  const size_t step = obj->lowering.find(". early_updates: ");
  ASSERT_NE(step, std::string::npos) << obj->lowering;
  const size_t matched = obj->lowering.find('\n', step) + 1;
  const std::string line = obj->lowering.substr(matched, obj->lowering.find('\n', matched) - matched);
  EXPECT_NE(line.find("#8 momentum"), std::string::npos) << line;
  EXPECT_EQ(line.find("#7 momentum"), std::string::npos) << line;
}

// Updates scaled by a clip over every gradient wait for the clip.
TEST(EarlyUpdatesTest, DoesNotFireWhenTheUpdatesReadAClipOfEveryGradient) {
  LoweringCase c = TwoLayers("early_updates_not_fired_clip");
  c.ops.resize(5);
  c.ops.push_back(OpBuilder("clip_by_global_norm").In("X", {"w2_grad", "w1_grad"}).Out("Scale", {"s"}).Build());
  c.ops.push_back(Momentum("w2", "s"));
  c.ops.push_back(Momentum("w1", "s"));
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "early_updates")) << obj->lowering;
}

}  // namespace
}  // namespace kiln::test
