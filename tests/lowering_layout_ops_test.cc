// Lowering step layout_ops (compiler/lowering/layout_ops.h): reshapes are
// views, transposes generated copies, never the reference kernel.
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

proto::OpDesc Reshape(const std::string& x, const std::string& out, std::vector<int64_t> shape) {
  return OpBuilder("reshape2").In("X", {x}).Out("Out", {out}).Attr("shape", shape).Build();
}
proto::OpDesc Transpose(const std::string& x, const std::string& out, std::vector<int64_t> axis) {
  return OpBuilder("transpose2").In("X", {x}).Out("Out", {out}).Attr("axis", axis).Build();
}
proto::OpDesc Relu(const std::string& x, const std::string& out) {
  return OpBuilder("relu").In("X", {x}).Out("Out", {out}).Build();
}

// The attention's head split and merge: relu -> reshape -> transpose ->
// relu -> transpose back -> reshape back.
TEST(LayoutOpsTest, ReshapesAreViewsAndTransposesGeneratedCopies) {
  LoweringCase c;
  c.name = "layout_ops";
  c.ops = {Relu("x", "a"), Reshape("a", "r", {0, 0, 4, 8}), Transpose("r", "t", {0, 2, 1, 3}), Relu("t", "u"),
           Transpose("u", "v", {0, 2, 1, 3}), Reshape("v", "y", {0, 0, 32})};
  c.inputs = {{"x", {3, 5, 32}}};
  c.outputs = {"y"};
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 0, 0);
  EXPECT_TRUE(StepMatched(*obj, "layout_ops")) << obj->lowering;
  const std::string listing = obj->Listing();
  EXPECT_EQ(listing.find("framework"), std::string::npos) << listing;
  EXPECT_NE(listing.find("generated"), std::string::npos) << listing;
  EXPECT_NE(listing.find("view of %"), std::string::npos) << listing;
}

// Permutations that move the innermost dim, odd sizes, a reshape straight
// from an input to an output (a copy: both are the caller's buffers).
TEST(LayoutOpsTest, EveryPermutationAndBoundaryCase) {
  const std::vector<std::vector<int64_t>> perms = {{1, 0, 2}, {2, 1, 0}, {0, 2, 1}, {1, 2, 0}, {2, 0, 1}};
  for (const auto& perm : perms) {
    LoweringCase c;
    c.name = "perm";
    c.ops = {Transpose("x", "t", perm), Relu("t", "y")};
    c.inputs = {{"x", {3, 17, 5}}};
    c.outputs = {"y"};
    SCOPED_TRACE(DimsToString(perm));
    CheckLoweringNumerics(c, 0, 0);
  }
  LoweringCase io;
  io.name = "reshape_io";
  io.ops = {Reshape("x", "y", {-1})};
  io.inputs = {{"x", {3, 7}}};
  io.outputs = {"y"};
  const auto obj = CheckLoweringNumerics(io, 0, 0);
  EXPECT_NE(obj->Listing().find("view_0"), std::string::npos) << obj->Listing();
}

TEST(LayoutOpsTest, DoesNotFireWithoutFusion) {
  LoweringCase c;
  c.name = "layout_ops_not_fired";
  c.ops = {Reshape("x", "r", {0, 2, 3}), Transpose("r", "y", {0, 2, 1})};
  c.inputs = {{"x", {2, 6}}};
  c.outputs = {"y"};
  c.options.fuse_elementwise = false;
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 0, 0);
  EXPECT_FALSE(StepMatched(*obj, "layout_ops")) << obj->lowering;
}

}  // namespace
}  // namespace kiln::test
