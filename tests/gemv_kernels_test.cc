// compiler/kernels/gemv_kernels.cc: the batch-1 matmul kernel (bias, relu) and the
// fused dX + sgd step against double-precision references, at sizes around
// the vector widths.
#include "compiler/kernels/gemv_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kiln::jit {
namespace {

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

double MaxError(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
  return worst;
}

const std::vector<int64_t> kSizes = {1, 7, 15, 16, 17, 33, 100};

TEST(GemvMatmulKernelTest, MatchesReferenceWithBiasAndRelu) {
  std::mt19937 rng(21);
  for (int64_t k : kSizes) {
    for (int64_t n : kSizes) {
      for (int mode = 0; mode < 4; ++mode) {
        const bool bias = mode & 1, relu = mode & 2;
        std::vector<float> x = Random(k, rng), w = Random(k * n, rng), b = Random(n, rng), out(n, 0.f);
        Dims xd{1, k}, wd{k, n}, bd{n}, od{1, n};
        std::vector<runtime::BufferView> args = {{x.data(), DataType::kFP32, &xd}, {w.data(), DataType::kFP32, &wd}};
        if (bias) args.push_back({b.data(), DataType::kFP32, &bd});
        args.push_back({out.data(), DataType::kFP32, &od});
        MakeGemvMatmulKernel(k, n, bias, relu, "gemv_0")->Run(args.data());
        std::vector<double> want(n);
        for (int64_t j = 0; j < n; ++j) {
          double acc = bias ? b[j] : 0.0;
          for (int64_t p = 0; p < k; ++p) acc += double(x[p]) * w[p * n + j];
          want[j] = relu ? std::max(0.0, acc) : acc;
        }
        EXPECT_LT(MaxError(out, want), 1e-5) << "k=" << k << " n=" << n << " bias=" << bias << " relu=" << relu;
      }
    }
  }
}

TEST(GemvMatmulKernelTest, DescribeNamesTheEpilogue) {
  EXPECT_EQ(MakeGemvMatmulKernel(4, 4, false, false, "g")->Describe(), "matrix-vector product (kiln gemv, batch 1)");
  EXPECT_EQ(MakeGemvMatmulKernel(4, 4, true, true, "g")->Describe(),
            "matrix-vector product (kiln gemv, batch 1) + bias + relu post-op");
  EXPECT_EQ(MakeGemvMatmulKernel(4, 4, true, true, "gemv_3")->name(), "gemv_3");
}

TEST(GemvGradSgdKernelTest, MatchesReferenceWithAndWithoutDx) {
  std::mt19937 rng(22);
  const float lr = 0.125f;
  for (int64_t k : kSizes) {
    for (int64_t n : kSizes) {
      for (bool with_dx : {false, true}) {
        std::vector<float> x = Random(k, rng), dy = Random(n, rng), w = Random(k * n, rng), dx(k, 0.f);
        const std::vector<float> w0 = w;
        Dims xd{1, k}, dyd{1, n}, lrd{1}, wd{k, n};
        float lr_buf = lr;
        std::vector<runtime::BufferView> args = {{x.data(), DataType::kFP32, &xd},
                                                 {dy.data(), DataType::kFP32, &dyd},
                                                 {&lr_buf, DataType::kFP32, &lrd},
                                                 {w.data(), DataType::kFP32, &wd}};
        if (with_dx) args.push_back({dx.data(), DataType::kFP32, &xd});
        args.push_back({w.data(), DataType::kFP32, &wd});
        MakeGemvGradSgdKernel(k, n, with_dx, "gemv_sgd_0")->Run(args.data());
        std::vector<double> want_w(k * n), want_dx(k);
        for (int64_t p = 0; p < k; ++p) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) {
            acc += double(w0[p * n + j]) * dy[j];  // dX reads W before the step
            want_w[p * n + j] = w0[p * n + j] - double(lr) * x[p] * dy[j];
          }
          want_dx[p] = acc;
        }
        EXPECT_LT(MaxError(w, want_w), 1e-6) << "k=" << k << " n=" << n;
        if (with_dx) {
          EXPECT_LT(MaxError(dx, want_dx), 1e-5) << "k=" << k << " n=" << n;
        }
      }
    }
  }
  EXPECT_EQ(MakeGemvGradSgdKernel(2, 2, true, "g")->Describe(),
            "kiln gemv, batch 1: dX = dY W^T and W -= lr * X^T dY in one pass over W");
}

}  // namespace
}  // namespace kiln::jit
