// Helpers of the generated elementwise kernel tests (ew_codegen_test,
// ew_codegen_log_test): run an EwProgram through the generated code on one
// ISA and through the reference interpreter, and compare bit for bit or
// against the accuracy contract of the transcendental functions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "framework/ew/ew_reference.h"

namespace kiln::jit {
namespace ew_test {

using Buffers = std::vector<std::vector<float>>;

inline std::vector<Isa> Isas() {
  std::vector<Isa> isas;
  if (IsaSupported(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  if (IsaSupported(Isa::kAvx512)) {
    isas.push_back(Isa::kAvx512);
  } else {
    std::printf("[ note ] AVX-512 not supported by this CPU: its path is not tested\n");
  }
  return isas;
}

inline std::vector<float> Random(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline Buffers RandomInputs(const EwLayout& l, float lo, float hi, uint32_t seed) {
  Buffers in;
  for (size_t k = 0; k < l.inputs.size(); ++k) {
    in.push_back(Random(l.InputExtent(static_cast<int>(k)), lo, hi, seed + static_cast<uint32_t>(k)));
  }
  return in;
}

inline std::vector<const float*> Ptrs(const Buffers& b) {
  std::vector<const float*> p;
  for (const auto& v : b) p.push_back(v.data());
  return p;
}

// Outputs start as NaN so that an element the kernel fails to write shows.
inline Buffers RunJit(const EwProgram& p, const EwLayout& l, Isa isa, const Buffers& in, int threads = 1,
               bool deterministic = false) {
  FusedElementwiseKernel k("test_kernel", p, l, isa);
  k.set_deterministic(deterministic);
  k.Create();
  Buffers out;
  std::vector<float*> optr;
  for (size_t o = 0; o < l.outputs.size(); ++o) {
    out.emplace_back(static_cast<size_t>(l.OutputExtent(static_cast<int>(o))),
                     std::numeric_limits<float>::quiet_NaN());
  }
  for (auto& v : out) optr.push_back(v.data());
  k.Run(Ptrs(in), optr, threads);
  return out;
}

inline std::vector<std::vector<double>> RunRef(const EwProgram& p, const EwLayout& l, const Buffers& in) {
  std::vector<std::vector<double>> out;
  std::vector<double*> optr;
  for (size_t o = 0; o < l.outputs.size(); ++o) out.emplace_back(l.OutputExtent(static_cast<int>(o)), 0.0);
  for (auto& v : out) optr.push_back(v.data());
  RunReference(p, l, Ptrs(in), optr);
  return out;
}

inline Buffers RunRefFloat(const EwProgram& p, const EwLayout& l, const Buffers& in) {
  Buffers out;
  std::vector<float*> optr;
  for (size_t o = 0; o < l.outputs.size(); ++o) out.emplace_back(l.OutputExtent(static_cast<int>(o)), 0.0f);
  for (auto& v : out) optr.push_back(v.data());
  RunReferenceFloat(p, l, Ptrs(in), optr);
  return out;
}

inline bool SameBits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

inline void ExpectExact(const Buffers& got, const Buffers& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size());
    int bad = 0;
    for (size_t i = 0; i < got[o].size(); ++i) {
      if (SameBits(got[o][i], want[o][i])) continue;
      if (++bad <= 3) ADD_FAILURE() << what << " out" << o << "[" << i << "]: got " << got[o][i] << " want " << want[o][i];
    }
    EXPECT_EQ(bad, 0) << what << " out" << o;
  }
}

inline double Ulp(double r) {
  const double a = std::fabs(r);
  if (a < std::numeric_limits<float>::min()) return std::numeric_limits<float>::denorm_min();
  int e;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

// The accuracy contract of the transcendental functions.
inline double FnTol(double r) { return 2e-7 + 4 * Ulp(r); }

// got vs a double reference with |got-ref| <= tol(ref); NaN/Inf must match
// (a finite reference beyond FLT_MAX may come out as inf).
inline void ExpectNear(const Buffers& got, const std::vector<std::vector<double>>& ref,
                const std::function<double(double)>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t o = 0; o < got.size(); ++o) {
    int bad = 0;
    for (size_t i = 0; i < got[o].size(); ++i) {
      const double g = got[o][i];
      const double r = ref[o][i];
      bool ok;
      if (std::isnan(r)) {
        ok = std::isnan(g);
      } else if (std::fabs(r) > std::numeric_limits<float>::max()) {
        ok = std::isinf(g) ? std::signbit(g) == std::signbit(r) : std::fabs(g) >= std::numeric_limits<float>::max() * 0.999;
      } else {
        ok = std::isfinite(g) && std::fabs(g - r) <= tol(r);
      }
      if (ok) continue;
      if (++bad <= 3) {
        ADD_FAILURE() << what << " out" << o << "[" << i << "]: got " << g << " ref " << r << " diff " << (g - r)
                      << " tol " << tol(r);
      }
    }
    EXPECT_EQ(bad, 0) << what << " out" << o;
  }
}

inline EwLayout Flat(int64_t n, int num_inputs, int num_outputs) {
  std::vector<Dims> in(static_cast<size_t>(num_inputs), Dims{n});
  std::vector<Dims> out(static_cast<size_t>(num_outputs), Dims{n});
  return CollapseLayout({n}, in, out);
}

// Lengths around the vector widths (8 ymm / 16 zmm lanes) and long ones with tails.
constexpr int64_t kSizes[] = {1, 15, 16, 17, 1000, 4099};

}  // namespace ew_test
}  // namespace kiln::jit
