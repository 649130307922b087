// The fused attention kernels under bf16 compute (compiler/kernels/attention/attention_kernels.h;
// docs/jit.md "Mixed precision"), every path this CPU has: AMX tiles
// (tdpbf16ps), AVX512_BF16 micro-kernels (vdpbf16ps) and the f32 tile loops
// on rounded operands (AVX-512 and AVX2).
//
// On inputs that are already bf16 values, bf16 compute differs from exact
// attention only by rounding the probabilities (before P·V and Pᵀ·dOut) and
// dS (before dS·K and dSᵀ·Q), each by at most 2^-8 relative, so every
// output element is within 2^-8·T of a double-precision reference, T the sum
// of the absolute terms of its product (Out: Σ_c P_rc |V_cj|), plus f32
// accumulation. Shapes at odd sizes and tails, causal and not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/kernels/attention/attention_kernels.h"
#include "tests/attention_case.h"

namespace kiln::jit {
namespace {

using Case = test::AttentionCase;

float RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// n uniform values in [lo, hi), rounded to bf16 unless `exact` is false.
std::vector<float> Random(int64_t n, std::mt19937& rng, float lo, float hi, bool round = true) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = round ? RoundToBf16(dist(rng)) : dist(rng);
  return v;
}

struct Inputs {
  std::vector<float> q, k, v, dout;
};

Inputs MakeInputs(const Case& c, std::mt19937& rng, bool round = true) {
  return {Random(c.Heads() * c.sq * c.d, rng, -2, 2, round), Random(c.Heads() * c.sk * c.d, rng, -2, 2, round),
          Random(c.Heads() * c.sk * c.dv, rng, -1, 1, round), Random(c.Heads() * c.sq * c.dv, rng, -1, 1, round)};
}

// Exact attention in double, and for each output element the sum T of the
// absolute terms its bf16-rounded product adds up.
struct Exact {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<double> t_out, t_dq, t_dk, t_dv;
};

Exact Attention(const Case& c, const Inputs& in, float scale) {
  Exact e;
  const int64_t H = c.Heads(), SQ = c.sq, SK = c.sk, D = c.d, DV = c.dv;
  e.out.assign(H * SQ * DV, 0), e.t_out = e.out, e.lse.assign(H * SQ, 0);
  e.dq.assign(H * SQ * D, 0), e.t_dq = e.dq, e.dk.assign(H * SK * D, 0), e.t_dk = e.dk;
  e.dv.assign(H * SK * DV, 0), e.t_dv = e.dv;
  for (int64_t h = 0; h < H; ++h) {
    auto Q = [&](int64_t r, int64_t i) { return static_cast<double>(in.q[(h * SQ + r) * D + i]); };
    auto K = [&](int64_t j, int64_t i) { return static_cast<double>(in.k[(h * SK + j) * D + i]); };
    auto V = [&](int64_t j, int64_t i) { return static_cast<double>(in.v[(h * SK + j) * DV + i]); };
    auto dO = [&](int64_t r, int64_t i) { return static_cast<double>(in.dout[(h * SQ + r) * DV + i]); };
    std::vector<double> P(SQ * SK, 0.0), dS(SQ * SK, 0.0);
    for (int64_t r = 0; r < SQ; ++r) {
      const int64_t n = c.causal ? std::min(SK, r + 1) : SK;
      double m = -INFINITY, l = 0;
      std::vector<double> s(n);
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < D; ++i) dot += Q(r, i) * K(j, i);
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
      e.lse[h * SQ + r] = n == 0 ? -INFINITY : m + std::log(l);
      for (int64_t j = 0; j < n; ++j) P[r * SK + j] = std::exp(s[j] - m) / l;
      double dsum = 0;
      for (int64_t i = 0; i < DV; ++i) {
        double o = 0, t = 0;
        for (int64_t j = 0; j < n; ++j) o += P[r * SK + j] * V(j, i), t += P[r * SK + j] * std::fabs(V(j, i));
        e.out[(h * SQ + r) * DV + i] = o, e.t_out[(h * SQ + r) * DV + i] = t;
        dsum += o * dO(r, i);
      }
      for (int64_t j = 0; j < n; ++j) {
        double dp = 0;
        for (int64_t i = 0; i < DV; ++i) dp += dO(r, i) * V(j, i);
        dS[r * SK + j] = P[r * SK + j] * (dp - dsum) * scale;
      }
    }
    for (int64_t r = 0; r < SQ; ++r) {
      for (int64_t j = 0; j < SK; ++j) {
        const double p = P[r * SK + j], ds = dS[r * SK + j];
        for (int64_t i = 0; i < DV; ++i) {
          e.dv[(h * SK + j) * DV + i] += p * dO(r, i), e.t_dv[(h * SK + j) * DV + i] += p * std::fabs(dO(r, i));
        }
        for (int64_t i = 0; i < D; ++i) {
          e.dq[(h * SQ + r) * D + i] += ds * K(j, i), e.t_dq[(h * SQ + r) * D + i] += std::fabs(ds * K(j, i));
          e.dk[(h * SK + j) * D + i] += ds * Q(r, i), e.t_dk[(h * SK + j) * D + i] += std::fabs(ds * Q(r, i));
        }
      }
    }
  }
  return e;
}

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

// An ISA and how the bf16 products run on it.
struct Path {
  Isa isa;
  Bf16Products products;
  std::string Name() const { return std::string(IsaName(isa)) + " " + Bf16ProductsName(products); }
};

AttentionParams Params(const Case& c, const Path& path) {
  AttentionParams p;
  p.shape = {c.Heads(), c.sq, c.sk, c.d, c.dv};
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  p.causal = c.causal;
  p.isa = path.isa;
  p.compute = ComputeType::kBF16;
  p.bf16_products = path.products;
  return p;
}

// The forward, and the backward from `exact`'s Out and LSE when given (so
// that only the backward's own rounding counts), else from the forward's.
Outputs RunKernels(const Case& c, const Inputs& in, const Path& isa, const Exact* exact = nullptr) {
  Outputs r;
  r.out.assign(c.Heads() * c.sq * c.dv, NAN), r.lse.assign(c.Heads() * c.sq, NAN);
  const AttentionParams p = Params(c, isa);
  FusedAttentionForward(p, in.q.data(), in.k.data(), in.v.data(), r.out.data(), r.lse.data());
  r.dq.assign(in.q.size(), NAN), r.dk.assign(in.k.size(), NAN), r.dv.assign(in.v.size(), NAN);
  std::vector<float> out = r.out, lse = r.lse;
  if (exact != nullptr) {
    out.assign(exact->out.begin(), exact->out.end());
    lse.assign(exact->lse.begin(), exact->lse.end());
  }
  AttentionGradArgs a;
  a.q = in.q.data(), a.k = in.k.data(), a.v = in.v.data(), a.out = out.data(), a.lse = lse.data();
  a.dout = in.dout.data(), a.dq = r.dq.data(), a.dk = r.dk.data(), a.dv = r.dv.data();
  FusedAttentionBackward(p, a);
  return r;
}

// Every element within (2^-8 + rtol) T + atol of the exact value; returns
// the largest error over T seen (how much of the bf16 bound was used).
double ExpectWithin(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& t,
                    const std::string& what) {
  constexpr double kRtol = 2e-4, kAtol = 2e-5;
  double worst = 0;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]), bound = (std::ldexp(1.0, -8) + kRtol) * t[i] + kAtol;
    if (t[i] > 0) worst = std::max(worst, err / t[i]);
    if (!(err <= bound) && failures++ < 3) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", exact " << want[i] << ", bound " << bound;
    }
  }
  return worst;
}

std::vector<Path> Paths() {
  std::vector<Path> out;
  if (IsaSupported(Isa::kAvx512)) {
    for (Bf16Products p : {Bf16Products::kAmx, Bf16Products::kVdpbf16ps, Bf16Products::kRoundedF32}) {
      if (Bf16ProductsSupported(p)) out.push_back({Isa::kAvx512, p});
    }
  }
  if (IsaSupported(Isa::kAvx2)) out.push_back({Isa::kAvx2, Bf16Products::kRoundedF32});
  return out;
}

// Returns the largest error / T over the outputs.
double Check(const Case& c, const Inputs& in, const Path& isa) {
  const std::string what = c.Name() + " " + isa.Name();
  const Exact e = Attention(c, in, 1.0f / std::sqrt(static_cast<float>(c.d)));
  const Outputs r = RunKernels(c, in, isa, &e);
  for (size_t i = 0; i < r.lse.size(); ++i) {
    // The row statistics are f32: the probabilities are rounded after them.
    if (std::isinf(e.lse[i])) {
      EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] < 0) << what << " LSE " << i;
    } else {
      EXPECT_NEAR(r.lse[i], e.lse[i], 1e-5 * (1 + std::fabs(e.lse[i]))) << what << " LSE " << i;
    }
  }
  double worst = ExpectWithin(r.out, e.out, e.t_out, what + " Out");
  worst = std::max(worst, ExpectWithin(r.dq, e.dq, e.t_dq, what + " dQ"));
  worst = std::max(worst, ExpectWithin(r.dk, e.dk, e.t_dk, what + " dK"));
  return std::max(worst, ExpectWithin(r.dv, e.dv, e.t_dv, what + " dV"));
}

TEST(AttentionBf16Test, WithinTheRoundingBoundAtOddSizesAndTails) {
  std::mt19937 rng(11);
  for (int64_t s : {1, 2, 7, 17, 64, 65, 130}) {
    for (bool causal : {false, true}) {
      for (int64_t d : {1, 7, 16, 33, 64}) {
        const Case c{{2}, s, causal ? s : s + 3, d, d == 7 ? 9 : d, causal};
        const Inputs in = MakeInputs(c, rng);
        for (const Path& isa : Paths()) Check(c, in, isa);
      }
    }
  }
}

// Several key and query tiles, odd ones at the end; the rounding shows (the
// error is above f32 accumulation: bf16 did run).
TEST(AttentionBf16Test, LongRowsUseTheBoundAndShowTheRounding) {
  std::mt19937 rng(12);
  for (const Case& c : {Case{{1}, 301, 301, 64, 64, true}, Case{{3}, 67, 259, 31, 17, false}}) {
    const Inputs in = MakeInputs(c, rng);
    for (const Path& isa : Paths()) {
      const double worst = Check(c, in, isa);
      EXPECT_GT(worst, 1e-3) << c.Name() << " " << isa.Name() << ": no bf16 rounding seen";
    }
  }
}

// Inputs that are not bf16 values: the kernels round them on the way in, so
// both paths equal the kernels run on the rounded inputs (the AVX512_BF16
// path's vcvtneps2bf16 and the exact integer rounding agree on normal
// numbers), and the two paths agree with each other.
TEST(AttentionBf16Test, RoundsItsInputsAndThePathsAgree) {
  std::mt19937 rng(13);
  const Case c{{3}, 45, 77, 24, 40, true};
  const Inputs raw = MakeInputs(c, rng, /*round=*/false);
  Inputs rounded = raw;
  for (auto* v : {&rounded.q, &rounded.k, &rounded.v, &rounded.dout}) {
    for (float& x : *v) x = RoundToBf16(x);
  }
  std::vector<Outputs> runs;
  for (const Path& isa : Paths()) {
    const Outputs a = RunKernels(c, raw, isa), b = RunKernels(c, rounded, isa);
    // The backward's D = rowsum(dOut * Out) reads dOut unrounded, so the
    // gradients of raw and rounded inputs differ by f32 effects only there.
    for (size_t i = 0; i < a.out.size(); ++i) EXPECT_EQ(a.out[i], b.out[i]) << isa.Name() << " Out " << i;
    for (size_t i = 0; i < a.dv.size(); ++i) EXPECT_EQ(a.dv[i], b.dv[i]) << isa.Name() << " dV " << i;
    for (size_t i = 0; i < a.dq.size(); ++i) EXPECT_NEAR(a.dq[i], b.dq[i], 2e-2 * (1 + std::fabs(b.dq[i]))) << i;
    runs.push_back(a);
  }
  const Exact e = Attention(c, rounded, 1.0f / std::sqrt(static_cast<float>(c.d)));
  for (size_t r = 1; r < runs.size(); ++r) {
    // Each within the bound of the exact result, hence within twice of each other.
    for (size_t i = 0; i < runs[0].out.size(); ++i) {
      EXPECT_NEAR(runs[0].out[i], runs[r].out[i], 2 * (std::ldexp(1.0, -8) + 2e-4) * e.t_out[i] + 4e-5) << i;
    }
  }
}

TEST(AttentionBf16Test, NoKeysGivesZeroOutAndMinusInfinityLse) {
  const Case c{{2}, 3, 0, 4, 4, false};
  std::vector<float> q(2 * 3 * 4, 1.f), out(2 * 3 * 4, NAN), lse(2 * 3, NAN);
  for (const Path& isa : Paths()) {
    FusedAttentionForward(Params(c, isa), q.data(), nullptr, nullptr, out.data(), lse.data());
    for (float x : out) EXPECT_EQ(x, 0.f);
    for (float x : lse) EXPECT_TRUE(std::isinf(x) && x < 0);
  }
}

}  // namespace
}  // namespace kiln::jit
