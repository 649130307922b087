// arg_max, arg_min and cast: hand-computed values, every axis against a direct
// loop, ties and NaN, every dtype pair of cast with its edge values (NaN,
// infinities, out of range, i64 -> i32 wrap), cast's gradient, errors, and
// cast's generated kernels (f32 and bool) and framework kernels (the other
// dtypes) in JIT clusters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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
using test::RunOp;
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Arg(const std::string& type, int64_t axis = -1, bool keepdims = false, bool flatten = false) {
  return OpBuilder(type)
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("axis", axis)
      .Attr("keepdims", keepdims)
      .Attr("flatten", flatten)
      .Build();
}

std::vector<int64_t> ArgOf(const proto::OpDesc& op, const Tensor& x, Dims* dims = nullptr) {
  auto scope = RunOp(op, {{"x", x}});
  const Tensor& out = scope->GetVar("out")->Get();
  EXPECT_EQ(out.dtype(), DataType::kINT64);
  if (dims != nullptr) *dims = out.dims();
  return ValuesOf<int64_t>(out);
}

TEST(ArgMaxMinTest, HandComputedIndicesAndShapes) {
  const Tensor x = TypedTensor<float>({2, 3}, {1, 5, -2, 4, 0, 7});
  Dims dims;
  EXPECT_EQ(ArgOf(Arg("arg_max"), x, &dims), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(dims, (Dims{2}));
  EXPECT_EQ(ArgOf(Arg("arg_min", 0), x, &dims), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(dims, (Dims{3}));
  EXPECT_EQ(ArgOf(Arg("arg_min", 1, true), x, &dims), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(dims, (Dims{2, 1}));
  EXPECT_EQ(ArgOf(Arg("arg_max", 0, false, true), x, &dims), (std::vector<int64_t>{5}));
  EXPECT_EQ(dims, (Dims{1}));
  EXPECT_EQ(ArgOf(Arg("arg_min", 0, true, true), x, &dims), (std::vector<int64_t>{2}));
  EXPECT_EQ(dims, (Dims{1}));
  // Rank 1 without keepdims: nothing is left, Out is [1].
  EXPECT_EQ(ArgOf(Arg("arg_max"), TypedTensor<int32_t>({4}, {3, 9, 9, 1}), &dims), (std::vector<int64_t>{1}));
  EXPECT_EQ(dims, (Dims{1}));
}

// Every axis of a [3, 4, 5] tensor with few distinct values (many ties), in
// every dtype, against a loop that keeps the first extreme.
template <typename T>
void CheckAgainstDirect(bool max) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> pick(-3, 3);
  std::vector<T> v(60);
  for (auto& e : v) e = static_cast<T>(pick(rng));
  const Tensor x = TypedTensor<T>({3, 4, 5}, v);
  const int64_t dims[3] = {3, 4, 5};
  const int64_t strides[3] = {20, 5, 1};
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> want;
    for (int64_t i = 0; i < 60; ++i) {
      if ((i / strides[axis]) % dims[axis] != 0) continue;  // one start per line along the axis
      int64_t best = 0;
      for (int64_t k = 1; k < dims[axis]; ++k) {
        const T a = v[i + k * strides[axis]], b = v[i + best * strides[axis]];
        if (max ? a > b : a < b) best = k;
      }
      want.push_back(best);
    }
    EXPECT_EQ(ArgOf(Arg(max ? "arg_max" : "arg_min", axis), x), want) << "axis " << axis;
    EXPECT_EQ(ArgOf(Arg(max ? "arg_max" : "arg_min", axis - 3), x), want) << "axis " << axis - 3;
  }
}

TEST(ArgMaxMinTest, EveryAxisInEveryDtypeMatchesADirectLoop) {
  for (bool max : {true, false}) {
    CheckAgainstDirect<float>(max);
    CheckAgainstDirect<double>(max);
    CheckAgainstDirect<int64_t>(max);
    CheckAgainstDirect<int32_t>(max);
  }
}

// Ties give the first index; a NaN is both the maximum and the minimum, and
// the first NaN wins (torch.argmax / argmin).
TEST(ArgMaxMinTest, TiesTakeTheFirstIndexAndNanIsTheExtreme) {
  const Tensor x = TypedTensor<double>({3, 4}, {2, 7, 7, 1, 1, NAN, 9, NAN, -INFINITY, -INFINITY, 0, INFINITY});
  EXPECT_EQ(ArgOf(Arg("arg_max"), x), (std::vector<int64_t>{1, 1, 3}));
  EXPECT_EQ(ArgOf(Arg("arg_min"), x), (std::vector<int64_t>{3, 1, 0}));
  EXPECT_EQ(ArgOf(Arg("arg_max", 0, false, true), x), (std::vector<int64_t>{5}));
  EXPECT_EQ(ArgOf(Arg("arg_min", 0, false, true), x), (std::vector<int64_t>{5}));
}

TEST(ArgMaxMinTest, BadInputsNameTheOpAndWhatWasExpected) {
  auto error = [](const proto::OpDesc& op, const Tensor& x) { return ErrorOf([&] { RunOp(op, {{"x", x}}); }); };
  const Tensor x = TypedTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_NE(error(Arg("arg_max"), TypedTensor<bool>({2}, {true, false}))
                .find("'arg_max': input X: expected dtype f32, f64, i64 or i32, got bool"),
            std::string::npos);
  EXPECT_NE(error(Arg("arg_min", 2), x).find("'arg_min': attribute axis"), std::string::npos);
  EXPECT_NE(error(Arg("arg_min", -3), x).find("'arg_min': attribute axis"), std::string::npos);
  EXPECT_NE(error(Arg("arg_max", 1), TypedTensor<float>({2, 0}, {}))
                .find("input X: dim 1 (attribute axis) has size 0: no index to return"),
            std::string::npos);
  const OpInfo& info = OpRegistry::Global().Get("arg_max");
  EXPECT_FALSE(info.grad_maker);
  EXPECT_EQ(info.jit, JitLowering::kFramework);
}

// ---- cast -----------------------------------------------------------------------------

proto::OpDesc Cast(DataType in, DataType out, const std::string& x = "x", const std::string& y = "out") {
  return OpBuilder("cast")
      .In("X", {x})
      .Out("Out", {y})
      .Attr("in_dtype", static_cast<int64_t>(in))
      .Attr("out_dtype", static_cast<int64_t>(out))
      .Build();
}

// The values below as a tensor of `dtype` (bool: v != 0).
const std::vector<double> kValues = {-3, -2.75, -1, -0.5, 0, 0.25, 1, 1.5, 2.999, 100};

Tensor ValuesAs(DataType dtype) {
  switch (dtype) {
    case DataType::kFP32: return TypedTensor<float>({10}, std::vector<float>(kValues.begin(), kValues.end()));
    case DataType::kFP64: return TypedTensor<double>({10}, kValues);
    case DataType::kINT64: return TypedTensor<int64_t>({10}, {-3, -2, -1, 0, 0, 0, 1, 1, 2, 100});
    case DataType::kINT32: return TypedTensor<int32_t>({10}, {-3, -2, -1, 0, 0, 0, 1, 1, 2, 100});
    default: return TypedTensor<bool>({10}, {true, true, true, true, false, true, true, true, true, true});
  }
}

// Element i of a tensor of any of the five dtypes, as double.
double At(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFP32: return t.data<float>()[i];
    case DataType::kFP64: return t.data<double>()[i];
    case DataType::kINT64: return static_cast<double>(t.data<int64_t>()[i]);
    case DataType::kINT32: return t.data<int32_t>()[i];
    default: return t.data<bool>()[i] ? 1 : 0;
  }
}

// Every pair: to bool is v != 0; float to integer truncates; bool to a
// number is 0 or 1; everything else keeps the (small) value.
TEST(CastTest, EveryPairOfTheFiveDtypes) {
  const DataType all[] = {DataType::kFP32, DataType::kINT64, DataType::kINT32, DataType::kFP64, DataType::kBOOL};
  for (DataType in : all) {
    const Tensor x = ValuesAs(in);
    for (DataType out : all) {
      SCOPED_TRACE(std::string(DataTypeName(in)) + " -> " + DataTypeName(out));
      auto scope = RunOp(Cast(in, out), {{"x", x}});
      const Tensor& y = scope->GetVar("out")->Get();
      ASSERT_EQ(y.dtype(), out);
      ASSERT_EQ(y.dims(), x.dims());
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double v = At(x, i);
        const double want = out == DataType::kBOOL  ? (v != 0 ? 1 : 0)
                            : out == DataType::kFP32 ? static_cast<float>(v)
                            : out == DataType::kFP64 ? v
                                                     : std::trunc(v);
        EXPECT_EQ(At(y, i), want) << "element " << i << " (" << v << ")";
      }
    }
  }
}

TEST(CastTest, NanInfinitiesAndOutOfRangeValues) {
  const double big = 1e20;
  const Tensor x = TypedTensor<double>({6}, {NAN, INFINITY, -INFINITY, big, -big, -2147483648.75});
  auto run = [&](DataType out) {
    auto scope = RunOp(Cast(DataType::kFP64, out), {{"x", x}});
    Tensor t;
    t.CopyFrom(scope->GetVar("out")->Get());
    return t;
  };
  using L64 = std::numeric_limits<int64_t>;
  using L32 = std::numeric_limits<int32_t>;
  // NaN gives 0, the rest saturates; -2147483648.75 truncates to INT32_MIN.
  EXPECT_EQ(ValuesOf<int64_t>(run(DataType::kINT64)),
            (std::vector<int64_t>{0, L64::max(), L64::min(), L64::max(), L64::min(), -2147483648LL}));
  EXPECT_EQ(ValuesOf<int32_t>(run(DataType::kINT32)),
            (std::vector<int32_t>{0, L32::max(), L32::min(), L32::max(), L32::min(), L32::min()}));
  EXPECT_EQ(ValuesOf<bool>(run(DataType::kBOOL)), (std::vector<bool>{true, true, true, true, true, true}));
  const std::vector<float> f = ValuesOf<float>(run(DataType::kFP32));
  EXPECT_TRUE(std::isnan(f[0]));
  EXPECT_EQ(f[1], INFINITY);
  EXPECT_EQ(f[3], 1e20f);
  EXPECT_EQ(ValuesOf<float>(RunOp(Cast(DataType::kFP64, DataType::kFP32), {{"x", TypedTensor<double>({1}, {1e300})}})
                                ->GetVar("out")
                                ->Get()),
            (std::vector<float>{INFINITY}));
  // 2^63 is just out of int64's range, 2^63 - 1024 (the largest double below) in it.
  const Tensor edge = TypedTensor<double>({2}, {9223372036854775808.0, 9223372036854774784.0});
  EXPECT_EQ(ValuesOf<int64_t>(RunOp(Cast(DataType::kFP64, DataType::kINT64), {{"x", edge}})->GetVar("out")->Get()),
            (std::vector<int64_t>{L64::max(), 9223372036854774784LL}));
  // i64 -> i32 keeps the low 32 bits.
  const Tensor wide = TypedTensor<int64_t>({3}, {(int64_t{1} << 32) + 5, int64_t{1} << 31, -(int64_t{1} << 32) - 1});
  EXPECT_EQ(ValuesOf<int32_t>(RunOp(Cast(DataType::kINT64, DataType::kINT32), {{"x", wide}})->GetVar("out")->Get()),
            (std::vector<int32_t>{5, L32::min(), -1}));
}

// Between float dtypes the gradient is a cast back; none for other pairs.
TEST(CastTest, GradientCastsBackBetweenFloatDtypes) {
  const OpInfo& info = OpRegistry::Global().Get("cast");
  const std::vector<proto::OpDesc> grads = info.grad_maker(Cast(DataType::kFP32, DataType::kFP64));
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0].type(), "cast");
  EXPECT_EQ(InputArgs(grads[0], "X"), std::vector<std::string>{"out@GRAD"});
  EXPECT_EQ(OutputArgs(grads[0], "Out"), std::vector<std::string>{"x@GRAD"});
  const Tensor dout = TypedTensor<double>({3}, {0.1, -2.5, 1e-3});
  auto scope = RunOp(grads[0], {{"out@GRAD", dout}});
  const Tensor& dx = scope->GetVar("x@GRAD")->Get();
  EXPECT_EQ(ValuesOf<float>(dx), (std::vector<float>{0.1f, -2.5f, 1e-3f}));
  // f64 -> f64 through finite differences (CheckGrad runs in f64).
  std::mt19937 rng(9);
  EXPECT_EQ(CheckGrad(Cast(DataType::kFP64, DataType::kFP64), {{"x", test::RandomTensor({4, 3}, DataType::kFP64, rng)}},
                      {"x"}, {"out"}),
            "");
  const std::vector<std::pair<DataType, DataType>> others = {
      {DataType::kFP32, DataType::kINT64}, {DataType::kINT32, DataType::kFP64}, {DataType::kBOOL, DataType::kFP32}};
  for (const auto& [in, out] : others) {
    EXPECT_TRUE(info.grad_maker(Cast(in, out)).empty()) << DataTypeName(in) << " -> " << DataTypeName(out);
  }
}

TEST(CastTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor x = TypedTensor<float>({2}, {1, 2});
  EXPECT_NE(ErrorOf([&] { RunOp(Cast(DataType::kFP64, DataType::kFP32), {{"x", x}}); })
                .find("'cast': input X: expected dtype f64 (attribute in_dtype = 3), got f32"),
            std::string::npos);
  proto::OpDesc bad = Cast(DataType::kFP32, DataType::kFP32);
  SetAttr(&bad, "out_dtype", int64_t{5});
  EXPECT_NE(ErrorOf([&] { RunOp(bad, {{"x", x}}); })
                .find("'cast': attribute out_dtype: expected a DataType (FP32 = 0, INT64 = 1, INT32 = 2, FP64 = 3, "
                      "BOOL = 4), got 5"),
            std::string::npos);
  SetAttr(&bad, "in_dtype", int64_t{-1});
  EXPECT_NE(ErrorOf([&] { RunOp(bad, {{"x", x}}); }).find("attribute in_dtype: expected a DataType"),
            std::string::npos);
  const proto::OpDesc missing = OpBuilder("cast").In("X", {"x"}).Out("Out", {"out"}).Build();
  EXPECT_NE(ErrorOf([&] { RunOp(missing, {{"x", x}}); }).find("in_dtype"), std::string::npos);
  EXPECT_EQ(OpRegistry::Global().Get("cast").jit, JitLowering::kElementwise);
}

// ---- cast in JIT clusters -------------------------------------------------------------------

// Specials among random values: NaN and signed zeros (bool: NaN is true, -0 false),
// infinities and a denormal.
Tensor SpecialFloats(const Dims& dims, std::mt19937& rng) {
  const std::vector<float> specials = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1e-40f, 0.0f};
  std::uniform_real_distribution<float> dist(-2, 2);
  std::uniform_int_distribution<size_t> pick(0, 2 * specials.size());
  std::vector<float> v(static_cast<size_t>(Numel(dims)));
  for (float& x : v) {
    const size_t k = pick(rng);
    x = k < specials.size() ? specials[k] : dist(rng);
  }
  return TypedTensor<float>(dims, v);
}

// Between f32 and bool (either way, or to itself), and a round trip
// f32 -> bool -> f32 inside one kernel (the bool stays in a register and
// must be 0/1 there): one generated kernel each, exactly the reference.
TEST(CastJitTest, F32AndBoolCastsAreGeneratedKernelsOnBothIsas) {
  std::mt19937 rng(17);
  const DataType f32 = DataType::kFP32, b = DataType::kBOOL;
  const std::vector<std::pair<DataType, DataType>> pairs = {{f32, b}, {b, f32}, {f32, f32}, {b, b}};
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (!IsaSupported(isa)) continue;
    for (const Dims& dims : std::vector<Dims>{{1}, {15}, {16}, {17}, {63}, {64}, {65}, {4099}, {3, 5, 7}}) {
      for (int form = 0; form <= static_cast<int>(pairs.size()); ++form) {
        test::LoweringCase c;
        c.options.isa = isa;
        c.inputs = {{"x", dims}};
        if (form < static_cast<int>(pairs.size())) {
          const auto [in, out] = pairs[form];
          c.name = std::string("cast ") + DataTypeName(in) + " -> " + DataTypeName(out);
          c.ops = {Cast(in, out)};
          c.dtypes = {{"x", in}};
          c.outputs = {"out"};
        } else {
          c.name = "cast f32 -> bool -> f32";
          c.ops = {Cast(f32, b, "x", "mask"), Cast(b, f32, "mask", "out")};
          c.outputs = {"out"};
        }
        if (c.dtypes.empty() || c.dtypes.at("x") == f32) c.given["x"] = SpecialFloats(dims, rng);
        SCOPED_TRACE(c.name + " " + DimsToString(dims) + " " + IsaName(isa));
        const auto obj = test::CheckLoweringNumerics(c, 0, 0, static_cast<unsigned>(Numel(dims)));
        ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
        EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

// Casts from or to f64, i64 and i32 give no fragments: their framework
// kernel runs in the cluster.
TEST(CastJitTest, OtherDtypesRunTheFrameworkKernelInTheCluster) {
  const Dims dims = {3, 17};
  const std::vector<std::pair<DataType, DataType>> pairs = {{DataType::kFP32, DataType::kFP64},
                                                            {DataType::kFP32, DataType::kINT64},
                                                            {DataType::kINT32, DataType::kFP32},
                                                            {DataType::kBOOL, DataType::kINT64}};
  for (const auto& [in, out] : pairs) {
    test::LoweringCase c;
    c.name = std::string("cast ") + DataTypeName(in) + " -> " + DataTypeName(out);
    SCOPED_TRACE(c.name);
    c.ops = {Cast(in, out)};
    c.inputs = {{"x", dims}};
    c.dtypes = {{"x", in}};
    if (in == DataType::kINT32) c.given["x"] = TypedTensor<int32_t>(dims, std::vector<int32_t>(51, -7));
    c.outputs = {"out"};
    const auto obj = test::CheckLoweringNumerics(c, 0, 0);
    ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
    EXPECT_EQ(obj->program.instructions[0].kernel->name(), "cast") << obj->Listing();
  }
}

}  // namespace
}  // namespace kiln
