// RequiredFeeds and CheckFeeds (framework/feed_check.h): the non-persistable
// vars a block reads before any of its ops writes them, in first-read order,
// and the message naming the first one missing (with the command line's flag).
#include "framework/feed_check.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/models/models.h"
#include "framework/program_io.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

// op 0 reads b then a; op 1 reads t (op 0's output), c and a again; op 2
// reads the parameter w, the optimizer state lr and s, which op 3 writes
// afterwards; op 4 reads u in place (X and Out); op 5 reads an @EMPTY@ slot
// and an undeclared var; op 6 reads t2, which op 1 wrote.
const char* kBlock = R"pb(
blocks {
  idx: 0 parent_idx: -1
  vars { name: "a" dtype: FP32 dims: 2 }
  vars { name: "b" dtype: FP32 dims: 2 }
  vars { name: "c" dtype: FP32 dims: 2 }
  vars { name: "s" dtype: FP32 dims: 2 }
  vars { name: "t" dtype: FP32 dims: 2 }
  vars { name: "t2" dtype: FP32 dims: 2 }
  vars { name: "u" dtype: FP32 dims: 2 }
  vars { name: "w" dtype: FP32 dims: 2 persistable: true }
  vars { name: "lr" dtype: FP32 dims: 1 persistable: true }
  ops { type: "elementwise_add" inputs { name: "X" args: "b" } inputs { name: "Y" args: "a" } outputs { name: "Out" args: "t" } }
  ops { type: "sum" inputs { name: "X" args: "t" args: "c" args: "a" } outputs { name: "Out" args: "t2" } }
  ops { type: "sgd" inputs { name: "Param" args: "w" } inputs { name: "Grad" args: "s" }
        inputs { name: "LearningRate" args: "lr" } outputs { name: "ParamOut" args: "w" } }
  ops { type: "relu" inputs { name: "X" args: "t" } outputs { name: "Out" args: "s" } }
  ops { type: "relu" inputs { name: "X" args: "u" } outputs { name: "Out" args: "u" } }
  ops { type: "sum" inputs { name: "X" args: "@EMPTY@" args: "ghost" } outputs { name: "Out" args: "t" } }
  ops { type: "relu" inputs { name: "X" args: "t2" } outputs { name: "Out" args: "c" } }
}
)pb";

TEST(FeedCheckTest, RequiredFeedsAreTheVarsReadBeforeAnyWriteInFirstReadOrder) {
  const proto::ProgramDesc p = ParseProgramText(kBlock, "feeds");
  // Not w or lr (persistable), t or t2 (written before they are read), not
  // @EMPTY@, each once.
  EXPECT_EQ(RequiredFeeds(p.blocks(0)), (std::vector<std::string>{"b", "a", "c", "s", "u", "ghost"}));
}

// A training program needs its data, not the gradients its optimizer reads
// (the backward pass writes them first) nor its parameters.
TEST(FeedCheckTest, ATrainingProgramNeedsItsDataOnly) {
  const Model m = BuildMlp(MlpConfig{}, TrainConfig{});
  EXPECT_EQ(RequiredFeeds(m.train.blocks(0)), (std::vector<std::string>{m.features, m.labels}));
  EXPECT_EQ(RequiredFeeds(m.startup.blocks(0)), std::vector<std::string>{});
  EXPECT_EQ(ErrorOf([&] { CheckFeeds(m.train.blocks(0), {m.features, m.labels}); }), "(no error)");
  EXPECT_EQ(ErrorOf([&] { CheckFeeds(m.startup.blocks(0), {}); }), "(no error)");
}

TEST(FeedCheckTest, TheFirstMissingFeedIsNamed) {
  const Model m = BuildMlp(MlpConfig{}, TrainConfig{});
  const proto::BlockDesc& block = m.train.blocks(0);
  ASSERT_EQ(m.labels, "labels");
  std::string e = ErrorOf([&] { CheckFeeds(block, {m.features}); });
  EXPECT_EQ(e, "feed 'labels' is missing (the program reads it)");
  e = ErrorOf([&] { CheckFeeds(block, {m.features, "other"}, "--feed"); });
  EXPECT_EQ(e, "feed 'labels' is missing (the program reads it): give it with --feed labels=FILE.npy");
  // Both missing: the one read first.
  e = ErrorOf([&] { CheckFeeds(block, {}); });
  EXPECT_EQ(e, "feed '" + m.features + "' is missing (the program reads it)");
}

TEST(FeedCheckTest, TheListFormChecksTheGivenNamesInOrder) {
  const std::vector<std::string> required = {"x", "y"};
  EXPECT_EQ(ErrorOf([&] { CheckFeeds(required, {"x", "y"}, "--feed"); }), "(no error)");
  EXPECT_EQ(ErrorOf([&] { CheckFeeds(required, {"x"}); }), "feed 'y' is missing (the program reads it)");
  EXPECT_EQ(ErrorOf([&] { CheckFeeds(required, {"y"}, "--feed"); }),
            "feed 'x' is missing (the program reads it): give it with --feed x=FILE.npy");
  EXPECT_EQ(ErrorOf([&] { CheckFeeds(std::vector<std::string>{}, {}); }), "(no error)");
}

// CheckFeedShapes: the feeds must fit each other through the whole program;
// the op that sees they do not is named by its place in the program.
TEST(FeedCheckTest, FeedsThatDoNotFitEachOtherAreNamedByTheOpThatSeesIt) {
  const Model m = BuildMlp(MlpConfig{}, TrainConfig{});
  const proto::BlockDesc& block = m.train.blocks(0);
  const Dims x = {16, m.sample_dims[0]};
  EXPECT_EQ(ErrorOf([&] { CheckFeedShapes(block, {{m.features, x}, {m.labels, {16, 1}}}); }), "(no error)");
  const std::string e = ErrorOf([&] { CheckFeedShapes(block, {{m.features, x}, {m.labels, {32, 1}}}); });
  int loss_op = -1;
  for (int i = 0; i < block.ops_size() && loss_op < 0; ++i) {
    if (block.ops(i).type() == "softmax_with_cross_entropy") loss_op = i;
  }
  EXPECT_EQ(e.rfind("op #" + std::to_string(loss_op) + " 'softmax_with_cross_entropy': input Label", 0), 0u) << e;
  EXPECT_NE(e.find("got [32,1]"), std::string::npos) << e;
  // Dims the declaration already refuses are FeedTensor's to name; a block
  // whose ops all accept the dims passes.
  EXPECT_EQ(ErrorOf([&] { CheckFeedShapes(m.startup.blocks(0), {}); }), "(no error)");
}

TEST(FeedCheckTest, FedVarsAreClearedWhenTheRunEndsEvenByAnError) {
  Scope scope;
  scope.Var("x")->GetMutable()->CopyFrom(test::FloatTensor({2}, {1, 2}));
  scope.Var("kept")->GetMutable()->CopyFrom(test::FloatTensor({1}, {3}));
  try {
    FedVars fed(scope);
    fed.Add("x");
    EXPECT_EQ(fed.names(), std::set<std::string>{"x"});
    throw std::runtime_error("the run failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(scope.FindVar("x")->Get().initialized());
  EXPECT_TRUE(scope.FindVar("kept")->Get().initialized());
}

}  // namespace
}  // namespace kiln
