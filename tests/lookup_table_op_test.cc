// lookup_table and lookup_table_grad: gathered rows, padding_idx, the dense
// gradient summing repeated ids, finite differences, W as a no-need-buffer
// input of the grad, and errors naming the bad id and its position.
#include <gtest/gtest.h>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::Int64Tensor;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

proto::OpDesc LookupOp(int64_t padding_idx = -1) {
  return OpBuilder("lookup_table")
      .In("W", {"w"})
      .In("Ids", {"ids"})
      .Out("Out", {"out"})
      .Attr("padding_idx", padding_idx)
      .Build();
}

proto::OpDesc LookupGradOp(int64_t padding_idx = -1, bool with_dout = true) {
  OpBuilder b("lookup_table_grad");
  b.In("W", {"w"}).In("Ids", {"ids"}).Out("W@GRAD", {"dw"}).Attr("padding_idx", padding_idx);
  if (with_dout) b.In("Out@GRAD", {"dout"});
  return b.Build();
}

Tensor RandomIds(const Dims& dims, int64_t rows, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::vector<int64_t> v(static_cast<size_t>(Numel(dims)));
  for (auto& id : v) id = pick(rng);
  return Int64Tensor(dims, v);
}

TEST(LookupTableOpTest, GathersRowsForAnyLeadingShape) {
  std::mt19937 rng(1);
  const std::vector<std::pair<Dims, Dims>> cases = {// W, Ids
                                                    {{10, 7}, {5, 1}},
                                                    {{1, 1}, {3, 1}},
                                                    {{33, 17}, {2, 9, 1}},
                                                    {{5, 3}, {1}},
                                                    {{65, 4}, {2, 3, 4, 1}}};
  for (const auto& [wd, idd] : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      SCOPED_TRACE(DimsToString(wd) + " " + DimsToString(idd) + " " + DataTypeName(dtype));
      const Tensor w = RandomTensor(wd, dtype, rng);
      const Tensor ids = RandomIds(idd, wd[0], rng);
      auto scope = RunOp(LookupOp(), {{"w", w}, {"ids", ids}});
      const Tensor& out = scope->GetVar("out")->Get();
      Dims want_dims(idd.begin(), idd.end() - 1);
      want_dims.push_back(wd[1]);
      ASSERT_EQ(out.dims(), want_dims);
      ASSERT_EQ(out.dtype(), dtype);
      for (int64_t i = 0; i < ids.numel(); ++i) {
        const int64_t id = ids.data<int64_t>()[i];
        for (int64_t j = 0; j < wd[1]; ++j) ASSERT_EQ(ValueAt(out, i * wd[1] + j), ValueAt(w, id * wd[1] + j));
      }
    }
  }
}

TEST(LookupTableOpTest, PaddingRowsAreZero) {
  std::mt19937 rng(2);
  const Tensor w = RandomTensor({6, 5}, DataType::kFP32, rng, 1, 2);
  const Tensor ids = Int64Tensor({4, 1}, {3, 0, 3, 5});
  auto scope = RunOp(LookupOp(3), {{"w", w}, {"ids", ids}});
  const Tensor& out = scope->GetVar("out")->Get();
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(ValueAt(out, 0 * 5 + j), 0.0);
    EXPECT_EQ(ValueAt(out, 1 * 5 + j), ValueAt(w, 0 * 5 + j));
    EXPECT_EQ(ValueAt(out, 2 * 5 + j), 0.0);
    EXPECT_EQ(ValueAt(out, 3 * 5 + j), ValueAt(w, 5 * 5 + j));
  }
}

// Ids 2, 2, 4, 2, 0 with padding_idx 4: row 2 gets three rows of Out@GRAD,
// row 0 one, row 4 (padding) and the unused rows none.
TEST(LookupTableGradTest, AccumulatesRepeatedIdsAndSkipsPadding) {
  std::mt19937 rng(3);
  const Tensor ids = Int64Tensor({5, 1}, {2, 2, 4, 2, 0});
  const Tensor dout = RandomTensor({5, 3}, DataType::kFP64, rng);
  auto scope =
      RunOp(LookupGradOp(4), {{"w", RandomTensor({6, 3}, DataType::kFP64, rng)}, {"ids", ids}, {"dout", dout}});
  const Tensor& dw = scope->GetVar("dw")->Get();
  ASSERT_EQ(dw.dims(), (Dims{6, 3}));
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_DOUBLE_EQ(ValueAt(dw, 2 * 3 + j),
                     ValueAt(dout, 0 * 3 + j) + ValueAt(dout, 1 * 3 + j) + ValueAt(dout, 3 * 3 + j));
    EXPECT_DOUBLE_EQ(ValueAt(dw, 0 * 3 + j), ValueAt(dout, 4 * 3 + j));
    for (int64_t row : {1, 3, 4, 5}) EXPECT_EQ(ValueAt(dw, row * 3 + j), 0.0) << row;
  }
}

TEST(LookupTableGradTest, MatchesFiniteDifferences) {
  std::mt19937 rng(4);
  for (int64_t pad : {int64_t{-1}, int64_t{1}}) {
    // Many repeats: 23 ids over 4 rows.
    const std::map<std::string, Tensor> in = {{"w", RandomTensor({4, 7}, DataType::kFP64, rng)},
                                              {"ids", RandomIds({23, 1}, 4, rng)}};
    EXPECT_EQ(CheckGrad(LookupOp(pad), in, {"w"}, {"out"}), "") << "padding_idx " << pad;
    const std::map<std::string, Tensor> in3 = {{"w", RandomTensor({9, 5}, DataType::kFP64, rng)},
                                               {"ids", RandomIds({3, 5, 1}, 9, rng)}};
    EXPECT_EQ(CheckGrad(LookupOp(pad), in3, {"w"}, {"out"}), "") << "padding_idx " << pad;
  }
}

// W is only read for its dims: the grad runs with W shape-only.
TEST(LookupTableGradTest, WIsANoNeedBufferInput) {
  const OpInfo& info = OpRegistry::Global().Get("lookup_table_grad");
  EXPECT_EQ(info.no_need_buffer, std::vector<std::string>{"W"});
  std::mt19937 rng(5);
  Tensor w_meta;
  w_meta.ShareExternalData(nullptr, DataType::kFP32, {7, 3});
  const Tensor ids = Int64Tensor({2, 1}, {6, 6});
  const Tensor dout = RandomTensor({2, 3}, DataType::kFP32, rng);
  auto scope = RunOp(LookupGradOp(), {{"w", w_meta}, {"ids", ids}, {"dout", dout}});
  const Tensor& dw = scope->GetVar("dw")->Get();
  EXPECT_FLOAT_EQ(static_cast<float>(ValueAt(dw, 6 * 3 + 1)), static_cast<float>(ValueAt(dout, 1) + ValueAt(dout, 4)));
}

TEST(LookupTableGradTest, AbsentOutGradGivesZeros) {
  std::mt19937 rng(6);
  auto scope = RunOp(LookupGradOp(-1, false),
                     {{"w", RandomTensor({3, 2}, DataType::kFP32, rng)}, {"ids", Int64Tensor({2, 1}, {0, 2})}});
  const Tensor& dw = scope->GetVar("dw")->Get();
  for (int64_t i = 0; i < dw.numel(); ++i) EXPECT_EQ(ValueAt(dw, i), 0.0);
}

TEST(LookupTableOpTest, RegistryEntry) {
  const OpInfo& info = OpRegistry::Global().Get("lookup_table");
  EXPECT_EQ(info.no_grad_inputs, std::vector<std::string>{"Ids"});
  EXPECT_EQ(info.jit, JitLowering::kFramework);
  EXPECT_EQ(OpRegistry::Global().Get("lookup_table_grad").jit, JitLowering::kFramework);
  const std::vector<proto::OpDesc> g = info.grad_maker(LookupOp(2));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].type(), "lookup_table_grad");
  EXPECT_TRUE(OutputArgs(g[0], "Ids@GRAD").empty());
  EXPECT_EQ(OutputArgs(g[0], "W@GRAD"), std::vector<std::string>{"w@GRAD"});
}

// ---- errors --------------------------------------------------------------------------------

TEST(LookupTableErrorTest, IdOutOfRangeNamesTheIdAndItsPosition) {
  std::mt19937 rng(7);
  const Tensor w = RandomTensor({10, 4}, DataType::kFP32, rng);
  const std::string e = ErrorOf([&] { RunOp(LookupOp(), {{"w", w}, {"ids", Int64Tensor({2, 2, 1}, {1, 2, 10, 3})}}); });
  EXPECT_NE(e.find("input Ids: id 10 at position 2 (flat index into Ids i64[2,2,1]) is outside [0, 10)"),
            std::string::npos)
      << e;
  const std::string neg = ErrorOf([&] { RunOp(LookupOp(), {{"w", w}, {"ids", Int64Tensor({3, 1}, {0, -1, 1})}}); });
  EXPECT_NE(neg.find("id -1 at position 1"), std::string::npos) << neg;
  const std::string grad = ErrorOf([&] {
    RunOp(LookupGradOp(),
          {{"w", w}, {"ids", Int64Tensor({2, 1}, {0, 11})}, {"dout", RandomTensor({2, 4}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(grad.find("id 11 at position 1"), std::string::npos) << grad;
}

TEST(LookupTableErrorTest, BadShapesDtypesAndPadding) {
  std::mt19937 rng(8);
  const Tensor w = RandomTensor({10, 4}, DataType::kFP32, rng);
  const Tensor ids = Int64Tensor({2, 1}, {1, 2});
  auto err = [&](const proto::OpDesc& op, const Tensor& wt, const Tensor& it) {
    return ErrorOf([&] { RunOp(op, {{"w", wt}, {"ids", it}}); });
  };
  EXPECT_NE(err(LookupOp(), w, Int64Tensor({2, 2}, {1, 2, 3, 4}))
                .find("input Ids: expected dims [..., 1] (one id per row), got [2,2]"),
            std::string::npos);
  EXPECT_NE(err(LookupOp(), w, test::FloatTensor({2, 1}, {1, 2})).find("input Ids: expected dtype i64, got f32"),
            std::string::npos);
  EXPECT_NE(err(LookupOp(), RandomTensor({10}, DataType::kFP32, rng), ids)
                .find("input W: expected rank 2 [V, D], got f32[10]"),
            std::string::npos);
  EXPECT_NE(err(LookupOp(), Int64Tensor({2, 2}, {1, 2, 3, 4}), ids).find("input W: expected dtype f32 or f64, got i64"),
            std::string::npos);
  EXPECT_NE(
      err(LookupOp(10), w, ids).find("attribute padding_idx: expected -1 (none) or a row of W in [0, 10), got 10"),
      std::string::npos);
  EXPECT_NE(err(LookupOp(-2), w, ids).find("got -2"), std::string::npos);
  std::map<std::string, Tensor> g = {{"w", w}, {"ids", ids}, {"dout", RandomTensor({2, 5}, DataType::kFP32, rng)}};
  EXPECT_NE(ErrorOf([&] { RunOp(LookupGradOp(), g); }).find("input Out@GRAD: expected dims [2,4] (as Out), got [2,5]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
