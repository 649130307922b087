// Dynamic shapes (issue 32): symbolic dims fitted from values, the symbols a
// change of signature makes, and the compile cache's policy: one compile for
// every value of the dims that change, instances that agree with the
// reference at every size, and a specialised compile (counted and explained)
// where the dynamic one cannot be made.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/compile_cache.h"
#include "compiler/dynamic/lower_dynamic.h"
#include "compiler/dynamic/sym_dim.h"
#include "framework/op_desc.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using jit::FitSymDim;
using jit::ShapeSignature;
using jit::Symbol;
using jit::SymDim;

const std::vector<Symbol> kNS = {{"N", {{0, 0}}}, {"S", {{0, 1}}}};
// N at 4, 8 (grid) and 12 (check); S at 6, 12 and 18.
const std::vector<std::vector<int64_t>> kValues = {{4, 8, 12}, {6, 12, 18}};

// The fit of f over the grid of kValues, checked at the third values.
std::optional<SymDim> Fit(const std::function<int64_t(int64_t n, int64_t s)>& f) {
  std::vector<int64_t> grid;
  for (uint32_t m = 0; m < 4; ++m) {
    const auto p = jit::GridPoint(kValues, m);
    grid.push_back(f(p[0], p[1]));
  }
  return FitSymDim(grid, kValues, f(12, 18));
}

TEST(SymDimTest, FitsProductsSumsAndDivisionsByConstants) {
  const std::vector<std::pair<std::function<int64_t(int64_t, int64_t)>, std::string>> cases = {
      {[](int64_t, int64_t) { return 128; }, "128"},
      {[](int64_t n, int64_t) { return n; }, "N"},
      {[](int64_t n, int64_t s) { return n * s * 128; }, "128*N*S"},
      {[](int64_t n, int64_t s) { return n * s + 2 * n; }, "N*S+2*N"},
      {[](int64_t, int64_t s) { return s / 2; }, "S/2"},
      {[](int64_t, int64_t s) { return 3 * s / 2; }, "(3*S)/2"},
      {[](int64_t n, int64_t s) { return s + n + 1; }, "S+N+1"},
  };
  for (const auto& [f, text] : cases) {
    const auto d = Fit(f);
    ASSERT_TRUE(d.has_value()) << text;
    EXPECT_EQ(d->ToString(kNS), text);
    EXPECT_EQ(d->Eval({5, 40}), f(5, 40)) << text;
  }
}

TEST(SymDimTest, RejectsWhatIsNotAPolynomial) {
  // A max, a floor of an odd size and a square fit the grid but not the check.
  EXPECT_FALSE(Fit([](int64_t, int64_t s) { return std::max<int64_t>(s, 10); }).has_value());
  EXPECT_FALSE(Fit([](int64_t, int64_t s) { return (s - 1) / 4 + 1; }).has_value());
  EXPECT_FALSE(Fit([](int64_t, int64_t s) { return s * s; }).has_value());
}

TEST(SymDimTest, EvaluatesOnlyToNonNegativeIntegers) {
  const auto half = Fit([](int64_t, int64_t s) { return s / 2; });
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->Eval({1, 10}), 5);
  EXPECT_FALSE(half->Eval({1, 11}).has_value());  // 11/2 is no size
  const auto less = Fit([](int64_t n, int64_t s) { return s - n; });
  ASSERT_TRUE(less.has_value());
  EXPECT_EQ(less->ToString(kNS), "S-N");
  EXPECT_FALSE(less->Eval({10, 4}).has_value());
}

ShapeSignature Sig(const std::vector<Dims>& dims) {
  ShapeSignature sig;
  for (const Dims& d : dims) sig.inputs.push_back({DataType::kFP32, d});
  return sig;
}

TEST(SymbolsTest, DimsThatChangeAlikeAreOneSymbol) {
  auto symbols = jit::SymbolsForChange(Sig({{16, 128, 1}, {16, 128, 1}, {128, 64}}),
                                       Sig({{16, 144, 1}, {16, 144, 1}, {128, 64}}));
  ASSERT_EQ(symbols.size(), 1u);
  EXPECT_EQ(symbols[0].name, "S");
  EXPECT_EQ(symbols[0].positions, (std::vector<std::pair<int, int>>{{0, 1}, {1, 1}}));

  symbols = jit::SymbolsForChange(Sig({{16, 128, 1}, {16, 128}}), Sig({{8, 144, 1}, {8, 144}}));
  ASSERT_EQ(symbols.size(), 2u);
  EXPECT_EQ(symbols[0].name, "N");
  EXPECT_EQ(symbols[1].name, "S");
  // A rank or dtype change makes no symbols.
  EXPECT_TRUE(jit::SymbolsForChange(Sig({{16, 128}}), Sig({{16, 128, 1}})).empty());
  // An earlier object's symbols stay where they still hold one value.
  symbols = jit::SymbolsForChange(Sig({{16, 128}}), Sig({{8, 128}}), {{"S", {{0, 1}}}});
  ASSERT_EQ(symbols.size(), 2u);
  EXPECT_EQ(symbols[0].positions, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(symbols[1].positions, (std::vector<std::pair<int, int>>{{0, 1}}));
}

// tanh(x) * 0.5 + b over x [N, S, 8] and b [8].
test::LoweringCase TanhScaleAdd(int64_t n, int64_t s) {
  test::LoweringCase c;
  c.name = "dynamic_tanh_scale_add";
  c.ops = {OpBuilder("tanh").In("X", {"x"}).Out("Out", {"t"}).Build(),
           OpBuilder("scale").In("X", {"t"}).Out("Out", {"h"}).Attr("scale", 0.5f).Build(),
           OpBuilder("elementwise_add").In("X", {"h"}).In("Y", {"b"}).Out("Out", {"y"}).Attr("axis", -1).Build()};
  c.inputs = {{"x", {n, s, 8}}, {"b", {8}}};
  c.outputs = {"y"};
  return c;
}

struct Launch {
  std::shared_ptr<const jit::CompiledObject> obj;
  std::string error;  // the comparison with the reference ("" when equal)
};

// Compiles (or instantiates) `c`'s cluster for its shapes in `cache` and runs
// it against the reference kernels.
Launch CompileAndCompare(jit::CompileCache& cache, const std::string& key, const test::LoweringCase& c) {
  std::mt19937 rng(7);
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, dims] : c.inputs) inputs[name] = test::RandomTensor(dims, DataType::kFP32, rng, -2.0, 2.0);
  Launch r;
  r.obj = cache.Compile(key, test::SignatureOf(c));
  if (!r.obj) {
    r.error = "no compiled object";
    return r;
  }
  const auto reference = test::RunOps(c.ops, inputs, /*use_onednn=*/false);
  const auto outs = test::RunCompiled(*r.obj, inputs);
  for (size_t o = 0; o < outs.size(); ++o) {
    r.error += test::CompareTensors(outs[o], reference->GetVar(r.obj->output_names[o])->Get(), 1e-5, 1e-5);
  }
  return r;
}

jit::CompileCacheOptions Options(jit::DynamicPolicy policy, std::vector<std::string>* log) {
  jit::CompileCacheOptions o;
  o.dynamic = policy;
  o.verbose = 2;
  o.compile = test::LoweringCase::DefaultOptions();
  o.cluster_name = [](const std::string&) { return std::string("c0"); };
  o.log = [log](const std::string& line) { log->push_back(line); };
  return o;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(DynamicCacheTest, OneCompileServesEverySequenceLength) {
  std::vector<std::string> log;
  jit::CompileCache cache(Options(jit::DynamicPolicy::kAuto, &log));
  const std::string key = cache.AddSubgraph(test::MakeSubgraph(TanhScaleAdd(3, 5)));
  for (int64_t s : {5, 7, 16, 33, 2, 100, 7}) {
    const Launch r = CompileAndCompare(cache, key, TanhScaleAdd(3, s));
    EXPECT_EQ(r.error, "") << "S=" << s << "\n" << Joined(log);
  }
  const jit::CacheStats st = cache.stats();
  EXPECT_EQ(st.compiles, 2) << Joined(log);  // S=5 specialised, then one for every S
  EXPECT_EQ(st.dynamic_compiles, 1);
  EXPECT_EQ(st.instances, 4);  // 16, 33, 2, 100 (7 is the dynamic compile's own shape)
  EXPECT_NE(Joined(log).find("compiles once for every value of S = x dim 1"), std::string::npos) << Joined(log);
  // The listing shows the symbolic dims next to the concrete ones.
  const auto obj = cache.Compile(key, test::SignatureOf(TanhScaleAdd(3, 16)));
  ASSERT_NE(obj, nullptr);
  EXPECT_NE(obj->Listing().find("# for every (f32[3,S,8], f32[8]) (S = x dim 1); instance of object"),
            std::string::npos)
      << obj->Listing();
  EXPECT_NE(obj->Listing().find("f32[3,16,8] = f32[3,S,8]"), std::string::npos) << obj->Listing();
}

TEST(DynamicCacheTest, OffCompilesEverySignature) {
  std::vector<std::string> log;
  jit::CompileCache cache(Options(jit::DynamicPolicy::kOff, &log));
  const std::string key = cache.AddSubgraph(test::MakeSubgraph(TanhScaleAdd(3, 5)));
  for (int64_t s : {5, 7, 16}) EXPECT_EQ(CompileAndCompare(cache, key, TanhScaleAdd(3, s)).error, "");
  EXPECT_EQ(cache.stats().compiles, 3);
  EXPECT_EQ(cache.stats().dynamic_compiles, 0);
}

TEST(DynamicCacheTest, OnMakesTheDeclaredDimsSymbolicFromTheFirstCompile) {
  std::vector<std::string> log;
  jit::CompileCache cache(Options(jit::DynamicPolicy::kOn, &log));
  JitSubgraph sg = test::MakeSubgraph(TanhScaleAdd(3, 5));
  for (auto& v : *sg.block.mutable_vars()) {
    if (v.name() == "x") v.mutable_dims()->Set(0, -1);  // the batch is declared -1
  }
  const std::string key = cache.AddSubgraph(sg);
  for (int64_t n : {3, 4, 9}) EXPECT_EQ(CompileAndCompare(cache, key, TanhScaleAdd(n, 5)).error, "");
  EXPECT_EQ(cache.stats().compiles, 1) << Joined(log);
  EXPECT_EQ(cache.stats().instances, 2);
}

// `op`, writing y, then r = relu(y), the cluster's output.
test::LoweringCase ThenRelu(const std::string& name, const proto::OpDesc& op,
                            std::vector<std::pair<std::string, Dims>> inputs) {
  test::LoweringCase c;
  c.name = name;
  c.ops = {op, OpBuilder("relu").In("X", {"y"}).Out("Out", {"r"}).Build()};
  c.inputs = std::move(inputs);
  c.outputs = {"r"};
  return c;
}

TEST(DynamicCacheTest, AStepThatFiresAtOneSizeOnlyKeepsTheShapeSpecialised) {
  // At batch 1 the batch_one step runs the matmul as a gemv; at 2 and 3 (the
  // probes) it does not: the lowerings differ, so batch 1 compiles on its own.
  std::vector<std::string> log;
  jit::CompileCache cache(Options(jit::DynamicPolicy::kAuto, &log));
  auto mm = [](int64_t n) {
    return ThenRelu("dynamic_matmul", OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"y"}).Build(),
                    {{"x", {n, 24}}, {"w", {24, 16}}});
  };
  const std::string key = cache.AddSubgraph(test::MakeSubgraph(mm(4)));
  for (int64_t n : {4, 1}) EXPECT_EQ(CompileAndCompare(cache, key, mm(n)).error, "");
  const jit::CacheStats st = cache.stats();
  EXPECT_EQ(st.compiles, 2);
  EXPECT_EQ(st.dynamic_failures, 1) << Joined(log);
  EXPECT_NE(Joined(log).find("stays specialised for N = x dim 0"), std::string::npos) << Joined(log);
}

TEST(DynamicCacheTest, AValueTheObjectCannotServeCompilesOnItsOwn) {
  // A 2x2 max pool with stride 2 halves H: fitted as H/2 from H = 6, 12, 18.
  // At H = 5 shape inference gives 2 rows where H/2 is no size: a failed
  // guard, and H = 5 compiles specialised (counted and explained).
  std::vector<std::string> log;
  jit::CompileCache cache(Options(jit::DynamicPolicy::kAuto, &log));
  auto pool = [](int64_t h) {
    const std::vector<int64_t> window = {2, 2};
    return ThenRelu("dynamic_pool",
                    OpBuilder("pool2d").In("X", {"x"}).Out("Out", {"y"}).Attr("ksize", window).Attr("strides", window).Build(),
                    {{"x", {2, 3, h, 8}}});
  };
  const std::string key = cache.AddSubgraph(test::MakeSubgraph(pool(4)));
  for (int64_t h : {4, 6, 10, 5, 12}) EXPECT_EQ(CompileAndCompare(cache, key, pool(h)).error, "") << "H=" << h;
  const jit::CacheStats st = cache.stats();
  EXPECT_EQ(st.dynamic_compiles, 1) << Joined(log);
  EXPECT_EQ(st.guard_failures, 1) << Joined(log);
  EXPECT_EQ(st.compiles, 3) << Joined(log);  // H=4, every H, H=5
  EXPECT_EQ(st.instances, 2) << Joined(log);  // H=10, H=12
  EXPECT_NE(Joined(log).find("cannot serve (f32[2,3,5,8])"), std::string::npos) << Joined(log);
}

}  // namespace
}  // namespace kiln
