// Generated fused elementwise kernels against the reference interpreter, on
// the AVX2 and (when the CPU has it) AVX-512 paths: each op and function,
// special values, broadcasts, reductions. Whole programs:
// ew_codegen_programs_test.
#include "compiler/codegen/ew_codegen.h"
#include "framework/ew/ew_reference.h"
#include "tests/ew_codegen_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/error.h"

namespace kiln::jit {
namespace {

using namespace ew_test;  // the helpers shared by the split files (tests/ew_codegen_test_util.h)

// ---------------------------------------------------------------------------

struct ArithCase {
  const char* name;
  std::function<EwValue(EwProgram&, EwValue, EwValue, EwValue)> build;
  float lo, hi;
};

TEST(EwCodegenTest, EachArithmeticOpIsExactAgainstFloatReference) {
  const std::vector<ArithCase> cases = {
      {"add", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.Add(a, b); }, -3, 3},
      {"sub", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.Sub(a, b); }, -3, 3},
      {"mul", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.Mul(a, b); }, -3, 3},
      {"div", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.Div(a, b); }, -3, 3},
      {"max", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.Max(a, b); }, -3, 3},
      {"min", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.Min(a, b); }, -3, 3},
      {"neg", [](EwProgram& p, EwValue a, EwValue, EwValue) { return p.Neg(a); }, -3, 3},
      {"abs", [](EwProgram& p, EwValue a, EwValue, EwValue) { return p.Abs(a); }, -3, 3},
      {"sqrt", [](EwProgram& p, EwValue a, EwValue, EwValue) { return p.Sqrt(a); }, 0, 100},
      {"fma", [](EwProgram& p, EwValue a, EwValue b, EwValue c) { return p.Fma(a, b, c); }, -3, 3},
      {"fma_acc_first", [](EwProgram& p, EwValue a, EwValue b, EwValue c) { return p.Fma(c, c, p.Mul(a, b)); }, -3, 3},
      {"select_gt0", [](EwProgram& p, EwValue a, EwValue b, EwValue) { return p.SelectGtZero(a, b); }, -3, 3},
      {"relu", [](EwProgram& p, EwValue a, EwValue, EwValue) { return p.Relu(a); }, -3, 3},
      {"scale", [](EwProgram& p, EwValue a, EwValue, EwValue) { return p.Add(p.Mul(a, p.Const(1.5f)), p.Const(-0.25f)); },
       -3, 3},
  };
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      for (const ArithCase& c : cases) {
        EwProgram p;
        p.Store(0, c.build(p, p.Load(0), p.Load(1), p.Load(2)));
        const EwLayout l = Flat(n, 3, 1);
        const Buffers in = RandomInputs(l, c.lo, c.hi, static_cast<uint32_t>(n));
        ExpectExact(RunJit(p, l, isa, in), RunRefFloat(p, l, in),
                    std::string(c.name) + " n=" + std::to_string(n) + " " + IsaName(isa));
      }
    }
  }
}

struct FnCase {
  const char* name;
  std::function<EwValue(EwProgram&, EwValue)> build;
  float lo, hi;
};

const std::vector<FnCase>& FnCases() {
  static const std::vector<FnCase> cases = {
      {"exp", [](EwProgram& p, EwValue x) { return p.Exp(x); }, -30, 30},
      {"tanh", [](EwProgram& p, EwValue x) { return p.Tanh(x); }, -6, 6},
      {"sigmoid", [](EwProgram& p, EwValue x) { return p.Sigmoid(x); }, -20, 20},
      {"erf", [](EwProgram& p, EwValue x) { return p.Erf(x); }, -5, 5},
      {"erfc", [](EwProgram& p, EwValue x) { return p.Erfc(x); }, -5, 12},
  };
  return cases;
}

TEST(EwCodegenTest, EachFunctionMatchesDoubleReference) {
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      for (const FnCase& c : FnCases()) {
        EwProgram p;
        p.Store(0, c.build(p, p.Load(0)));
        const EwLayout l = Flat(n, 1, 1);
        const Buffers in = RandomInputs(l, c.lo, c.hi, static_cast<uint32_t>(n) + 7);
        ExpectNear(RunJit(p, l, isa, in), RunRef(p, l, in), FnTol,
                   std::string(c.name) + " n=" + std::to_string(n) + " " + IsaName(isa));
      }
    }
  }
}

// Dense sweeps: measured error of each function, printed, against the
// contract 2e-7 + 4 ulp. Both ISAs must produce the same bits.
TEST(EwCodegenTest, AccuracySweeps) {
  struct Range {
    float lo, hi;
  };
  const std::vector<std::pair<const char*, Range>> ranges = {
      {"exp", {-110, 90}}, {"tanh", {-110, 110}}, {"sigmoid", {-110, 110}}, {"erf", {-110, 110}}, {"erfc", {-110, 110}}};
  std::vector<float> base;
  // Dense grid over [-12, 12] (where all functions vary), coarser grid to
  // +-110, random magnitudes 1e-40 .. 1e2 of both signs, and edge values.
  for (int i = 0; i <= 2400000; ++i) base.push_back(-12.0f + 24.0f * static_cast<float>(i) / 2400000.0f);
  for (int i = 0; i <= 220000; ++i) base.push_back(-110.0f + 220.0f * static_cast<float>(i) / 220000.0f);
  std::mt19937 gen(1);
  std::uniform_real_distribution<double> expo(-40, 2);
  for (int i = 0; i < 200000; ++i) {
    const double m = std::pow(10.0, expo(gen));
    base.push_back(static_cast<float>(i % 2 ? m : -m));
  }
  const float edges[] = {0.0f,      -0.0f,     88.72283f, 88.7229f,  -87.3365f, -103.9f,  -104.5f,
                         89.5f,     0.625f,    -0.625f,   0.75f,     -0.75f,    10.5f,    -10.5f,
                         3.9f,      9.02f,     1e-45f,    -1e-45f,   1.17549435e-38f,     3.4e38f,
                         -3.4e38f};
  for (float e : edges) base.push_back(e);
  for (const auto& [name, range] : ranges) {
    const FnCase* fc = nullptr;
    for (const FnCase& c : FnCases()) {
      if (std::string(c.name) == name) fc = &c;
    }
    ASSERT_NE(fc, nullptr);
    Buffers in(1);
    for (float x : base) {
      if (x >= range.lo && x <= range.hi) in[0].push_back(x);
    }
    for (float e : edges) in[0].push_back(e);
    EwProgram p;
    p.Store(0, fc->build(p, p.Load(0)));
    const EwLayout l = Flat(static_cast<int64_t>(in[0].size()), 1, 1);
    const auto ref = RunRef(p, l, in);
    Buffers first;
    for (Isa isa : Isas()) {
      const Buffers got = RunJit(p, l, isa, in);
      double max_abs = 0, max_ulp = 0, max_ratio = 0, worst_x = 0;
      for (size_t i = 0; i < got[0].size(); ++i) {
        const double r = ref[0][i];
        if (!std::isfinite(r) || std::fabs(r) > std::numeric_limits<float>::max()) continue;
        const double err = std::fabs(got[0][i] - r);
        max_abs = std::max(max_abs, err);
        if (std::fabs(r) >= std::numeric_limits<float>::min()) max_ulp = std::max(max_ulp, err / Ulp(r));
        if (err / FnTol(r) > max_ratio) {
          max_ratio = err / FnTol(r);
          worst_x = in[0][i];
        }
      }
      std::printf("[ accuracy ] %-8s %-6s n=%zu max_abs=%.3g max_ulp(normal results)=%.3g max_err/tol=%.3f at x=%.9g\n",
                  name, IsaName(isa), got[0].size(), max_abs, max_ulp, max_ratio, worst_x);
      ExpectNear(got, ref, FnTol, std::string(name) + " sweep " + IsaName(isa));
      if (first.empty()) {
        first = got;
      } else {
        ExpectExact(got, first, std::string(name) + " avx2 vs avx512 bits");
      }
    }
  }
}

TEST(EwCodegenTest, SpecialValuesFollowTheReference) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Buffers in(1);
  in[0] = {nan, inf, -inf, 0.0f, -0.0f, 3.4028235e38f, -3.4028235e38f, 1.17549435e-38f, 1e-40f, -1e-40f,
           88.72283f, 88.7229f, 89.0f, 100.0f, -87.5f, -100.0f, -104.0f, -200.0f, 9.5f, -9.5f, 12.0f, -12.0f};
  const EwLayout l = Flat(static_cast<int64_t>(in[0].size()), 1, 1);
  std::vector<FnCase> cases = FnCases();
  cases.push_back({"relu", [](EwProgram& p, EwValue x) { return p.Relu(x); }, 0, 0});
  cases.push_back({"sqrt", [](EwProgram& p, EwValue x) { return p.Sqrt(x); }, 0, 0});
  cases.push_back({"recip", [](EwProgram& p, EwValue x) { return p.Div(p.Const(1.0f), x); }, 0, 0});
  for (Isa isa : Isas()) {
    for (const FnCase& c : cases) {
      EwProgram p;
      p.Store(0, c.build(p, p.Load(0)));
      ExpectNear(RunJit(p, l, isa, in), RunRef(p, l, in), FnTol, std::string(c.name) + " specials " + IsaName(isa));
    }
  }
}

// max and min propagate NaN from either operand (torch.maximum/minimum), with
// a constant on either side too (relu, clip), in the body and in the tail.
TEST(EwCodegenTest, MaxAndMinPropagateNaNFromEitherOperand) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<FnCase> unary = {
      {"relu", [](EwProgram& p, EwValue x) { return p.Relu(x); }, 0, 0},
      {"max_const_first", [](EwProgram& p, EwValue x) { return p.Max(p.Const(0.5f), x); }, 0, 0},
      {"min_const_second", [](EwProgram& p, EwValue x) { return p.Min(x, p.Const(0.5f)); }, 0, 0},
      {"clip", [](EwProgram& p, EwValue x) { return p.Min(p.Const(1.0f), p.Max(p.Const(-1.0f), x)); }, 0, 0},
  };
  for (Isa isa : Isas()) {
    for (int64_t n : {int64_t{7}, int64_t{37}}) {
      const EwLayout l = Flat(n, 2, 2);
      Buffers in = RandomInputs(l, -3, 3, static_cast<uint32_t>(n));
      // NaN in a only, in b only, in both; infinities; the last element is in the tail.
      in[0][0] = nan, in[1][1] = nan, in[0][2] = in[1][2] = nan, in[0][3] = inf, in[1][4] = -inf;
      in[0][static_cast<size_t>(n - 1)] = nan;
      EwProgram p;
      p.Store(0, p.Max(p.Load(0), p.Load(1)));
      p.Store(1, p.Min(p.Load(0), p.Load(1)));
      const Buffers got = RunJit(p, l, isa, in);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const float a = in[0][i], b = in[1][i];
        const bool any_nan = std::isnan(a) || std::isnan(b);
        EXPECT_TRUE(SameBits(got[0][i], any_nan ? nan : std::max(a, b))) << "max " << i << " " << IsaName(isa);
        EXPECT_TRUE(SameBits(got[1][i], any_nan ? nan : std::min(a, b))) << "min " << i << " " << IsaName(isa);
      }
      ExpectExact(got, RunRefFloat(p, l, in), "max/min vs reference " + std::string(IsaName(isa)));
      for (const FnCase& c : unary) {
        EwProgram q;
        q.Store(0, c.build(q, q.Load(0)));
        const EwLayout lu = Flat(n, 1, 1);
        const Buffers one = {in[0]};
        const Buffers out = RunJit(q, lu, isa, one);
        for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
          EXPECT_EQ(std::isnan(out[0][i]), std::isnan(in[0][i])) << c.name << " " << i << " " << IsaName(isa);
        }
        ExpectExact(out, RunRefFloat(q, lu, one), std::string(c.name) + " vs reference " + IsaName(isa));
      }
    }
  }
}

// Out = X*Y + X - Y with Y broadcast in the OPS.md ways.
TEST(EwCodegenTest, BroadcastInputsAreExact) {
  struct Shape {
    Dims x, y;
  };
  const std::vector<Shape> shapes = {
      {{7, 33}, {1, 33}},          // [R,C] + [C]
      {{5, 16}, {1, 16}},          // exact vector rows
      {{3, 1000}, {1, 1000}},      // long rows with a tail
      {{2, 5, 17}, {1, 5, 1}},     // [N,C,HW] + [C], axis 1
      {{4, 3, 64}, {1, 3, 1}},     // ... HW a vector multiple
      {{3, 4, 5, 6}, {1, 4, 1, 6}},  // rank-4 broadcast pattern
      {{4099}, {1}},               // scalar [1]
      {{9, 23}, {9, 1}},           // [R,1]: inner broadcast
  };
  for (Isa isa : Isas()) {
    for (const Shape& s : shapes) {
      for (int swap = 0; swap < 2; ++swap) {
        EwProgram p;
        const EwValue x = p.Load(0);
        const EwValue y = p.Load(1);
        p.Store(0, p.Sub(p.Add(p.Mul(x, y), x), y));
        const Dims& a = swap ? s.y : s.x;
        const Dims& b = swap ? s.x : s.y;
        const EwLayout l = CollapseLayout(s.x, {a, b}, {s.x});
        const Buffers in = RandomInputs(l, -2, 2, 3);
        ExpectExact(RunJit(p, l, isa, in), RunRefFloat(p, l, in),
                    "broadcast " + DimsToString(a) + "," + DimsToString(b) + " " + IsaName(isa) + " " + l.ToString());
      }
    }
  }
}

// Gradients of broadcast inputs: outputs summed over broadcast dims, together
// with an elementwise output in the same kernel.
TEST(EwCodegenTest, ReductionOutputs) {
  struct Shape {
    Dims x, y;
  };
  const std::vector<Shape> shapes = {
      {{7, 33}, {1, 33}},        // column sums
      {{300, 17}, {1, 17}},      //
      {{2, 5, 17}, {1, 5, 1}},   // channel sums: inner and outer reduction
      {{3, 4, 64}, {1, 4, 1}},   //
      {{6, 35}, {6, 1}},         // row sums (inner only)
      {{37, 41}, {1, 1}},        // full sum to [1]
      {{4099}, {1}},             // full sum, rank 1
      {{1}, {1}},                // one element
  };
  for (Isa isa : Isas()) {
    for (const Shape& s : shapes) {
      EwProgram p;
      const EwValue dout = p.Load(0);
      const EwValue x = p.Load(1);
      p.Store(0, p.Mul(dout, x));  // X@GRAD-like, elementwise
      p.Store(1, dout);            // Y@GRAD of add: sum of dout
      p.Store(2, p.Mul(dout, x));  // Y@GRAD of mul: sum of dout * x
      const EwLayout l = CollapseLayout(s.x, {s.x, s.x}, {s.x, s.y, s.y});
      const Buffers in = RandomInputs(l, 0.5f, 1.5f, 11);
      const auto ref = RunRef(p, l, in);
      const Buffers got = RunJit(p, l, isa, in);
      const std::string what = "reduce " + DimsToString(s.x) + "->" + DimsToString(s.y) + " " + IsaName(isa);
      ExpectExact({got[0]}, {RunRefFloat(p, l, in)[0]}, what);
      ExpectNear({got[1], got[2]}, {ref[1], ref[2]}, [](double r) { return 1e-6 + 1e-5 * std::fabs(r); }, what);
    }
  }
}

}  // namespace
}  // namespace kiln::jit
