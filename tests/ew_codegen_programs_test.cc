// Generated fused elementwise kernels of whole programs against the reference
// interpreter, on the AVX2 and (when the CPU has it) AVX-512 paths: long
// fused chains, spills, threading and partial ranges, errors, dumps and
// throughput. Single ops: ew_codegen_test.
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
// Long fused chains.

TEST(EwCodegenTest, TwentyOpChain) {
  EwProgram p;
  const EwValue x = p.Load(0);
  const EwValue y = p.Load(1);
  const EwValue b = p.Load(2);  // [C] bias
  EwValue v = p.Add(x, b);
  v = p.Mul(v, p.Const(0.5f));
  v = p.Tanh(v);
  v = p.Fma(v, y, x);
  v = p.Sub(v, p.Const(0.125f));
  v = p.Relu(v);
  v = p.Add(v, p.Sigmoid(y));
  v = p.Div(v, p.Add(p.Abs(y), p.Const(1.0f)));
  v = p.Mul(v, p.Exp(p.Neg(p.Abs(x))));
  v = p.Min(v, p.Const(3.0f));
  v = p.Sqrt(p.Add(v, p.Const(1.0f)));
  v = p.Mul(v, p.Erf(y));
  p.Store(0, v);
  p.Store(1, p.Mul(v, v));  // and its square summed per column
  const Dims xd = {37, 129};
  const EwLayout l = CollapseLayout(xd, {xd, xd, {1, 129}}, {xd, {1, 129}});
  EXPECT_GE(p.size(), 20u);
  const Buffers in = RandomInputs(l, -3, 3, 5);
  const auto ref = RunRef(p, l, in);
  for (Isa isa : Isas()) {
    ExpectNear(RunJit(p, l, isa, in), ref, [](double r) { return 2e-6 + 2e-6 * std::fabs(r); },
               std::string("chain ") + IsaName(isa));
  }
}

TEST(EwCodegenTest, GeluForwardAndGradFromPrimitives) {
  for (int approximate = 0; approximate < 2; ++approximate) {
    EwProgram p;
    const EwValue x = p.Load(0);
    const EwValue dout = p.Load(1);
    p.Store(0, approximate ? p.GeluTanh(x) : p.Gelu(x));
    p.Store(1, approximate ? p.GeluTanhGrad(x, dout) : p.GeluGrad(x, dout));
    const int64_t n = 20011;
    const EwLayout l = Flat(n, 2, 2);
    Buffers in = RandomInputs(l, -12, 12, 9);
    in[1] = Random(n, -1, 1, 10);
    const auto ref = RunRef(p, l, in);
    // Check the reference itself against the textbook formulas in double.
    for (int64_t i = 0; i < n; i += 97) {
      const double xv = in[0][i];
      double fwd, grad;
      if (approximate) {
        const double k = 0.79788456080286535588;
        const double t = std::tanh(k * (xv + 0.044715 * xv * xv * xv));
        fwd = 0.5 * xv * (1 + t);
        grad = 0.5 * (1 + t) + 0.5 * xv * (1 - t * t) * k * (1 + 3 * 0.044715 * xv * xv);
      } else {
        const double cdf = 0.5 * (1 + std::erf(xv * 0.70710678118654752440));
        fwd = xv * cdf;
        grad = cdf + xv * 0.39894228040143267794 * std::exp(-0.5 * xv * xv);
      }
      grad *= in[1][i];
      // The program's constants are rounded to float (relative 3e-8), which
      // moves the tails by about x^2 times that.
      const double rel = 1e-7 * (1 + xv * xv);
      ASSERT_NEAR(ref[0][i], fwd, 1e-12 + rel * std::fabs(fwd)) << "x=" << xv;
      ASSERT_NEAR(ref[1][i], grad, 1e-12 + rel * std::fabs(grad) + 1e-15) << "x=" << xv;
    }
    for (Isa isa : Isas()) {
      const Buffers got = RunJit(p, l, isa, in);
      for (int o = 0; o < 2; ++o) {
        double max_abs = 0, max_rel = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double err = std::fabs(got[o][i] - ref[o][i]);
          max_abs = std::max(max_abs, err);
          if (std::fabs(ref[o][i]) > 1e-3) max_rel = std::max(max_rel, err / std::fabs(ref[o][i]));
        }
        std::printf("[ accuracy ] %s%s %-6s x in [-12,12]: max_abs=%.3g max_rel(|ref|>1e-3)=%.3g\n",
                    approximate ? "gelu_tanh" : "gelu", o ? "_grad" : "", IsaName(isa), max_abs, max_rel);
      }
      ExpectNear(got, ref, [](double r) { return 3e-7 + 1e-6 * std::fabs(r); },
                 std::string(approximate ? "gelu_tanh " : "gelu ") + IsaName(isa));
    }
  }
}

// adam per OPS.md, in place: Param/Moment1/Moment2 are both inputs and outputs.
TEST(EwCodegenTest, AdamUpdateInPlaceIsExact) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  EwProgram p;
  const EwValue param = p.Load(0);
  const EwValue grad = p.Load(1);
  const EwValue m = p.Load(2);
  const EwValue v = p.Load(3);
  const EwValue lr = p.Load(4);
  const EwValue b1pow = p.Load(5);
  const EwValue b2pow = p.Load(6);
  const EwValue one = p.Const(1.0f);
  const EwValue m_new = p.Fma(p.Const(b1), m, p.Mul(p.Const(1 - b1), grad));
  const EwValue v_new = p.Fma(p.Const(b2), v, p.Mul(p.Const(1 - b2), p.Mul(grad, grad)));
  const EwValue sqrt_b2 = p.Sqrt(p.Sub(one, b2pow));
  const EwValue lr_t = p.Div(p.Mul(lr, sqrt_b2), p.Sub(one, b1pow));
  const EwValue denom = p.Add(p.Sqrt(v_new), p.Mul(p.Const(eps), sqrt_b2));
  p.Store(0, p.Sub(param, p.Div(p.Mul(lr_t, m_new), denom)));
  p.Store(1, m_new);
  p.Store(2, v_new);
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      const Dims d = {n};
      const EwLayout l = CollapseLayout(d, {d, d, d, d, {1}, {1}, {1}}, {d, d, d});
      Buffers in = {Random(n, -1, 1, 1), Random(n, -1, 1, 2), Random(n, -0.1f, 0.1f, 3), Random(n, 0, 0.01f, 4),
                    {0.001f}, {0.9f * 0.9f}, {0.999f * 0.999f}};
      const Buffers want = RunRefFloat(p, l, in);
      FusedElementwiseKernel k("adam", p, l, isa);
      k.set_fused_ops({"adam"});
      k.Create();
      // ParamOut is Param, Moment1Out is Moment1, Moment2Out is Moment2.
      k.Run(Ptrs(in), {in[0].data(), in[2].data(), in[3].data()}, 1);
      ExpectExact({in[0], in[2], in[3]}, want, "adam n=" + std::to_string(n) + " " + IsaName(isa));
    }
  }
}

// More live values than registers: values go to stack slots, pointers of the
// 20 inputs and 3 outputs to the frame.
TEST(EwCodegenTest, SpillsAndManyOperandsStayExact) {
  const int kInputs = 20;
  EwProgram p;
  std::vector<EwValue> vals;
  for (int i = 0; i < kInputs; ++i) vals.push_back(p.Mul(p.Load(i), p.Const(1.0f + 0.125f * i)));
  for (int i = 0; i < kInputs; ++i) vals.push_back(p.Add(vals[i], vals[kInputs - 1 - i]));
  EwValue acc = vals.back();
  for (int i = static_cast<int>(vals.size()) - 2; i >= 0; --i) acc = p.Fma(acc, p.Const(0.5f), vals[i]);
  p.Store(0, acc);
  p.Store(1, vals[3]);
  p.Store(2, p.Tanh(vals[kInputs]));
  for (Isa isa : Isas()) {
    for (int64_t n : {int64_t{17}, int64_t{1000}}) {
      const Dims d = {3, n};
      std::vector<Dims> ins(kInputs, d);
      ins[5] = {1, n};
      ins[6] = {3, 1};
      const EwLayout l = CollapseLayout(d, ins, {d, d, d});
      const Buffers in = RandomInputs(l, -1, 1, 21);
      FusedElementwiseKernel k("spill", p, l, isa);
      k.Create();
      if (isa == Isa::kAvx2) {
        EXPECT_GT(k.num_spills(), 0);
      }
      std::printf("[ spills ] %s: %d values spilled, %d pool registers\n", IsaName(isa), k.num_spills(),
                  k.num_vector_regs());
      const Buffers got = RunJit(p, l, isa, in);
      const Buffers want = RunRefFloat(p, l, in);
      ExpectExact({got[0], got[1]}, {want[0], want[1]}, std::string("spill ") + IsaName(isa));
      ExpectNear({got[2]}, {RunRef(p, l, in)[2]}, FnTol, std::string("spill tanh ") + IsaName(isa));
    }
  }
}

// Out0 = tanh(0.75 x + y) elementwise; Out1 = Out0 * x, stored to an
// operand that may be a reduction: the threading tests' program.
EwProgram TanhAndProductProgram() {
  EwProgram p;
  const EwValue x = p.Load(0);
  const EwValue y = p.Load(1);
  const EwValue t = p.Tanh(p.Fma(x, p.Const(0.75f), y));
  p.Store(0, t);
  p.Store(1, p.Mul(t, x));
  return p;
}

TEST(EwCodegenTest, MultiThreadedRunEqualsSingleThreaded) {
  struct Shape {
    Dims x, y;
  };
  const std::vector<Shape> shapes = {
      {{1 << 20}, {1}},              // rank 1, full sum
      {{1000003}, {1000003}},        // rank 1, odd length, no reduction
      {{2048, 1000}, {1, 1000}},     // column sums
      {{64, 32, 1000}, {1, 32, 1}},  // channel sums
      {{4000, 300}, {4000, 1}},      // row sums
  };
  for (Isa isa : Isas()) {
    for (const Shape& s : shapes) {
      const EwProgram p = TanhAndProductProgram();
      const EwLayout l = CollapseLayout(s.x, {s.x, s.y}, {s.x, s.y});
      const Buffers in = RandomInputs(l, 0.1f, 1.0f, 17);
      const Buffers one = RunJit(p, l, isa, in, 1);
      const Buffers two = RunJit(p, l, isa, in, 2);
      const std::string what = "mt " + DimsToString(s.x) + " " + IsaName(isa);
      ExpectExact({two[0]}, {one[0]}, what);
      std::vector<std::vector<double>> one_d(1, std::vector<double>(one[1].begin(), one[1].end()));
      if (l.IsReduction(1)) {
        ExpectNear({two[1]}, one_d, [](double r) { return 1e-5 * std::fabs(r) + 1e-6; }, what);
        const auto ref = RunRef(p, l, in);
        ExpectNear({one[1]}, {ref[1]}, [](double r) { return 1e-5 * std::fabs(r) + 1e-6; }, what + " vs ref");
      } else {
        ExpectExact({two[1]}, {one[1]}, what);
      }
    }
  }
}

// --deterministic: sums over dim 0 are cut into chunks fixed by the shape, so
// every thread count gives the same bits (not only the same value to rounding).
TEST(EwCodegenTest, DeterministicKernelsSumTheSameBitsOnEveryThreadCount) {
  struct Shape {
    Dims x, y;
  };
  const std::vector<Shape> shapes = {
      {{1 << 20}, {1}},              // rank 1, full sum
      {{2048, 1000}, {1, 1000}},     // column sums (bias gradients)
      {{64, 32, 1000}, {1, 32, 1}},  // channel sums
      {{3, 40000}, {1, 40000}},      // fewer rows than chunks
      {{1000, 10}, {1, 10}},         // below kParallelMinElements: one chunk
  };
  for (Isa isa : Isas()) {
    for (const Shape& s : shapes) {
      const EwProgram p = TanhAndProductProgram();
      const EwLayout l = CollapseLayout(s.x, {s.x, s.y}, {s.x, s.y});
      const Buffers in = RandomInputs(l, -1.0f, 1.0f, 23);
      const Buffers one = RunJit(p, l, isa, in, 1, /*deterministic=*/true);
      const std::string what = "deterministic " + DimsToString(s.x) + " " + IsaName(isa);
      for (int threads : {2, 3, 8}) {
        const Buffers got = RunJit(p, l, isa, in, threads, /*deterministic=*/true);
        ExpectExact(got, one, what + " threads " + std::to_string(threads));
      }
      const auto ref = RunRef(p, l, in);
      ExpectNear({one[1]}, {ref[1]}, [](double r) { return 1e-4 * std::fabs(r) + 1e-4; }, what + " vs ref");
    }
  }
}

TEST(EwCodegenTest, PartialRangeCallsTouchOnlyTheirRows) {
  for (Isa isa : Isas()) {
    EwProgram p;
    p.Store(0, p.Add(p.Load(0), p.Const(1.0f)));
    const Dims d = {6, 5, 19};
    const EwLayout l = CollapseLayout(d, {d}, {d});
    FusedElementwiseKernel k("range", p, l, isa);
    k.Create();
    ASSERT_EQ(l.rank, 1);  // all dims merge: the range is in elements
    const Buffers in = RandomInputs(l, -1, 1, 2);
    std::vector<float> out(static_cast<size_t>(l.numel()), -7.0f);
    const void* ip[] = {in[0].data()};
    void* op[] = {out.data()};
    k.Call({ip, op, 33, 301});
    for (int64_t i = 0; i < l.numel(); ++i) {
      const float want = (i >= 33 && i < 301) ? in[0][i] + 1.0f : -7.0f;
      ASSERT_EQ(out[i], want) << i << " " << IsaName(isa);
    }
    // A rank-3 layout (channel broadcast): range over dim 0.
    const EwLayout l3 = CollapseLayout(d, {d, {1, 5, 1}}, {d});
    EwProgram q;
    q.Store(0, q.Mul(q.Load(0), q.Load(1)));
    FusedElementwiseKernel k3("range3", q, l3, isa);
    k3.Create();
    const Buffers in3 = RandomInputs(l3, -1, 1, 4);
    std::fill(out.begin(), out.end(), -7.0f);
    const void* ip3[] = {in3[0].data(), in3[1].data()};
    k3.Call({ip3, op, 2, 4});
    for (int64_t i = 0; i < l3.numel(); ++i) {
      const int64_t n = i / 95, c = i / 19 % 5;
      const float want = (n >= 2 && n < 4) ? in3[0][i] * in3[1][c] : -7.0f;
      ASSERT_EQ(out[i], want) << i << " " << IsaName(isa);
    }
  }
}

TEST(EwCodegenTest, ErrorsNameTheKernelAndProblem) {
  EwProgram p;
  const EwValue x = p.Load(0);
  p.Store(0, x);
  p.Store(0, x);
  FusedElementwiseKernel k("bad", p, Flat(8, 1, 1), HostIsa());
  try {
    k.Create();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("out0 is stored 2 times"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(k.created());
  EwProgram q;
  q.Store(0, q.Load(3));
  FusedElementwiseKernel k2("bad2", q, Flat(8, 1, 1), HostIsa());
  EXPECT_THROW(k2.Create(), Error);
  // Too many inner-reduction outputs for AVX2's 16 registers.
  EwProgram r;
  const EwValue y = r.Load(0);
  for (int o = 0; o < 8; ++o) r.Store(o, r.Mul(y, r.Const(static_cast<float>(o))));
  FusedElementwiseKernel k3("bad3", r, CollapseLayout({4, 40}, {{4, 40}}, std::vector<Dims>(8, Dims{4, 1})),
                            Isa::kAvx2);
  try {
    k3.Create();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("accumulator registers"), std::string::npos) << e.what();
  }
}

TEST(EwCodegenTest, DumpShowsNameOpsAndCode) {
  EwProgram p;
  p.Store(0, p.Relu(p.Add(p.Load(0), p.Load(1))));
  const Dims d = {4, 16};
  FusedElementwiseKernel k("fused_ew_7", p, CollapseLayout(d, {d, {1, 16}}, {d}), HostIsa());
  k.set_fused_ops({"elementwise_add", "relu"});
  k.Create();
  ASSERT_TRUE(k.created());
  EXPECT_GT(k.code_size(), 16u);
  ASSERT_NE(k.code(), nullptr);
  const std::string s = k.ToString();
  EXPECT_NE(s.find("kernel fused_ew_7 isa="), std::string::npos) << s;
  EXPECT_NE(s.find("ops=[elementwise_add,relu]"), std::string::npos) << s;
  EXPECT_NE(s.find("dims=[4,16] in0=[16,1] in1=[0,1] out0=[16,1]"), std::string::npos) << s;
  EXPECT_NE(s.find("%4 = max %2, %3"), std::string::npos) << s;
}

// Not a benchmark (STYLE 14): prints a rough single-thread figure.
TEST(EwCodegenTest, ReportsThroughput) {
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24})
  for (Isa isa : Isas()) {
    for (int chain = 0; chain < 2; ++chain) {
      EwProgram p;
      const EwValue x = p.Load(0);
      const EwValue y = p.Load(1);
      if (chain) {
        p.Store(0, p.Relu(p.Sub(p.Mul(p.Fma(x, p.Const(0.5f), y), x), p.Const(0.25f))));
      } else {
        p.Store(0, p.Add(x, y));
      }
      const EwLayout l = Flat(n, 2, 1);
      FusedElementwiseKernel k("bench", p, l, isa);
      k.Create();
      const Buffers in = RandomInputs(l, -1, 1, 1);
      std::vector<float> out(static_cast<size_t>(n));
      const void* ip[] = {in[0].data(), in[1].data()};
      void* op[] = {out.data()};
      double best = 1e9;
      for (int rep = 0; rep < (n > (1 << 20) ? 4 : 20); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        k.Run(ip, op, 1);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("[ throughput ] %-6s %s, %5lldK floats, 1 thread: %7.3f ms, %5.1f GB/s (2 reads + 1 write)\n",
                  IsaName(isa), chain ? "5-op chain" : "add       ", static_cast<long long>(n >> 10), best * 1e3,
                  12.0 * static_cast<double>(n) / 1e9 / best);
    }
  }
}

}  // namespace
}  // namespace kiln::jit
