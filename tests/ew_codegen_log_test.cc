// The generated natural logarithm (kLog), the log1p composite built on it
// (EwProgram::Log1p) and the select instruction (kSelect), on the AVX2 and
// (when the CPU has it) AVX-512 paths: against double precision on a dense
// sweep, at every size around the vector widths, at special values, and
// bit for bit against the float reference where the result is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "framework/ew/ew_reference.h"
#include "tests/ew_codegen_test_util.h"

namespace kiln::jit {
namespace {

using namespace ew_test;  // the helpers shared by the split files (tests/ew_codegen_test_util.h)

// Bounds the sweeps must stay within: the measured figures of the header
// comment of compiler/codegen/ew_codegen_math.cc, rounded up a little.
constexpr double kLogMaxUlp = 1.0;
constexpr double kLog1pMaxUlp = 2.0;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

EwProgram LogProgram() {
  EwProgram p;
  p.Store(0, p.Log(p.Load(0)));
  return p;
}

EwProgram Log1pProgram() {
  EwProgram p;
  p.Store(0, p.Log1p(p.Load(0)));
  return p;
}

// Positive floats for the sweep: a dense grid around 1 (where log is small
// and its relative error shows), every float within 2000 ulp of 1, random bit
// patterns over every binade (subnormals too), powers of two and the
// boundaries of the reduction interval [sqrt(1/2), sqrt(2)).
std::vector<float> LogSweepInputs() {
  std::vector<float> v;
  for (int i = 0; i <= 2000000; ++i) v.push_back(0.5f + 1.5f * static_cast<float>(i) / 2000000.0f);
  for (int i = 0; i <= 200000; ++i) v.push_back(1e-3f + 1000.0f * static_cast<float>(i) / 200000.0f);
  float up = 1.0f, down = 1.0f;
  for (int i = 0; i < 2000; ++i) {
    up = std::nextafter(up, 2.0f);
    down = std::nextafter(down, 0.0f);
    v.push_back(up);
    v.push_back(down);
  }
  std::mt19937 gen(3);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7f7fffffu);
  for (int i = 0; i < 600000; ++i) v.push_back(FromBits(bits(gen)));
  for (int e = -149; e <= 127; ++e) v.push_back(std::ldexp(1.0f, e));
  for (uint32_t b : {0x3f3504f2u, 0x3f3504f3u, 0x3f3504f4u, 0x3fb504f2u, 0x3fb504f3u, 0x3fb504f4u, 0x00800000u,
                     0x007fffffu, 0x00000001u, 0x7f7fffffu}) {
    v.push_back(FromBits(b));
  }
  return v;
}

// Max error in ulp of the result (normal results), max abs error, and the
// worst ratio to the contract; EXPECTs the contract and `max_ulp`.
void CheckSweep(const char* name, const Buffers& got, const std::vector<double>& ref, const std::vector<float>& in,
                double max_ulp_allowed, const std::string& isa) {
  double max_abs = 0, max_ulp = 0, worst_x = 0;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i];
    const double g = got[0][i];
    const double err = std::fabs(g - r);
    const double ulps = err / Ulp(r);
    max_abs = std::max(max_abs, err);
    if (ulps > max_ulp) {
      max_ulp = ulps;
      worst_x = in[i];
    }
    if (!(ulps <= max_ulp_allowed) && ++bad <= 3) {
      ADD_FAILURE() << name << " " << isa << " x=" << in[i] << ": got " << g << " ref " << r << " (" << ulps
                    << " ulp)";
    }
  }
  std::printf("[ accuracy ] %-6s %-6s n=%zu max_abs=%.3g max_ulp=%.3g at x=%.9g\n", name, isa.c_str(), ref.size(),
              max_abs, max_ulp, worst_x);
  EXPECT_EQ(bad, 0) << name << " " << isa;
}

TEST(EwCodegenLogTest, LogSweepAgainstDouble) {
  Buffers in = {LogSweepInputs()};
  const EwProgram p = LogProgram();
  const EwLayout l = Flat(static_cast<int64_t>(in[0].size()), 1, 1);
  std::vector<double> ref(in[0].size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::log(static_cast<double>(in[0][i]));
  Buffers first;
  for (Isa isa : Isas()) {
    const Buffers got = RunJit(p, l, isa, in);
    CheckSweep("log", got, ref, in[0], kLogMaxUlp, IsaName(isa));
    ExpectNear(got, {ref}, FnTol, std::string("log sweep ") + IsaName(isa));
    if (first.empty()) {
      first = got;
    } else {
      ExpectExact(got, first, "log avx2 vs avx512 bits");
    }
  }
}

TEST(EwCodegenLogTest, LogAtEverySize) {
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      const EwLayout l = Flat(n, 1, 1);
      Buffers in(1);
      std::mt19937 gen(static_cast<uint32_t>(n));
      std::uniform_real_distribution<float> dist(1e-3f, 100.0f);
      for (int64_t i = 0; i < n; ++i) in[0].push_back(dist(gen));
      ExpectNear(RunJit(LogProgram(), l, isa, in), RunRef(LogProgram(), l, in), FnTol,
                 "log n=" + std::to_string(n) + " " + IsaName(isa));
    }
  }
}

TEST(EwCodegenLogTest, LogSpecialValues) {
  const float min_normal = std::numeric_limits<float>::min();
  const float denorm = std::numeric_limits<float>::denorm_min();
  // 19 values: the last three land in the masked tail on AVX-512 and AVX2.
  Buffers in = {{kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f, 1.0f, -1.0f, -denorm, denorm, min_normal,
                 std::numeric_limits<float>::max(), 2.0f, 0.5f, -3.0f, 1e-40f, 0.0f, kInf, 1.0f}};
  const EwLayout l = Flat(static_cast<int64_t>(in[0].size()), 1, 1);
  for (Isa isa : Isas()) {
    const Buffers got = RunJit(LogProgram(), l, isa, in);
    for (size_t i = 0; i < in[0].size(); ++i) {
      const float x = in[0][i];
      const float want = static_cast<float>(std::log(static_cast<double>(x)));
      SCOPED_TRACE(std::string(IsaName(isa)) + " x=" + std::to_string(x));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[0][i])) << got[0][i];
      } else if (x == 1.0f) {
        EXPECT_TRUE(SameBits(got[0][i], 0.0f)) << got[0][i];  // exactly +0
      } else if (std::isinf(want)) {
        EXPECT_EQ(got[0][i], want);
      } else {
        EXPECT_NEAR(got[0][i], want, kLogMaxUlp * Ulp(want)) << i;
      }
    }
  }
}

// log1p(u) against std::log1p in double, relative (no absolute slack: the
// composite exists for tiny u), over tiny magnitudes of both signs, a dense
// grid of (-1, 1], and large u.
TEST(EwCodegenLogTest, Log1pSweepAgainstDouble) {
  Buffers in(1);
  for (int i = 1; i <= 1000000; ++i) in[0].push_back(-1.0f + 2.0f * static_cast<float>(i) / 1000000.0f);
  std::mt19937 gen(4);
  std::uniform_real_distribution<double> expo(-44, 0);
  for (int i = 0; i < 400000; ++i) {
    const float m = static_cast<float>(std::pow(10.0, expo(gen)));
    in[0].push_back(i % 2 ? m : -m);
  }
  std::uniform_real_distribution<double> big(0, 38);
  for (int i = 0; i < 100000; ++i) in[0].push_back(static_cast<float>(std::pow(10.0, big(gen))));
  for (float u : {-0.5f, 0.5f, 1.0f, std::numeric_limits<float>::max(), 1e-45f, -1e-45f}) in[0].push_back(u);
  const EwLayout l = Flat(static_cast<int64_t>(in[0].size()), 1, 1);
  std::vector<double> ref(in[0].size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::log1p(static_cast<double>(in[0][i]));
  for (Isa isa : Isas()) {
    CheckSweep("log1p", RunJit(Log1pProgram(), l, isa, in), ref, in[0], kLog1pMaxUlp, IsaName(isa));
  }
}

TEST(EwCodegenLogTest, Log1pEdgesAndTails) {
  Buffers in = {{-1.0f, kInf, kNaN, -2.0f, -kInf, 0.0f, -0.0f, 1e-30f, -1e-30f, 3.0f, -0.75f, 1e30f, 7e-8f,
                 -7e-8f, 0.25f, 2e-45f, 1e-20f}};
  const EwLayout l = Flat(static_cast<int64_t>(in[0].size()), 1, 1);
  for (Isa isa : Isas()) {
    const Buffers got = RunJit(Log1pProgram(), l, isa, in);
    for (size_t i = 0; i < in[0].size(); ++i) {
      const double want = std::log1p(static_cast<double>(in[0][i]));
      SCOPED_TRACE(std::string(IsaName(isa)) + " u=" + std::to_string(in[0][i]));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[0][i])) << got[0][i];
      } else if (std::isinf(want)) {
        EXPECT_EQ(got[0][i], static_cast<float>(want));
      } else {
        EXPECT_NEAR(got[0][i], want, kLog1pMaxUlp * Ulp(want)) << i;
      }
    }
  }
}

// select(c, a, b) = c != 0 ? a : b: NaN picks a, -0 picks b; with the
// destination register shared with each operand in turn (the allocator
// reuses a dying operand's register).
TEST(EwCodegenLogTest, SelectIsExactAndNaNCountsAsNonZero) {
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      const EwLayout l = Flat(n, 3, 4);
      Buffers in = ew_test::RandomInputs(l, -2, 2, static_cast<uint32_t>(n) + 5);
      for (int64_t i = 0; i < n; i += 3) in[0][static_cast<size_t>(i)] = 0.0f;
      const float specials[] = {kNaN, -0.0f, kInf, -kInf, 1e-45f};
      for (int64_t i = 1, k = 0; i < n; i += 4, ++k) in[0][static_cast<size_t>(i)] = specials[k % 5];
      EwProgram p;
      const EwValue c = p.Load(0), a = p.Load(1), b = p.Load(2);
      p.Store(0, p.Select(c, a, b));
      p.Store(1, p.Select(c, c, p.Mul(b, b)));
      p.Store(2, p.Select(p.Sub(a, a), a, c));  // a - a is 0 (NaN never: a is finite)
      p.Store(3, p.Select(c, p.Add(a, b), c));
      const Buffers got = RunJit(p, l, isa, in);
      ExpectExact(got, RunRefFloat(p, l, in), "select n=" + std::to_string(n) + " " + IsaName(isa));
      for (int64_t i = 0; i < n; ++i) {
        const float cv = in[0][static_cast<size_t>(i)];
        const float want = (cv != 0.0f) ? in[1][static_cast<size_t>(i)] : in[2][static_cast<size_t>(i)];
        ASSERT_TRUE(SameBits(got[0][static_cast<size_t>(i)], want)) << "c=" << cv << " " << IsaName(isa);
      }
    }
  }
}

// log and select inside a longer kernel, in a rank-3 layout with a
// broadcast input and a row sum: the registers log uses as scratch do not
// disturb the values and accumulators around it.
TEST(EwCodegenLogTest, LogInsideABroadcastKernelWithAReduction) {
  const Dims xd = {3, 5, 37};
  const EwLayout l = CollapseLayout(xd, {xd, {1, 5, 1}}, {xd, {3, 5, 1}});
  EwProgram p;
  const EwValue x = p.Load(0);
  const EwValue y = p.Load(1);
  const EwValue v = p.Add(p.Log(p.Mul(x, x)), p.Log1p(p.Abs(y)));
  p.Store(0, p.Select(p.Sub(x, y), v, p.Const(0.0f)));
  p.Store(1, p.Mul(v, y));
  Buffers in = ew_test::RandomInputs(l, -3, 3, 9);
  const auto ref = RunRef(p, l, in);
  for (Isa isa : Isas()) {
    ExpectNear(RunJit(p, l, isa, in), ref, [](double r) { return 2e-6 + 2e-6 * std::fabs(r); },
               std::string("log kernel ") + IsaName(isa) + " " + l.ToString());
  }
}

}  // namespace
}  // namespace kiln::jit
