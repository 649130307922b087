// reshape2 / transpose2 and their grads: dims and values, build-time -1
// propagation, gradients against finite differences, bad-input errors.
#include <gtest/gtest.h>

#include <functional>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

using test::CheckGrad;
using test::CompareTensors;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

proto::OpDesc ReshapeOp(const std::vector<int64_t>& shape, const std::string& out = "y") {
  return OpBuilder("reshape2").In("X", {"x"}).Out("Out", {out}).Attr("shape", shape).Build();
}
proto::OpDesc TransposeOp(const std::vector<int64_t>& axis) {
  return OpBuilder("transpose2").In("X", {"x"}).Out("Out", {"y"}).Attr("axis", axis).Build();
}

// Runs build-time inference of `op` on x declared with `x_dims`; returns y's dims.
Dims InferAtBuild(const proto::OpDesc& op, const Dims& x_dims) {
  proto::BlockDesc block;
  proto::VarDesc* v = block.add_vars();
  v->set_name("x");
  for (int64_t d : x_dims) v->add_dims(d);
  *block.add_ops() = op;
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  return VarDims(*FindVarDesc(block, "y"));
}

// ---- reshape2 ----------------------------------------------------------------------

TEST(Reshape2OpTest, DimsAndValues) {
  std::mt19937 rng(61);
  const std::vector<std::tuple<Dims, std::vector<int64_t>, Dims>> cases = {
      {{1}, {1, 1}, {1, 1}},
      {{2, 3, 4}, {0, -1}, {2, 12}},
      {{2, 3, 4}, {-1}, {24}},
      {{7, 17}, {17, 7}, {17, 7}},
      {{7, 17}, {1, -1, 1}, {1, 119, 1}},
      {{2, 33, 6}, {0, 0, 2, 3}, {2, 33, 2, 3}},
      {{2, 33, 6}, {-1, 0, 3}, {4, 33, 3}},
  };
  for (const auto& [xd, shape, want] : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(xd, dtype, rng);
      auto scope = RunOp(ReshapeOp(shape), {{"x", x}});
      const Tensor& y = scope->GetVar("y")->Get();
      ASSERT_EQ(y.dims(), want) << DimsToString(xd) << " -> " << DimsToString(shape);
      EXPECT_EQ(y.dtype(), dtype);
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(ValueAt(y, i), ValueAt(x, i));
    }
  }
  // Labels are reshaped too.
  auto scope = RunOp(ReshapeOp({-1, 1}), {{"x", test::Int64Tensor({3}, {4, 5, 6})}});
  const Tensor& y = scope->GetVar("y")->Get();
  EXPECT_EQ(y.dims(), (Dims{3, 1}));
  EXPECT_EQ(y.dtype(), DataType::kINT64);
  EXPECT_EQ(y.data<int64_t>()[2], 6);
}

TEST(Reshape2OpTest, RunsInPlace) {
  std::mt19937 rng(62);
  Tensor x = RandomTensor({3, 4}, DataType::kFP32, rng);
  auto scope = RunOp(ReshapeOp({4, 3}, "x"), {{"x", x}});
  const Tensor& y = scope->GetVar("x")->Get();
  EXPECT_EQ(y.dims(), (Dims{4, 3}));
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(ValueAt(y, i), ValueAt(x, i));
}

TEST(Reshape2OpTest, BuildTimePropagatesUnknownDims) {
  EXPECT_EQ(InferAtBuild(ReshapeOp({0, -1}), {-1, 3, 4}), (Dims{-1, 12}));  // copied -1 cancels
  EXPECT_EQ(InferAtBuild(ReshapeOp({-1, 4}), {-1, 3, 4}), (Dims{-1, 4}));
  EXPECT_EQ(InferAtBuild(ReshapeOp({0, 12}), {-1, 3, 4}), (Dims{-1, 12}));
  EXPECT_EQ(InferAtBuild(ReshapeOp({3, -1}), {-1, 6}), (Dims{3, -1}));
  EXPECT_EQ(InferAtBuild(ReshapeOp({0, 0, 4, 16}), {-1, -1, 64}), (Dims{-1, -1, 4, 16}));
  EXPECT_EQ(InferAtBuild(ReshapeOp({2, 6}), {3, 4}), (Dims{2, 6}));
  // Known parts still have to agree.
  const std::string msg = ErrorOf([] { InferAtBuild(ReshapeOp({0, 5}), {-1, 3, 4}); });
  EXPECT_NE(msg.find("cannot reshape X [-1,3,4] into shape [0,5]"), std::string::npos) << msg;
}

TEST(Reshape2OpTest, BadShapesAreRejected) {
  std::mt19937 rng(63);
  auto run = [&](const Dims& xd, const std::vector<int64_t>& shape) {
    return ErrorOf([&] { RunOp(ReshapeOp(shape), {{"x", RandomTensor(xd, DataType::kFP32, rng)}}); });
  };
  std::string msg = run({2, 3}, {4, 2});
  EXPECT_NE(msg.find("'reshape2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot reshape X [2,3] into shape [4,2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("X has 6 elements, the shape gives 8"), std::string::npos) << msg;
  msg = run({2, 3}, {4, -1});
  EXPECT_NE(msg.find("cannot reshape X [2,3] into shape [4,-1]"), std::string::npos) << msg;
  msg = run({2, 3}, {-1, -1});
  EXPECT_NE(msg.find("more than one -1"), std::string::npos) << msg;
  msg = run({6}, {0, 0});
  EXPECT_NE(msg.find("entry 1 is 0 (copy X's dim) but X has rank 1"), std::string::npos) << msg;
  msg = run({6}, {-2, -3});
  EXPECT_NE(msg.find("entry 0 is -2"), std::string::npos) << msg;
}

TEST(Reshape2OpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(64);
  EXPECT_EQ(CheckGrad(ReshapeOp({0, -1}), {{"x", RandomTensor({2, 3, 4}, DataType::kFP64, rng)}}, {"x"}, {"y"}), "");
  EXPECT_EQ(CheckGrad(ReshapeOp({1}), {{"x", RandomTensor({1, 1}, DataType::kFP64, rng)}}, {"x"}, {"y"}), "");
  const OpInfo& info = OpRegistry::Global().Get("reshape2");
  EXPECT_EQ(info.jit, JitLowering::kLayout);
  EXPECT_EQ(info.inplace, (std::vector<std::pair<std::string, std::string>>{{"X", "Out"}}));
}

// ---- transpose2 --------------------------------------------------------------------

// out[i0..] = x[...] with out dim k = x dim perm[k], by explicit index mapping.
Tensor NaiveTranspose(const Tensor& x, const std::vector<int64_t>& perm) {
  const Dims& xd = x.dims();
  const size_t r = xd.size();
  Dims od(r);
  for (size_t k = 0; k < r; ++k) od[k] = xd[perm[k]];
  Tensor out(DataType::kFP64, od);
  std::vector<int64_t> oi(r), xi(r);
  for (int64_t lin = 0; lin < out.numel(); ++lin) {
    int64_t rest = lin;
    for (int64_t k = static_cast<int64_t>(r) - 1; k >= 0; --k) {
      oi[k] = rest % od[k];
      rest /= od[k];
    }
    for (size_t k = 0; k < r; ++k) xi[perm[k]] = oi[k];
    int64_t xl = 0;
    for (size_t k = 0; k < r; ++k) xl = xl * xd[k] + xi[k];
    out.mutable_data<double>()[lin] = ValueAt(x, xl);
  }
  return out;
}

TEST(Transpose2OpTest, MatchesNaive) {
  std::mt19937 rng(71);
  const std::vector<std::pair<Dims, std::vector<int64_t>>> cases = {
      {{1}, {0}},
      {{7, 17}, {1, 0}},
      {{7, 17}, {0, 1}},
      {{2, 3, 33}, {2, 0, 1}},
      {{2, 3, 33}, {1, 2, 0}},
      {{2, 7, 3, 5}, {0, 2, 1, 3}},  // [B,S,H,D] -> [B,H,S,D]
      {{2, 7, 3, 5}, {3, 1, 0, 2}},
      {{1, 17, 1, 2, 3}, {4, 2, 0, 3, 1}},
  };
  for (const auto& [xd, perm] : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(xd, dtype, rng);
      auto scope = RunOp(TransposeOp(perm), {{"x", x}});
      EXPECT_EQ(scope->GetVar("y")->Get().dtype(), dtype);
      EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), NaiveTranspose(x, perm), 0, 0), "")
          << DimsToString(xd) << " perm " << DimsToString(perm);
    }
  }
  auto scope = RunOp(TransposeOp({1, 0}), {{"x", test::Int64Tensor({2, 3}, {0, 1, 2, 3, 4, 5})}});
  const Tensor& y = scope->GetVar("y")->Get();
  ASSERT_EQ(y.dtype(), DataType::kINT64);
  EXPECT_EQ(std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + 6), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(Transpose2OpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(72);
  const std::vector<std::pair<Dims, std::vector<int64_t>>> cases = {
      {{1, 1}, {1, 0}}, {{3, 5}, {1, 0}}, {{2, 3, 4}, {2, 0, 1}}, {{2, 3, 1, 4}, {0, 2, 3, 1}}};
  for (const auto& [xd, perm] : cases) {
    EXPECT_EQ(CheckGrad(TransposeOp(perm), {{"x", RandomTensor(xd, DataType::kFP64, rng)}}, {"x"}, {"y"}), "")
        << DimsToString(xd) << " perm " << DimsToString(perm);
  }
  EXPECT_EQ(OpRegistry::Global().Get("transpose2_grad").jit, JitLowering::kLayout);
}

TEST(Transpose2OpTest, BuildTimeAndBadPermutations) {
  EXPECT_EQ(InferAtBuild(TransposeOp({0, 2, 1, 3}), {-1, 7, 4, 16}), (Dims{-1, 4, 7, 16}));
  std::mt19937 rng(73);
  auto run = [&](const Dims& xd, const std::vector<int64_t>& perm) {
    return ErrorOf([&] { RunOp(TransposeOp(perm), {{"x", RandomTensor(xd, DataType::kFP32, rng)}}); });
  };
  std::string msg = run({2, 3, 4}, {0, 0, 1});
  EXPECT_NE(msg.find("'transpose2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attribute 'axis' [0,0,1] is not a permutation of [0, 3) for X [2,3,4]"), std::string::npos)
      << msg;
  msg = run({2, 3, 4}, {1, 0});
  EXPECT_NE(msg.find("is not a permutation"), std::string::npos) << msg;
  msg = run({2, 3}, {0, 2});
  EXPECT_NE(msg.find("is not a permutation"), std::string::npos) << msg;
  msg = run({2, 3}, {-1, 0});
  EXPECT_NE(msg.find("is not a permutation"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln
