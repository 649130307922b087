// Helpers of the fused oneDNN kernel tests (onednn_jit_kernels_test,
// onednn_conv_kernels_test): kernel arguments, a kernel run on them, the
// double-precision matmul reference, and a conv case as a FusedConvSpec.
#pragma once

#include "compiler/kernels/onednn/onednn_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "framework/allocator.h"
#include "framework/onednn/handlers.h"
#include "framework/op_desc.h"
#include "framework/bf16.h"
#include "tests/bf16_util.h"
#include "tests/op_test_util.h"

namespace kiln::jit {
namespace onednn_jit_kernels_test {

using onednn::PrimitiveCache;

// A kernel argument: its floats and dims.
struct Buf {
  Dims dims;
  std::vector<float> data;
};

inline Buf Random(const Dims& dims, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Buf b{dims, std::vector<float>(static_cast<size_t>(Numel(dims)))};
  for (float& v : b.data) v = u(rng);
  return b;
}

inline Buf Zeros(const Dims& dims) { return {dims, std::vector<float>(static_cast<size_t>(Numel(dims)), 0.f)}; }

inline void RunKernel(const runtime::Kernel& kernel, const std::vector<Buf*>& args) {
  std::vector<runtime::BufferView> views;
  for (Buf* b : args) views.push_back({b->data.data(), DataType::kFP32, &b->dims});
  kernel.Run(views.data());
}

// "" when |got - want| <= atol + rtol * |want| everywhere, else the worst element.
inline std::string Compare(const std::vector<float>& got, const std::vector<double>& want, double atol = 1e-4,
                    double rtol = 1e-4) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i])) {
      std::ostringstream os;
      os << "element " << i << ": got " << got[i] << ", want " << want[i];
      return os.str();
    }
  }
  return "";
}

inline double Activate(double v, MatmulActivation a) {
  switch (a) {
    case MatmulActivation::kNone: return v;
    case MatmulActivation::kRelu: return std::max(0.0, v);
    case MatmulActivation::kGelu: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case MatmulActivation::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  return v;
}

inline std::vector<double> ReferenceMatmul(const FusedMatmulSpec& s, const Buf& x, const Buf& w, const Buf* bias) {
  const int64_t k = s.x_dims.back(), m = Numel(s.x_dims) / k;
  const int64_t n = s.transpose_w ? s.w_dims[0] : s.w_dims[1];
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(x.data[i * k + p]) * w.data[s.transpose_w ? j * k + p : p * n + j];
      acc = s.alpha * acc + (bias ? bias->data[j] : 0.0);
      out[i * n + j] = Activate(acc, s.activation);
    }
  }
  return out;
}

// Builds, runs and checks one fused matmul; "" when it matches.
inline std::string CheckFusedMatmul(const FusedMatmulSpec& s, std::mt19937& rng) {
  const int64_t k = s.x_dims.back(), m = Numel(s.x_dims) / k;
  const int64_t n = s.transpose_w ? s.w_dims[0] : s.w_dims[1];
  Buf x = Random(s.x_dims, rng), w = Random(s.w_dims, rng), bias = Random({n}, rng), out = Zeros({m, n});
  auto kernel = MakeFusedMatmulKernel(s, onednn::Settings{}, "matmul_0");
  std::vector<Buf*> args = {&x, &w};
  if (s.bias) args.push_back(&bias);
  args.push_back(&out);
  RunKernel(*kernel, args);
  const std::string diff = Compare(out.data, ReferenceMatmul(s, x, w, s.bias ? &bias : nullptr));
  return diff.empty() ? "" : kernel->Describe() + ": " + diff;
}
struct ConvCase {
  Dims input, filter;
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = false;
  MatmulActivation act = MatmulActivation::kNone;
};

inline FusedConvSpec SpecOf(const ConvCase& c) {
  FusedConvSpec s;
  s.input_dims = c.input;
  s.filter_dims = c.filter;
  s.strides = Dims{c.stride, c.stride};
  s.paddings = Dims{c.padding, c.padding};
  s.dilations = Dims{c.dilation, c.dilation};
  s.groups = c.groups;
  s.bias = c.bias;
  s.activation = c.act;
  return s;
}

}  // namespace onednn_jit_kernels_test
}  // namespace kiln::jit
