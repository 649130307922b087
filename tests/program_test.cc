// Program I/O, validation errors and the executor.
#include <gtest/gtest.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdio>
#include <fstream>

#include "framework/executor.h"
#include "framework/file_util.h"
#include "framework/operator.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

const char* kSmall = R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: -1 dims: 3 }
  vars { name: "w" dtype: FP32 dims: 3 dims: 2 persistable: true }
  vars { name: "y" dtype: FP32 dims: -1 dims: 2 }
  vars { name: "z" dtype: FP32 dims: -1 dims: 2 }
  ops { type: "matmul"
        inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" }
        outputs { name: "Out" args: "y" }
        attrs { name: "transpose_Y" type: BOOL b: false } }
  ops { type: "relu" inputs { name: "X" args: "y" } outputs { name: "Out" args: "z" } }
}
)pb";

#define EXPECT_ERROR(stmt, substr)                                               \
  do {                                                                           \
    const std::string msg_ = ErrorOf([&] { stmt; });                             \
    EXPECT_NE(msg_.find(substr), std::string::npos) << "message: " << msg_;      \
  } while (0)

TEST(ProgramIoTest, TextAndBinaryRoundTrip) {
  const proto::ProgramDesc p = ParseProgramText(kSmall, "small");
  const std::string dir = ::testing::TempDir();
  SaveProgram(dir + "/p.pbtxt", p);
  SaveProgram(dir + "/p.pb", p);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, LoadProgram(dir + "/p.pbtxt")));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, LoadProgram(dir + "/p.pb")));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, ParseProgramText(ProgramToText(p))));
}

TEST(ProgramIoTest, ParseErrorsNameFileLineAndColumn) {
  const std::string path = ::testing::TempDir() + "/bad.pbtxt";
  WriteFileAtomic(path, "version: 1\nblocks {\n  idx: 0 bogus_field: 3\n}\n");
  EXPECT_ERROR(LoadProgram(path), "bad.pbtxt': line 3, column 21");
  EXPECT_ERROR(LoadProgram(::testing::TempDir() + "/missing.pbtxt"), "cannot open");
  WriteFileAtomic(::testing::TempDir() + "/garbage.pb", "\xff\xff\xff garbage");
  EXPECT_ERROR(LoadProgram(::testing::TempDir() + "/garbage.pb"), "not a binary ProgramDesc");
}

TEST(ValidateTest, AcceptsAValidProgram) { EXPECT_NO_THROW(ValidateProgram(ParseProgramText(kSmall))); }

TEST(ValidateTest, UnknownOp) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  p.mutable_blocks(0)->mutable_ops(1)->set_type("frobnicate");
  EXPECT_ERROR(ValidateProgram(p), "op #1 'frobnicate': unknown op type 'frobnicate'");
}

TEST(ValidateTest, MissingSlot) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  p.mutable_blocks(0)->mutable_ops(0)->mutable_inputs()->RemoveLast();
  EXPECT_ERROR(ValidateProgram(p), "op #0 'matmul': missing input slot 'Y'");
}

TEST(ValidateTest, UndeclaredVariable) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  p.mutable_blocks(0)->mutable_ops(1)->mutable_inputs(0)->set_args(0, "ghost");
  EXPECT_ERROR(ValidateProgram(p), "variable 'ghost' is not declared");
}

TEST(ValidateTest, ShapeMismatch) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  p.mutable_blocks(0)->mutable_vars(1)->set_dims(0, 5);  // w [5,2] against x [-1,3]
  EXPECT_ERROR(ValidateProgram(p), "op #0 'matmul'");
  p = ParseProgramText(kSmall);
  p.mutable_blocks(0)->mutable_vars(3)->set_dims(1, 7);  // z declared [-1,7], relu gives [-1,2]
  EXPECT_ERROR(ValidateProgram(p), "output Out ('z') is declared [-1,7] but the op produces [-1,2]");
}

// Dims whose product overflows int64 (found by tests/fuzz/fuzz_program_binary:
// layer_norm's shape inference multiplied them, undefined behaviour) are
// refused before any op's shape inference sees them.
TEST(ValidateTest, DimsWithMoreThanTwoToTheSixtyElements) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  proto::VarDesc* x = p.mutable_blocks(0)->mutable_vars(0);
  x->set_dims(1, int64_t{1} << 40);  // x [-1, 2^40]: fine (the -1 is not counted)
  p.mutable_blocks(0)->mutable_vars(1)->set_dims(0, int64_t{1} << 40);
  EXPECT_NO_THROW(ValidateProgram(p));
  x->add_dims(int64_t{1} << 21);  // [-1, 2^40, 2^21]: 2^61
  EXPECT_ERROR(ValidateProgram(p), "variable 'x' has dims [-1,1099511627776,2097152]: more than 2^60 elements");
  x->set_dims(2, 57420895248973823);  // the product wraps around int64
  EXPECT_ERROR(ValidateProgram(p), "variable 'x' has dims");
}

TEST(ValidateTest, WrongAttributeType) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  p.mutable_blocks(0)->mutable_ops(0)->mutable_attrs(0)->set_type(proto::AttrDesc::INT);
  EXPECT_ERROR(ValidateProgram(p), "attribute 'transpose_Y' expected type BOOL, got INT");
}

// op_role (framework/operator.h) is accepted on every op type, as a STRING;
// any other attribute the entry does not list is still an error.
TEST(ValidateTest, OpRoleIsTheOneCommonAttribute) {
  proto::ProgramDesc p = ParseProgramText(kSmall);
  proto::OpDesc* relu = p.mutable_blocks(0)->mutable_ops(1);
  SetAttr(relu, kOpRoleAttr, Attribute(std::string(kOpRoleRecompute)));
  EXPECT_NO_THROW(ValidateProgram(p));
  EXPECT_TRUE(HasOpRole(*relu, kOpRoleRecompute));
  EXPECT_FALSE(HasOpRole(p.blocks(0).ops(0), kOpRoleRecompute));
  SetAttr(relu, kOpRoleAttr, Attribute(int64_t{1}));
  EXPECT_ERROR(ValidateProgram(p), "op #1 'relu': attribute 'op_role' expected type STRING, got INT");
  EXPECT_FALSE(HasOpRole(*relu, kOpRoleRecompute));
  relu->clear_attrs();
  SetAttr(relu, "op_rol", Attribute(std::string("recompute")));
  EXPECT_ERROR(ValidateProgram(p), "op #1 'relu': unknown attribute 'op_rol'");
}

TEST(ExecutorTest, RunsFreesIntermediatesAndKeepsFetches) {
  const proto::ProgramDesc p = ParseProgramText(kSmall);
  Scope scope;
  FeedTensor(p.blocks(0), scope, "x", test::FloatTensor({2, 3}, {1, 2, 3, -1, -2, -3}));
  FeedTensor(p.blocks(0), scope, "w", test::FloatTensor({3, 2}, {1, 0, 0, 1, 1, 1}));
  Executor exec;
  auto plan = exec.Prepare(p, 0, {"z"});
  EXPECT_EQ(plan->FreedAfter(1), std::vector<std::string>{"y"});
  exec.Run(*plan, scope);
  const Tensor& z = scope.GetVar("z")->Get();
  ASSERT_EQ(z.dims(), (Dims{2, 2}));
  EXPECT_FLOAT_EQ(z.data<float>()[0], 4.f);
  EXPECT_FLOAT_EQ(z.data<float>()[1], 5.f);
  EXPECT_FLOAT_EQ(z.data<float>()[2], 0.f);
  EXPECT_FLOAT_EQ(z.data<float>()[3], 0.f);
  EXPECT_FALSE(scope.GetVar("y")->Get().initialized());  // freed after its last use
  EXPECT_TRUE(scope.GetVar("w")->Get().initialized());   // persistable
  // A second run over the same scope gives the same answer.
  exec.Run(*plan, scope);
  EXPECT_FLOAT_EQ(scope.GetVar("z")->Get().data<float>()[0], 4.f);
}

// A prepared plan is reused over scopes that come and go (the JIT's
// fallback does so): each new scope, even one at a freed scope's address,
// and a scope whose variables were erased and made again, is bound afresh.
TEST(ExecutorTest, APlanRebindsToEachNewScopeAndAfterAnErase) {
  const proto::ProgramDesc p = ParseProgramText(kSmall);
  Executor exec;
  auto plan = exec.Prepare(p, 0, {"z"});
  for (int round = 0; round < 4; ++round) {
    auto scope = std::make_unique<Scope>();
    const float v = static_cast<float>(round + 1);
    FeedTensor(p.blocks(0), *scope, "x", test::FloatTensor({2, 3}, {v, 0, 0, 0, 0, 0}));
    FeedTensor(p.blocks(0), *scope, "w", test::FloatTensor({3, 2}, {1, 0, 0, 1, 1, 1}));
    exec.Run(*plan, *scope);
    EXPECT_FLOAT_EQ(scope->GetVar("z")->Get().data<float>()[0], v) << "round " << round;
  }
  Scope scope;
  FeedTensor(p.blocks(0), scope, "x", test::FloatTensor({2, 3}, {1, 0, 0, 0, 0, 0}));
  FeedTensor(p.blocks(0), scope, "w", test::FloatTensor({3, 2}, {1, 0, 0, 1, 1, 1}));
  exec.Run(*plan, scope);
  const uint64_t bound = scope.generation();
  scope.EraseVar("x");
  EXPECT_NE(scope.generation(), bound);
  FeedTensor(p.blocks(0), scope, "x", test::FloatTensor({2, 3}, {7, 0, 0, 0, 0, 0}));
  exec.Run(*plan, scope);
  EXPECT_FLOAT_EQ(scope.GetVar("z")->Get().data<float>()[0], 7.f);
}

TEST(ExecutorTest, FeedChecksDtypeAndDims) {
  const proto::ProgramDesc p = ParseProgramText(kSmall);
  Scope scope;
  EXPECT_ERROR(FeedTensor(p.blocks(0), scope, "x", test::Int64Tensor({1, 3}, {1, 2, 3})),
               "feed 'x': expected dtype f32, got i64");
  EXPECT_ERROR(FeedTensor(p.blocks(0), scope, "x", test::FloatTensor({1, 4}, {1, 2, 3, 4})),
               "feed 'x': expected dims [-1,3], got [1,4]");
  EXPECT_ERROR(FeedTensor(p.blocks(0), scope, "nope", test::FloatTensor({1}, {1})), "declares no such variable");
}

// A fed var holds a value from outside: its origin (the startup program that
// initialised it) is reset to 0, copied or shared. A program's own writes
// keep the origin.
TEST(ExecutorTest, FeedingAVarClearsItsOriginAndRunningKeepsIt) {
  const proto::ProgramDesc p = ParseProgramText(kSmall);
  Scope scope;
  for (bool share : {false, true}) {
    scope.Var("w")->set_origin(3);
    FeedTensor(p.blocks(0), scope, "w", test::FloatTensor({3, 2}, {1, 0, 0, 1, 1, 1}), share);
    EXPECT_EQ(scope.GetVar("w")->origin(), 0) << "share " << share;
  }
  FeedTensor(p.blocks(0), scope, "x", test::FloatTensor({1, 3}, {1, 2, 3}));
  scope.Var("w")->set_origin(3);
  scope.Var("z")->set_origin(4);
  Executor().RunProgram(p, scope);
  EXPECT_EQ(scope.GetVar("w")->origin(), 3);
  EXPECT_EQ(scope.GetVar("z")->origin(), 4);
}

TEST(ExecutorTest, UnfedInputIsNamed) {
  const proto::ProgramDesc p = ParseProgramText(kSmall);
  Scope scope;
  FeedTensor(p.blocks(0), scope, "x", test::FloatTensor({1, 3}, {1, 2, 3}));
  Executor exec;
  auto plan = exec.Prepare(p, 0, {});
  EXPECT_ERROR(exec.Run(*plan, scope), "op #0 'matmul': input Y ('w') holds no data");
}

TEST(ExecutorTest, CheckNanInfNamesOpAndVar) {
  proto::ProgramDesc p = ParseProgramText(R"pb(
    blocks { idx: 0 parent_idx: -1
      vars { name: "a" dtype: FP32 dims: 2 } vars { name: "b" dtype: FP32 dims: 2 }
      vars { name: "q" dtype: FP32 dims: 2 } vars { name: "r" dtype: FP32 dims: 2 }
      ops { type: "relu" inputs { name: "X" args: "a" } outputs { name: "Out" args: "r" } }
      ops { type: "elementwise_div" inputs { name: "X" args: "r" } inputs { name: "Y" args: "b" }
            outputs { name: "Out" args: "q" } } })pb");
  for (bool onednn : {false, true}) {
    Scope scope;
    FeedTensor(p.blocks(0), scope, "a", test::FloatTensor({2}, {1, 2}));
    FeedTensor(p.blocks(0), scope, "b", test::FloatTensor({2}, {1, 0}));
    Executor exec({onednn, /*check_nan_inf=*/true, true});
    auto plan = exec.Prepare(p, 0, {});
    EXPECT_ERROR(exec.Run(*plan, scope), "op #1 'elementwise_div' wrote +Inf to output Out (var 'q' f32[2]) at flat index 1");
    Executor unchecked({onednn, false, true});
    auto plan2 = unchecked.Prepare(p, 0, {});
    EXPECT_NO_THROW(unchecked.Run(*plan2, scope));
  }
}

}  // namespace
}  // namespace kiln
