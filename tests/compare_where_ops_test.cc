// The comparisons and where: every comparison against its C++ operator over
// values with NaN and infinities, broadcasting as the elementwise ops do,
// every dtype, where's forward and gradient (by hand and by finite
// differences), X and Y as no-need-buffer inputs of the grad, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "compiler/codegen/isa.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOp;
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Compare(const std::string& type, int64_t axis = -1) {
  return OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

std::vector<bool> Compared(const proto::OpDesc& op, const Tensor& x, const Tensor& y, Dims* dims = nullptr) {
  auto scope = RunOp(op, {{"x", x}, {"y", y}});
  const Tensor& out = scope->GetVar("out")->Get();
  EXPECT_EQ(out.dtype(), DataType::kBOOL);
  if (dims != nullptr) *dims = out.dims();
  return ValuesOf<bool>(out);
}

const std::vector<std::pair<std::string, std::function<bool(double, double)>>>& Comparisons() {
  static const auto* all = new std::vector<std::pair<std::string, std::function<bool(double, double)>>>{
      {"less_than", [](double a, double b) { return a < b; }},
      {"less_equal", [](double a, double b) { return a <= b; }},
      {"greater_than", [](double a, double b) { return a > b; }},
      {"greater_equal", [](double a, double b) { return a >= b; }},
      {"equal", [](double a, double b) { return a == b; }},
      {"not_equal", [](double a, double b) { return a != b; }}};
  return *all;
}

// Every ordered pair of a few values, NaN and infinities among them: IEEE
// comparisons (all false with a NaN, except not_equal).
TEST(CompareTest, EveryComparisonMatchesIeeeOnAllPairs) {
  const std::vector<double> values = {-INFINITY, -1.5, 0, 2, INFINITY, NAN};
  std::vector<double> xs, ys;
  for (double a : values) {
    for (double b : values) {
      xs.push_back(a);
      ys.push_back(b);
    }
  }
  const Dims dims = {static_cast<int64_t>(xs.size())};
  for (const auto& [type, fn] : Comparisons()) {
    SCOPED_TRACE(type);
    const std::vector<float> xf(xs.begin(), xs.end()), yf(ys.begin(), ys.end());
    const std::vector<bool> f32 = Compared(Compare(type), TypedTensor<float>(dims, xf), TypedTensor<float>(dims, yf));
    const std::vector<bool> f64 = Compared(Compare(type), TypedTensor<double>(dims, xs), TypedTensor<double>(dims, ys));
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(f32[i], fn(xs[i], ys[i])) << xs[i] << " vs " << ys[i];
      EXPECT_EQ(f64[i], fn(xs[i], ys[i])) << xs[i] << " vs " << ys[i];
    }
  }
}

TEST(CompareTest, IntegerAndBoolDtypes) {
  const std::vector<int64_t> a = {-5, 3, 3, 1LL << 40}, b = {-6, 3, 4, (1LL << 40) + 1};
  const std::vector<int32_t> a32(a.begin(), a.begin() + 3), b32(b.begin(), b.begin() + 3);
  const Tensor ba = TypedTensor<bool>({4}, {false, false, true, true}), bb = TypedTensor<bool>({4}, {false, true, false, true});
  for (const auto& [type, fn] : Comparisons()) {
    SCOPED_TRACE(type);
    const std::vector<bool> i64 = Compared(Compare(type), TypedTensor<int64_t>({4}, a), TypedTensor<int64_t>({4}, b));
    const std::vector<bool> i32 = Compared(Compare(type), TypedTensor<int32_t>({3}, a32), TypedTensor<int32_t>({3}, b32));
    const std::vector<bool> bools = Compared(Compare(type), ba, bb);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(i64[i], fn(static_cast<double>(a[i]), static_cast<double>(b[i]))) << i;
      if (i < 3) {
        EXPECT_EQ(i32[i], fn(a32[i], b32[i])) << i;
      }
      EXPECT_EQ(bools[i], fn(i >= 2, i % 2 == 1)) << i;  // false < true
    }
  }
}

// Y [3] into X [2, 3] (trailing dims), Y [2] on axis 0, Y [1, 3] with a size-1 dim.
TEST(CompareTest, YBroadcastsIntoXAsInTheElementwiseOps) {
  const Tensor x = TypedTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Dims dims;
  EXPECT_EQ(Compared(Compare("less_than"), x, TypedTensor<float>({3}, {2, 2, 5}), &dims),
            (std::vector<bool>{true, false, true, false, false, false}));
  EXPECT_EQ(dims, (Dims{2, 3}));
  EXPECT_EQ(Compared(Compare("greater_equal", 0), x, TypedTensor<float>({2}, {2, 5})),
            (std::vector<bool>{false, true, true, false, true, true}));
  EXPECT_EQ(Compared(Compare("equal"), x, TypedTensor<float>({1, 3}, {4, 2, 6})),
            (std::vector<bool>{false, true, false, true, false, true}));
}

TEST(CompareTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor x = TypedTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto error = [&](const proto::OpDesc& op, const Tensor& y) {
    return ErrorOf([&] { RunOp(op, {{"x", x}, {"y", y}}); });
  };
  EXPECT_NE(error(Compare("less_than"), TypedTensor<double>({3}, {1, 2, 3}))
                .find("'less_than': input Y: expected dtype f32 (as X), got f64"),
            std::string::npos);
  EXPECT_NE(error(Compare("equal"), TypedTensor<float>({2}, {1, 2})).find("'equal'"), std::string::npos);
  EXPECT_NE(error(Compare("not_equal", 2), TypedTensor<float>({3}, {1, 2, 3})).find("'not_equal'"),
            std::string::npos);
  for (const auto& [type, fn] : Comparisons()) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.grad_maker) << type;
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
  }
}

// ---- where ------------------------------------------------------------------------------

proto::OpDesc Where() {
  return OpBuilder("where").In("Condition", {"c"}).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
}

proto::OpDesc WhereGrad(bool with_dout = true) {
  OpBuilder b("where_grad");
  b.In("Condition", {"c"}).In("X", {"x"}).In("Y", {"y"}).Out("X@GRAD", {"dx"}).Out("Y@GRAD", {"dy"});
  if (with_dout) b.In("Out@GRAD", {"dout"});
  return b.Build();
}

TEST(WhereTest, PicksXWhereTheConditionHoldsElseY) {
  const Tensor c = TypedTensor<bool>({2, 2}, {true, false, false, true});
  auto scope = RunOp(Where(), {{"c", c}, {"x", TypedTensor<float>({2, 2}, {1, 2, 3, 4})},
                               {"y", TypedTensor<float>({2, 2}, {-1, -2, NAN, -4})}});
  const std::vector<float> out = ValuesOf<float>(scope->GetVar("out")->Get());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], -2);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 4);
  scope = RunOp(Where(), {{"c", c}, {"x", TypedTensor<int64_t>({2, 2}, {1, 2, 3, 4})},
                          {"y", TypedTensor<int64_t>({2, 2}, {5, 6, 7, 8})}});
  EXPECT_EQ(ValuesOf<int64_t>(scope->GetVar("out")->Get()), (std::vector<int64_t>{1, 6, 7, 4}));
}

TEST(WhereGradTest, SplitsOutGradByTheCondition) {
  const Tensor c = TypedTensor<bool>({3}, {true, false, true});
  Tensor meta;
  meta.ShareExternalData(nullptr, DataType::kFP64, {3});  // X and Y: dims only (no-need-buffer)
  auto scope = RunOp(WhereGrad(), {{"c", c}, {"x", meta}, {"y", meta}, {"dout", TypedTensor<double>({3}, {1, 2, 3})}});
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("dx")->Get()), (std::vector<double>{1, 0, 3}));
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("dy")->Get()), (std::vector<double>{0, 2, 0}));
  scope = RunOp(WhereGrad(false), {{"c", c}, {"x", meta}, {"y", meta}});
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("dx")->Get()), (std::vector<double>{0, 0, 0}));
  const OpInfo& info = OpRegistry::Global().Get("where_grad");
  EXPECT_EQ(info.no_need_buffer, (std::vector<std::string>{"X", "Y"}));
  EXPECT_EQ(OpRegistry::Global().Get("where").no_grad_inputs, std::vector<std::string>{"Condition"});
}

TEST(WhereGradTest, MatchesFiniteDifferences) {
  std::mt19937 rng(5);
  std::bernoulli_distribution coin(0.5);
  std::vector<bool> c(24);
  for (size_t i = 0; i < c.size(); ++i) c[i] = coin(rng);
  const std::map<std::string, Tensor> in = {{"c", TypedTensor<bool>({2, 3, 4}, c)},
                                            {"x", RandomTensor({2, 3, 4}, DataType::kFP64, rng)},
                                            {"y", RandomTensor({2, 3, 4}, DataType::kFP64, rng)}};
  EXPECT_EQ(CheckGrad(Where(), in, {"x", "y"}, {"out"}), "");
}

TEST(WhereTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor c = TypedTensor<bool>({2}, {true, false});
  const Tensor x = TypedTensor<float>({2}, {1, 2});
  auto error = [](const Tensor& c, const Tensor& x, const Tensor& y) {
    return ErrorOf([&] { RunOp(Where(), {{"c", c}, {"x", x}, {"y", y}}); });
  };
  EXPECT_NE(error(x, x, x).find("'where': input Condition: expected dtype bool, got f32"), std::string::npos);
  EXPECT_NE(error(c, x, TypedTensor<float>({1}, {1})).find("input Y: expected dims [2] (as X; where does not "
                                                             "broadcast), got [1]"),
            std::string::npos);
  EXPECT_NE(error(TypedTensor<bool>({1, 2}, {true, true}), x, x).find("input Condition: expected dims [2]"),
            std::string::npos);
  EXPECT_NE(error(c, x, TypedTensor<int64_t>({2}, {1, 2})).find("input Y: expected dtype f32 (as X), got i64"),
            std::string::npos);
  const Tensor i = TypedTensor<int32_t>({2}, {1, 2});
  EXPECT_NE(ErrorOf([&] { RunOp(WhereGrad(), {{"c", c}, {"x", i}, {"y", i}, {"dout", i}}); })
                .find("'where_grad': input X: expected dtype f32 or f64, got i32"),
            std::string::npos);
  EXPECT_EQ(OpRegistry::Global().Get("where").jit, JitLowering::kElementwise);
  EXPECT_EQ(OpRegistry::Global().Get("where_grad").jit, JitLowering::kElementwise);
}

// ---- the JIT's generated kernels --------------------------------------------------------

std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Odd shapes: around the 8 and 16 lanes and the unrolled loop, and rows with tails.
const std::vector<Dims>& Shapes() {
  static const auto* shapes = new std::vector<Dims>{{1}, {15}, {16}, {17}, {63}, {64}, {65}, {4099}, {3, 5, 7}, {7, 65}};
  return *shapes;
}

// f32 values from a small set with NaN and infinities, so that comparisons see ties.
Tensor Drawn(const Dims& dims, std::mt19937& rng) {
  const std::vector<float> set = {-2, -1, -0.0f, 0, 0.5f, 1, 2, INFINITY, -INFINITY, NAN};
  std::uniform_int_distribution<size_t> pick(0, set.size() - 1);
  std::vector<float> v(static_cast<size_t>(Numel(dims)));
  for (float& x : v) x = set[pick(rng)];
  return TypedTensor<float>(dims, v);
}

// A one-op cluster: the op's fragment must be the one generated kernel, and
// match the reference kernel exactly (selects and comparisons round nothing).
void CheckGenerated(test::LoweringCase c, Isa isa, unsigned seed) {
  c.options.isa = isa;
  SCOPED_TRACE(c.name + " " + IsaName(isa));
  const auto obj = test::CheckLoweringNumerics(c, 0, 0, seed);
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
}

TEST(CompareJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  const std::vector<Isa> isas = TestedIsas();
  ASSERT_FALSE(isas.empty()) << "this CPU has neither AVX-512 nor AVX2+FMA";
  std::mt19937 rng(11);
  for (Isa isa : isas) {
    for (const Dims& x : Shapes()) {
      // Y as X, along the trailing dims, on axis 0, and a single value.
      const std::vector<std::pair<Dims, int64_t>> ys = {{x, -1}, {{x.back()}, -1}, {{x[0]}, 0}, {{1}, -1}};
      for (const auto& [type, fn] : Comparisons()) {
        for (const auto& [y, axis] : ys) {
          test::LoweringCase c;
          c.name = type + " " + DimsToString(x) + " vs " + DimsToString(y);
          c.ops = {Compare(type, axis)};
          c.inputs = {{"x", x}, {"y", y}};
          c.outputs = {"out"};
          c.given = {{"x", Drawn(x, rng)}, {"y", Drawn(y, rng)}};
          CheckGenerated(c, isa, static_cast<unsigned>(Numel(x)));
        }
      }
      test::LoweringCase b;  // bool X and Y compare as 0 and 1
      b.name = "less_than bool " + DimsToString(x);
      b.ops = {Compare("less_than")};
      b.inputs = {{"x", x}, {"y", x}};
      b.dtypes = {{"x", DataType::kBOOL}, {"y", DataType::kBOOL}};
      b.outputs = {"out"};
      CheckGenerated(b, isa, static_cast<unsigned>(Numel(x)));
    }
  }
}

TEST(WhereJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  std::mt19937 rng(12);
  for (Isa isa : TestedIsas()) {
    for (const Dims& x : Shapes()) {
      test::LoweringCase fwd;
      fwd.name = "where " + DimsToString(x);
      fwd.ops = {Where()};
      fwd.inputs = {{"c", x}, {"x", x}, {"y", x}};
      fwd.dtypes = {{"c", DataType::kBOOL}};
      fwd.outputs = {"out"};
      fwd.given = {{"x", Drawn(x, rng)}, {"y", Drawn(x, rng)}};
      CheckGenerated(fwd, isa, static_cast<unsigned>(Numel(x)));
      test::LoweringCase bools = fwd;  // bool X and Y
      bools.name = "where bool " + DimsToString(x);
      bools.given.clear();
      bools.dtypes = {{"c", DataType::kBOOL}, {"x", DataType::kBOOL}, {"y", DataType::kBOOL}};
      CheckGenerated(bools, isa, static_cast<unsigned>(Numel(x)) + 1);
      // The gradient with both outputs, with X@GRAD alone, and without Out@GRAD (zeros).
      for (int form = 0; form < 3; ++form) {
        test::LoweringCase grad;
        grad.name = "where_grad form " + std::to_string(form) + " " + DimsToString(x);
        grad.ops = {WhereGrad(form != 2)};
        grad.inputs = {{"c", x}, {"x", x}, {"y", x}};
        if (form != 2) grad.inputs.push_back({"dout", x});
        grad.dtypes = {{"c", DataType::kBOOL}};
        grad.outputs = {"dx", "dy"};
        if (form == 1) {
          (*grad.ops[0].mutable_outputs())[1].set_args(0, kEmptyVarName);
          grad.outputs = {"dx"};
        }
        CheckGenerated(grad, isa, static_cast<unsigned>(Numel(x)) + 2);
      }
    }
  }
}

// f64 and integer operands, which generated kernels do not hold: the ops
// give no fragments and run their framework kernels inside the cluster.
TEST(CompareWhereJitTest, OtherDtypesRunTheFrameworkKernelsInTheCluster) {
  std::mt19937 rng(13);
  const Dims x = {5, 17};
  std::vector<test::LoweringCase> cases(3);
  cases[0].ops = {Compare("greater_equal")};
  cases[0].inputs = {{"x", x}, {"y", {17}}};
  cases[0].dtypes = {{"x", DataType::kFP64}, {"y", DataType::kFP64}};
  cases[0].outputs = {"out"};
  cases[1].ops = {Compare("not_equal")};
  cases[1].inputs = {{"x", x}, {"y", x}};
  cases[1].given = {{"x", TypedTensor<int64_t>(x, std::vector<int64_t>(85, 3))},
                    {"y", TypedTensor<int64_t>(x, std::vector<int64_t>(85, 4))}};
  cases[1].dtypes = {{"x", DataType::kINT64}, {"y", DataType::kINT64}};
  cases[1].outputs = {"out"};
  cases[2].ops = {Where(), WhereGrad()};
  cases[2].inputs = {{"c", x}, {"x", x}, {"y", x}, {"dout", x}};
  cases[2].dtypes = {{"c", DataType::kBOOL}, {"x", DataType::kFP64}, {"y", DataType::kFP64}, {"dout", DataType::kFP64}};
  cases[2].outputs = {"out", "dx", "dy"};
  for (test::LoweringCase& c : cases) {
    c.name = c.ops[0].type() + " of " + DataTypeName(c.dtypes.at("x"));
    SCOPED_TRACE(c.name);
    const auto obj = test::CheckLoweringNumerics(c, 0, 0);
    ASSERT_EQ(obj->program.instructions.size(), c.ops.size()) << obj->Listing();
    for (size_t i = 0; i < c.ops.size(); ++i) {
      EXPECT_EQ(obj->program.instructions[i].kernel->name(), c.ops[i].type()) << obj->Listing();
    }
  }
}

}  // namespace
}  // namespace kiln
