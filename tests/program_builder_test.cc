// ProgramBuilder's sharing of a parameter through a startup program, and
// TruncateBlock (framework/program_builder.h); QuotedNames (suggest.h),
// which the builders' messages use.
#include "framework/program_builder.h"

#include <gtest/gtest.h>

#include <string>

#include "framework/op_desc.h"
#include "framework/suggest.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

TEST(ProgramBuilderTest, AParameterTheStartupInitialisesIsSharedNotInitialisedAgain) {
  proto::ProgramDesc a = EmptyProgram(), b = EmptyProgram(), startup = EmptyProgram();
  ProgramBuilder(&a, &startup, 1).Param("w", {4, 3}, Init::XavierUniform(4, 3));
  const int init_ops = startup.blocks(0).ops_size();
  ProgramBuilder second(&b, &startup, 1);
  EXPECT_TRUE(second.DeclareShared("w", {4, 3}, DataType::kFP32, /*trainable=*/true));
  EXPECT_EQ(startup.blocks(0).ops_size(), init_ops) << "not initialised twice";
  const proto::VarDesc* w = FindVarDesc(b.blocks(0), "w");
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->persistable());
  EXPECT_FALSE(w->stop_gradient());
  EXPECT_FALSE(second.DeclareShared("v", {2}, DataType::kFP32, true)) << "the startup does not hold it";
  EXPECT_EQ(ErrorOf([&] { second.DeclareShared("w", {4, 3}, DataType::kFP32, true); }),
            "'w' is declared twice in this program");
  proto::ProgramDesc c = EmptyProgram();
  EXPECT_EQ(ErrorOf([&] { ProgramBuilder(&c, &startup, 1).DeclareShared("w", {4, 5}, DataType::kFP32, true); }),
            "'w' f32[4,5] clashes with 'w' f32[4,3] that the startup program already initialises: pick another name");
}

TEST(ProgramBuilderTest, TruncateBlockDropsWhatCameAfterTheMark) {
  proto::ProgramDesc main = EmptyProgram(), startup = EmptyProgram();
  ProgramBuilder b(&main, &startup, 1);
  const std::string x = b.Data("x", {-1, 4});
  const int vars = main.blocks(0).vars_size(), ops = main.blocks(0).ops_size();
  b.Op1("relu", {{"X", {x}}});
  b.Op1("tanh", {{"X", {x}}});
  TruncateBlock(&main, vars, ops);
  EXPECT_EQ(main.blocks(0).vars_size(), vars);
  EXPECT_EQ(main.blocks(0).ops_size(), ops);
  EXPECT_EQ(ErrorOf([&] { TruncateBlock(&main, vars + 1, ops); }),
            "truncate: the program has 1 vars and 0 ops, fewer than the mark (2, 0)");
}

TEST(SuggestTest, QuotedNamesListsTheFirstFewAndCountsTheRest) {
  EXPECT_EQ(QuotedNames({}), "");
  EXPECT_EQ(QuotedNames({"a"}), "'a'");
  EXPECT_EQ(QuotedNames({"a", "b", "c"}), "'a', 'b', 'c'");
  EXPECT_EQ(QuotedNames({"a", "b", "c", "d", "e"}), "'a', 'b', 'c' and 2 more");
  EXPECT_EQ(QuotedNames({"a", "b"}, 1), "'a' and 1 more");
}

}  // namespace
}  // namespace kiln
