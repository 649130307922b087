// assign_value: each dtype's values land row-major in a tensor of the shape;
// a wrong count, values in another dtype's list, an int32 out of range, a bad
// shape or dtype are errors naming the attribute; no grad maker.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::Int64Tensor;
using test::RunAndGet;

proto::OpDesc Assign(const std::vector<int64_t>& shape, int64_t dtype, const std::string& attr,
                     const Attribute& values) {
  return OpBuilder("assign_value")
      .Out("Out", {"o"})
      .Attr("shape", shape)
      .Attr("dtype", dtype)
      .Attr(attr, values)
      .Build();
}

TEST(AssignValueOpTest, FillsEachDtypeRowMajor) {
  Tensor t = RunAndGet(Assign({2, 3}, 0, "fp32_values", std::vector<float>{1.5f, -2, 3, 4, 5, -0.f}), {}, "o");
  EXPECT_EQ(CompareTensors(t, FloatTensor({2, 3}, {1.5f, -2, 3, 4, 5, -0.f}), 0, 0), "");

  const int64_t big = int64_t{1} << 53;
  t = RunAndGet(Assign({3}, 1, "int64_values", std::vector<int64_t>{big + 1, -7, 0}), {}, "o");
  EXPECT_EQ(CompareTensors(t, Int64Tensor({3}, {big + 1, -7, 0}), 0, 0), "");

  t = RunAndGet(Assign({2, 1}, 2, "int32_values", std::vector<int64_t>{-2147483648LL, 2147483647LL}), {}, "o");
  ASSERT_EQ(t.dtype(), DataType::kINT32);
  EXPECT_EQ(t.dims(), (Dims{2, 1}));
  EXPECT_EQ(t.data<int32_t>()[0], INT32_MIN);
  EXPECT_EQ(t.data<int32_t>()[1], INT32_MAX);

  t = RunAndGet(Assign({4}, 4, "bool_values", std::vector<int64_t>{1, 0, 0, 1}), {}, "o");
  ASSERT_EQ(t.dtype(), DataType::kBOOL);
  EXPECT_EQ(std::vector<bool>(t.data<bool>(), t.data<bool>() + 4), (std::vector<bool>{true, false, false, true}));

  // A scalar: shape [] holds one value.
  t = RunAndGet(Assign({}, 0, "fp32_values", std::vector<float>{42.f}), {}, "o");
  EXPECT_EQ(t.dims(), Dims{});
  EXPECT_EQ(t.data<float>()[0], 42.f);
}

TEST(AssignValueOpTest, ErrorsNameTheAttribute) {
  EXPECT_NE(ErrorOf([] { RunAndGet(Assign({2, 3}, 0, "fp32_values", std::vector<float>{1, 2}), {}, "o"); })
                .find("attribute fp32_values: shape [2,3] needs 6 values, got 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { RunAndGet(Assign({2}, 0, "int64_values", std::vector<int64_t>{1, 2}), {}, "o"); })
                .find("attribute int64_values: holds 2 values, but dtype is f32 (values in fp32_values)"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { RunAndGet(Assign({1}, 2, "int32_values", std::vector<int64_t>{1LL << 40}), {}, "o"); })
                .find("attribute int32_values: 1099511627776 does not fit in int32"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { RunAndGet(Assign({1}, 3, "fp32_values", std::vector<float>{1}), {}, "o"); })
                .find("attribute dtype: expected 0 (f32), 1 (i64), 2 (i32) or 4 (bool), got 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { RunAndGet(Assign({0, 2}, 0, "fp32_values", std::vector<float>{}), {}, "o"); })
                .find("attribute shape: expected positive dims, got [0,2]"),
            std::string::npos);
}

// Shape inference at build time declares Out; there is nothing to differentiate.
TEST(AssignValueOpTest, DeclaresItsOutputAndHasNoGrad) {
  proto::ProgramDesc p;
  proto::BlockDesc* b = p.add_blocks();
  *b->add_ops() = Assign({3}, 1, "int64_values", std::vector<int64_t>{1, 2, 3});
  InferShapeAtBuild(b, 0, /*declare_outputs=*/true);
  ASSERT_EQ(b->vars_size(), 1);
  EXPECT_EQ(b->vars(0).dtype(), proto::INT64);
  EXPECT_EQ(VarDims(b->vars(0)), Dims{3});
  EXPECT_FALSE(static_cast<bool>(OpRegistry::Global().Get("assign_value").grad_maker));
}

}  // namespace
}  // namespace kiln
