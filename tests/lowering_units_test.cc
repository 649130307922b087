// The one bf16 conversion kernel of the lowering (kernels/onednn/onednn_kernels.h's
// MakeToBf16Kernel), shared by bf16_weight_copies and the matmul sgd kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "framework/bf16.h"

namespace kiln::test {
namespace {

// The one bf16 conversion kernel (bf16_weight_copies' copy, the matmul sgd
// kernel's scaled operand) rounds as the framework does, at sizes around a
// vector's width.
TEST(ToBf16KernelTest, RoundsAsTheFrameworkScaledOrNot) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (const int64_t n : {1, 15, 16, 17, 1000}) {
    for (const bool scaled : {false, true}) {
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      const float scale = 0.37f;
      std::vector<uint16_t> out(n);
      const auto k = jit::MakeToBf16Kernel(n, scaled, HostIsa(), "to_bf16");
      const void* in[] = {x.data(), &scale};
      void* outs[] = {out.data()};
      k->Run(in, outs);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], FloatToBf16Bits(scaled ? scale * x[i] : x[i]))
            << "n " << n << (scaled ? " scaled" : "") << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::test
