// Helpers of the Resize tests (onednn_resize_test, onednn_conv_resize_test):
// kernel arguments as typed byte buffers, random inputs, a kernel run on
// them, and the comparison of two runs' outputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "framework/bf16.h"
#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::jit::resize_test {

// One kernel argument.
struct Arg {
  Dims dims;
  DataType dtype = DataType::kFP32;
  std::vector<uint8_t> bytes;
};

// f32 uniform in [lo, hi), bf16 the same rounded, other types zero bytes.
inline Arg RandomArg(const Dims& dims, DataType dtype, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  Arg a{dims, dtype, std::vector<uint8_t>(static_cast<size_t>(Numel(dims)) * SizeOf(dtype))};
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < Numel(dims); ++i) {
    if (dtype == DataType::kFP32) reinterpret_cast<float*>(a.bytes.data())[i] = u(rng);
    if (dtype == DataType::kBF16) reinterpret_cast<uint16_t*>(a.bytes.data())[i] = FloatToBf16Bits(u(rng));
  }
  return a;
}

inline Arg ZeroArg(const Dims& dims, DataType dtype = DataType::kFP32) {
  return {dims, dtype, std::vector<uint8_t>(static_cast<size_t>(Numel(dims)) * SizeOf(dtype))};
}

// Runs `kernel` with argument i bound to bufs[bind[i]] (bind empty: bufs[i]).
inline void RunOn(const runtime::Kernel& kernel, std::vector<Arg>* bufs, std::vector<int> bind = {}) {
  if (bind.empty()) {
    for (size_t i = 0; i < bufs->size(); ++i) bind.push_back(static_cast<int>(i));
  }
  std::vector<runtime::BufferView> views;
  for (int b : bind) views.push_back({(*bufs)[b].bytes.data(), (*bufs)[b].dtype, &(*bufs)[b].dims});
  kernel.Run(views.data());
}

// The dims of each argument bound as `bind` says.
inline std::vector<Dims> DimsOf(const std::vector<Arg>& bufs, std::vector<int> bind = {}) {
  std::vector<Dims> d;
  if (bind.empty()) {
    for (const Arg& a : bufs) d.push_back(a.dims);
  }
  for (int b : bind) d.push_back(bufs[b].dims);
  return d;
}

// "" when buffers `a` and `b` hold the same values: f32 within rtol (relative
// to max(1, |b|)), other types byte for byte.
inline std::string SameValues(const std::vector<Arg>& a, const std::vector<Arg>& b, double rtol = 1e-5) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype != DataType::kFP32) {
      if (a[i].bytes != b[i].bytes) return "buffer " + std::to_string(i) + " differs";
      continue;
    }
    const auto* x = reinterpret_cast<const float*>(a[i].bytes.data());
    const auto* y = reinterpret_cast<const float*>(b[i].bytes.data());
    for (int64_t j = 0; j < Numel(a[i].dims); ++j) {
      const bool both_nan = std::isnan(x[j]) && std::isnan(y[j]);
      if (!both_nan && !(std::abs(x[j] - y[j]) <= rtol * std::max(1.0f, std::abs(y[j])))) {
        std::ostringstream os;
        os << "buffer " << i << " element " << j << ": " << x[j] << " vs " << y[j];
        return os.str();
      }
    }
  }
  return "";
}

// Runs `made` resized to the dims of `bufs` and `fresh` (made for them) on
// copies of `bufs`; "" when both give the same values, else what differs
// (or why Resize refused).
inline std::string ResizedMatchesFresh(const runtime::Kernel& made, const runtime::Kernel& fresh,
                                       const std::vector<Arg>& bufs, const std::vector<int>& bind = {},
                                       double rtol = 1e-5) {
  std::string why;
  std::shared_ptr<const runtime::Kernel> resized = made.Resize(DimsOf(bufs, bind), &why);
  if (resized == nullptr) return "Resize refused: " + why;
  if (resized->Describe() != fresh.Describe()) return "described as " + resized->Describe() + " vs " + fresh.Describe();
  std::vector<Arg> a = bufs, b = bufs;
  RunOn(*resized, &a, bind);
  RunOn(fresh, &b, bind);
  return SameValues(a, b, rtol);
}

}  // namespace kiln::jit::resize_test
