// compiler/kernels/onednn/onednn_kernels.cc: the fused matmul and matmul + sgd
// kernels against double-precision references, their primitives shared
// through PrimitiveCache::Global(), their per-run buffers taken from the
// caching allocator, and one kernel run from several threads at once. The
// fused conv: onednn_conv_kernels_test.
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
#include "tests/onednn_jit_kernels_test_util.h"

namespace kiln::jit {
namespace {

using namespace onednn_jit_kernels_test;  // the helpers shared by the split files (tests/onednn_jit_kernels_test_util.h)

TEST(FusedMatmulKernelTest, MatchesReferenceOverShapesAndEpilogues) {
  std::mt19937 rng(11);
  struct Epilogue {
    bool bias;
    MatmulActivation act;
    float alpha;
    bool transpose_w;
  };
  const std::vector<Epilogue> epilogues = {
      {false, MatmulActivation::kNone, 1.f, false},    {true, MatmulActivation::kNone, 1.f, false},
      {true, MatmulActivation::kRelu, 1.f, false},     {false, MatmulActivation::kGelu, 1.f, false},
      {true, MatmulActivation::kGeluTanh, 1.f, false}, {true, MatmulActivation::kRelu, 0.5f, false},
      {false, MatmulActivation::kNone, -2.f, true},    {true, MatmulActivation::kGelu, 1.f, true},
  };
  for (int64_t m : {1, 3, 17, 64}) {
    for (int64_t k : {1, 7, 33}) {
      for (int64_t n : {1, 5, 100}) {
        for (const Epilogue& e : epilogues) {
          FusedMatmulSpec s;
          s.x_dims = Dims{m, k};
          s.w_dims = e.transpose_w ? Dims{n, k} : Dims{k, n};
          s.transpose_w = e.transpose_w;
          s.alpha = e.alpha;
          s.bias = e.bias;
          s.activation = e.act;
          EXPECT_EQ(CheckFusedMatmul(s, rng), "") << "m=" << m << " k=" << k << " n=" << n;
        }
      }
    }
  }
}

TEST(FusedMatmulKernelTest, LeadingDimsFoldIntoRowsAndDescribeNamesTheEpilogue) {
  std::mt19937 rng(12);
  FusedMatmulSpec s;
  s.x_dims = Dims{2, 3, 16};
  s.w_dims = Dims{16, 8};
  s.bias = true;
  s.activation = MatmulActivation::kRelu;
  EXPECT_EQ(CheckFusedMatmul(s, rng), "");
  const std::string d = MakeFusedMatmulKernel(s, onednn::Settings{}, "matmul_0")->Describe();
  EXPECT_EQ(d.rfind("oneDNN matmul (", 0), 0u) << d;
  EXPECT_NE(d.find(") + bias + relu post-op"), std::string::npos) << d;
  s.bias = false;
  s.activation = MatmulActivation::kGeluTanh;
  EXPECT_NE(MakeFusedMatmulKernel(s, onednn::Settings{}, "m")->Describe().find(") + gelu_tanh post-op"), std::string::npos);
}

void CheckMatmulSgd(const Dims& x_dims, int64_t n, bool keep_old, std::mt19937& rng) {
  const int64_t k = x_dims.back(), m = Numel(x_dims) / k;
  Buf x = Random(x_dims, rng), dy = Random({m, n}, rng), lr{{1}, {0.25f}}, w = Random({k, n}, rng);
  const Buf w0 = w;
  Buf w_old = Zeros({k, n});
  auto kernel = MakeMatmulSgdKernel(x_dims, {k, n}, onednn::Settings{}, "matmul_sgd_0", keep_old);
  Buf scaled = Zeros({MatmulSgdScratchOf(x_dims, {k, n}).numel});
  // W as read and W as written are one buffer.
  std::vector<Buf*> args = {&x, &dy, &lr, &w};
  if (keep_old) args.push_back(&w_old);
  args.push_back(&scaled);
  args.push_back(&w);
  RunKernel(*kernel, args);
  std::vector<double> want(w0.data.begin(), w0.data.end());
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      double g = 0;
      for (int64_t i = 0; i < m; ++i) g += double(x.data[i * k + p]) * dy.data[i * n + j];
      want[p * n + j] -= 0.25 * g;
    }
  }
  EXPECT_EQ(Compare(w.data, want), "") << DimsToString(x_dims) << " n=" << n << " keep_old=" << keep_old;
  if (keep_old) {
    EXPECT_EQ(w_old.data, w0.data);
  }
}

// bf16 compute: lr scales the smaller of X and dY in f32 and a generated
// kernel rounds it to bf16 (oneDNN's reorder rounds the other), so W moves by
// the f32-accumulated product of exactly those bf16 operands.
void CheckMatmulSgdBf16(const Dims& x_dims, int64_t n, bool keep_old, std::mt19937& rng) {
  const int64_t k = x_dims.back(), m = Numel(x_dims) / k;
  const float lr_value = 0.3f;
  Buf x = Random(x_dims, rng), dy = Random({m, n}, rng), lr{{1}, {lr_value}}, w = Random({k, n}, rng);
  const Buf w0 = w;
  Buf w_old = Zeros({k, n});
  auto kernel = MakeMatmulSgdKernel(x_dims, {k, n}, onednn::Settings{}, "matmul_sgd_0", keep_old, ComputeType::kBF16);
  // The bf16 scaled operand fits in as many floats as it has elements.
  Buf scaled = Zeros({MatmulSgdScratchOf(x_dims, {k, n}, ComputeType::kBF16).numel});
  std::vector<Buf*> args = {&x, &dy, &lr, &w};
  if (keep_old) args.push_back(&w_old);
  args.push_back(&scaled);
  args.push_back(&w);
  RunKernel(*kernel, args);
  const bool scale_x = m * k < m * n;
  const std::string what = DimsToString(x_dims) + " n=" + std::to_string(n) + (scale_x ? " scaling X" : " scaling dY");
  EXPECT_NE(kernel->Describe().find(scale_x ? "lr * X rounded to bf16" : "lr * dY rounded to bf16"), std::string::npos)
      << kernel->Describe();
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      double g = 0, mag = 0;
      for (int64_t i = 0; i < m; ++i) {
        const float xv = x.data[i * k + p], dv = dy.data[i * n + j];
        const double a = RoundThroughBf16(scale_x ? lr_value * xv : xv);
        const double b = RoundThroughBf16(scale_x ? dv : lr_value * dv);
        g += a * b;
        mag += std::fabs(a * b);
      }
      const double want = w0.data[p * n + j] - g;
      ASSERT_NEAR(w.data[p * n + j], want, std::ldexp(mag, -20) * m + std::ldexp(std::fabs(want), -23)) << what;
    }
  }
  if (keep_old) {
    EXPECT_EQ(w_old.data, w0.data);
  }
}

// dY stored in bf16 by the kernel that computed it (bf16_activations): bound
// as it is, and lr scales X.
void CheckMatmulSgdBf16Dy(const Dims& x_dims, int64_t n, std::mt19937& rng) {
  const int64_t k = x_dims.back(), m = Numel(x_dims) / k;
  const float lr_value = 0.3f;
  Buf x = Random(x_dims, rng), dy = Random({m, n}, rng), lr{{1}, {lr_value}}, w = Random({k, n}, rng);
  std::vector<uint16_t> dy16(dy.data.size());
  for (size_t i = 0; i < dy16.size(); ++i) dy16[i] = FloatToBf16Bits(dy.data[i]);
  const Buf w0 = w;
  auto kernel = MakeMatmulSgdKernel(x_dims, {k, n}, onednn::Settings{}, "matmul_sgd_0", false, ComputeType::kBF16, HostIsa(),
                                    DataType::kBF16);
  EXPECT_NE(kernel->Describe().find("lr * X rounded to bf16"), std::string::npos) << kernel->Describe();
  EXPECT_NE(kernel->Describe().find("dY stored in bf16"), std::string::npos) << kernel->Describe();
  std::vector<float> scaled(MatmulSgdScratchOf(x_dims, {k, n}, ComputeType::kBF16, DataType::kBF16).numel);
  runtime::BufferView args[] = {{x.data.data()}, {dy16.data()},   {lr.data.data()},
                                {w.data.data()}, {scaled.data()}, {w.data.data()}};
  kernel->Run(args);
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      double g = 0, mag = 0;
      for (int64_t i = 0; i < m; ++i) {
        const double a = RoundThroughBf16(lr_value * x.data[i * k + p]);
        const double b = Bf16BitsToFloat(dy16[i * n + j]);
        g += a * b;
        mag += std::fabs(a * b);
      }
      const double want = w0.data[p * n + j] - g;
      ASSERT_NEAR(w.data[p * n + j], want, std::ldexp(mag, -20) * m + std::ldexp(std::fabs(want), -23))
          << DimsToString(x_dims) << " n=" << n;
    }
  }
}

TEST(MatmulSgdKernelTest, Bf16DyIsBoundAsItIsAndLrScalesX) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(19);
  for (const Dims& x : {Dims{17, 33}, Dims{2, 3, 5}, Dims{129, 40}}) {
    for (int64_t n : {1, 37, 100}) CheckMatmulSgdBf16Dy(x, n, rng);
  }
}

TEST(MatmulSgdKernelTest, Bf16ScalesAndRoundsTheSmallerOperandInGeneratedCode) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(17);
  for (bool keep_old : {false, true}) {
    for (const Dims& x : {Dims{17, 33}, Dims{2, 3, 5}, Dims{64, 1}, Dims{129, 40}}) {
      for (int64_t n : {1, 37, 100}) CheckMatmulSgdBf16(x, n, keep_old, rng);
    }
  }
}

TEST(MatmulSgdKernelTest, MatchesReference) {
  std::mt19937 rng(13);
  for (bool keep_old : {false, true}) {
    for (const Dims& x : {Dims{1, 7}, Dims{17, 33}, Dims{2, 3, 5}, Dims{64, 1}}) {
      for (int64_t n : {1, 5, 100}) CheckMatmulSgd(x, n, keep_old, rng);
    }
  }
  const std::string d = MakeMatmulSgdKernel({4, 8}, {8, 3}, onednn::Settings{}, "s", true)->Describe();
  EXPECT_NE(d.find(") W -= lr * X^T dY: weight gradient and sgd step in one primitive, the old W copied out first"),
            std::string::npos)
      << d;
}

// ---- one oneDNN stack: cache, allocator, threads ------------------------------------------

bool Listed(const std::string& key) {
  for (const onednn::PrimitiveKey& k : PrimitiveCache::Global().Keys()) {
    if (k.ToString() == key) return true;
  }
  return false;
}

TEST(OneDnnJitKernelsTest, SameKernelTwiceHitsTheGlobalPrimitiveCache) {
  PrimitiveCache& cache = PrimitiveCache::Global();
  FusedMatmulSpec m;
  m.x_dims = Dims{13, 29};
  m.w_dims = Dims{29, 31};
  m.bias = true;
  m.activation = MatmulActivation::kRelu;
  const FusedConvSpec c = SpecOf({{2, 4, 9, 9}, {8, 4, 3, 3}, 1, 1, 1, 1, true, MatmulActivation::kRelu});
  MakeFusedMatmulKernel(m, onednn::Settings{}, "matmul_0");
  MakeFusedConvKernel(c, onednn::Settings{}, "conv_0");
  MakeMatmulSgdKernel({13, 29}, {29, 31}, onednn::Settings{}, "matmul_sgd_0");
  const onednn::PrimitiveCacheStats before = cache.stats();
  MakeFusedMatmulKernel(m, onednn::Settings{}, "matmul_1");
  MakeFusedConvKernel(c, onednn::Settings{}, "conv_1");
  MakeMatmulSgdKernel({13, 29}, {29, 31}, onednn::Settings{}, "matmul_sgd_1");
  EXPECT_EQ(cache.stats().hits, before.hits + 3);
  EXPECT_EQ(cache.stats().misses, before.misses);
  EXPECT_TRUE(Listed("matmul f32 [13,29]x[29,31] scale=1 +bias +elu +linear(alpha=1)"));
  EXPECT_TRUE(Listed("matmul f32 [13,29]x[13,31] trans_a scale=-1 +sum"));
  EXPECT_TRUE(Listed("conv_fwd f32 [2,4,9,9]x[8,4,3,3] strides=[1,1] dilations=[0,0] pad_l=[1,1] pad_r=[1,1] "
                     "+bias +elu +linear(alpha=1)"));
}

// Scratchpads and reorder buffers come from the caching allocator for one run
// and go back right after (matmul_sgd's lr * dY is an argument, a temp of the plan): allocations grow during
// Run, and nothing stays live (no buffer kept per kernel or per thread).
TEST(OneDnnJitKernelsTest, PerRunBuffersComeFromTheCachingAllocator) {
  std::mt19937 rng(16);
  CachingAllocator& alloc = CachingAllocator::Global();
  auto allocations_of = [&](const runtime::Kernel& kernel, const std::vector<Buf*>& args) {
    const AllocatorStats before = alloc.stats();
    RunKernel(kernel, args);
    const AllocatorStats after = alloc.stats();
    EXPECT_EQ(after.in_use_bytes, before.in_use_bytes) << kernel.Describe();
    EXPECT_EQ(after.live_blocks, before.live_blocks) << kernel.Describe();
    return after.allocations - before.allocations;
  };
  const ConvCase cc{{2, 8, 10, 10}, {16, 8, 3, 3}, 1, 1, 1, 1, true, MatmulActivation::kRelu};
  Buf x = Random(cc.input, rng), f = Random(cc.filter, rng), b = Random({16}, rng), y = Zeros({2, 16, 10, 10});
  auto conv = MakeFusedConvKernel(SpecOf(cc), onednn::Settings{}, "conv_0");
  EXPECT_GE(allocations_of(*conv, {&x, &f, &b, &y}), 2) << conv->Describe();  // reordered src and dst at least


  // A matmul whose primitive wants a scratchpad takes one per run.
  FusedMatmulSpec m;
  m.x_dims = Dims{256, 1024};
  m.w_dims = Dims{1024, 512};
  onednn::MatmulHandler h(PrimitiveCache::Global(), onednn::Settings{}, m.x_dims, false, m.w_dims, false, 1.f);
  ASSERT_TRUE(h.AcquireForwardPrimitive());
  const size_t scratch_bytes = h.entry().pd.scratchpad_desc().get_size();
  RecordProperty("matmul_scratchpad_bytes", std::to_string(scratch_bytes));
  const bool wants_scratch = scratch_bytes > 0;
  Buf a = Random(m.x_dims, rng), bw = Random(m.w_dims, rng), out = Zeros({256, 512});
  auto matmul = MakeFusedMatmulKernel(m, onednn::Settings{}, "matmul_0");
  EXPECT_EQ(allocations_of(*matmul, {&a, &bw, &out}), wants_scratch ? 1 : 0) << matmul->Describe();
}

// Given the scratch it declares (Kernel::ScratchBytes, planned in the arena),
// a kernel takes nothing from the allocator, stays inside it (a canary after
// it is untouched) and computes what Run computes.
TEST(OneDnnJitKernelsTest, ScratchHoldsEveryPerRunBuffer) {
  std::mt19937 rng(17);
  const ConvCase cc{{2, 8, 10, 10}, {16, 8, 3, 3}, 1, 1, 1, 1, true, MatmulActivation::kRelu};
  Buf x = Random(cc.input, rng), f = Random(cc.filter, rng), b = Random({16}, rng), dy = Random({2, 16, 10, 10}, rng);
  Buf y = Zeros({2, 16, 10, 10}), dx = Zeros(cc.input), df = Zeros(cc.filter), db = Zeros({16});
  const auto conv = MakeFusedConvKernel(SpecOf(cc), onednn::Settings{}, "conv_0");
  const auto grad = MakeConvGradKernel(SpecOf(cc), true, true, onednn::Settings{}, "conv_grad_0");
  for (const auto& [kernel, args] : std::vector<std::pair<const runtime::Kernel*, std::vector<Buf*>>>{
           {conv.get(), {&x, &f, &b, &y}}, {grad.get(), {&x, &f, &dy, &dx, &df, &db}}}) {
    SCOPED_TRACE(kernel->Describe());
    const size_t bytes = kernel->ScratchBytes();
    EXPECT_GT(bytes, 0u);  // these shapes reorder their activations
    RunKernel(*kernel, args);
    std::vector<std::vector<float>> want;
    for (Buf* a : args) want.push_back(a->data);
    constexpr size_t kCanary = 4096;
    Allocation scratch(bytes + kCanary);
    auto* raw = static_cast<uint8_t*>(scratch.ptr());
    std::fill(raw + bytes, raw + bytes + kCanary, uint8_t{0x5a});
    std::vector<runtime::BufferView> views;
    for (Buf* a : args) views.push_back({a->data.data(), DataType::kFP32, &a->dims});
    const AllocatorStats before = CachingAllocator::Global().stats();
    kernel->RunWithScratch(views.data(), raw);
    EXPECT_EQ(CachingAllocator::Global().stats().allocations, before.allocations);
    EXPECT_TRUE(std::all_of(raw + bytes, raw + bytes + kCanary, [](uint8_t v) { return v == 0x5a; }));
    for (size_t i = 0; i < args.size(); ++i) EXPECT_EQ(args[i]->data, want[i]) << "argument " << i;
  }
}

// The resnet's last stage at 32x32 inputs: 3x3 convolutions over 1x1 (and
// 2x2) images, src and dY kept as the forward writes them. On an AVX2 CPU
// oneDNN's weights' gradient for those kept layouts is its reference one
// (0.9 s a call at 512 channels, batch 32): the kernel takes another
// layout's fast implementation and reorders instead, and never runs a
// reference implementation unless the settings allow it.
TEST(OneDnnJitKernelsTest, AConvGradientOverATinyImageRunsNoReferenceImplementation) {
  for (const Dims& x : std::vector<Dims>{{4, 16, 1, 1}, {4, 16, 2, 2}, {4, 32, 1, 1}}) {
    const ConvCase cc{x, {x[1], x[1], 3, 3}, 1, 1, 1, 1, false, MatmulActivation::kNone};
    FusedConvSpec spec = SpecOf(cc);
    const ActLayout src = ConvForwardSrcLayout(spec, onednn::Settings{});
    spec.dst_layout = ConvForwardDstLayout(spec, onednn::Settings{});
    spec.src_layout = src;
    const auto grad = MakeConvGradKernel(spec, true, false, onednn::Settings{}, "conv_grad_0");
    EXPECT_EQ(grad->Describe().find("ref:"), std::string::npos) << DimsToString(x) << ": " << grad->Describe();
  }
}

// One kernel (one cached primitive with its reorders) run by 4 threads at
// once on their own buffers gives each the single-threaded result.
TEST(OneDnnJitKernelsTest, FourThreadsRunOneKernelConcurrently) {
  const ConvCase cc{{3, 8, 11, 9}, {16, 4, 3, 3}, 2, 1, 1, 2, true, MatmulActivation::kRelu};
  auto conv = MakeFusedConvKernel(SpecOf(cc), onednn::Settings{}, "conv_0");
  FusedMatmulSpec ms;
  ms.x_dims = Dims{33, 65};
  ms.w_dims = Dims{65, 47};
  ms.bias = true;
  ms.activation = MatmulActivation::kGelu;
  auto matmul = MakeFusedMatmulKernel(ms, onednn::Settings{}, "matmul_0");
  constexpr int kThreads = 4;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      Buf x = Random(cc.input, rng), f = Random(cc.filter, rng), b = Random({16}, rng);
      Buf mx = Random(ms.x_dims, rng), mw = Random(ms.w_dims, rng), mb = Random({47}, rng);
      Buf y0 = Zeros({3, 16, 6, 5}), m0 = Zeros({33, 47});
      RunKernel(*conv, {&x, &f, &b, &y0});
      RunKernel(*matmul, {&mx, &mw, &mb, &m0});
      for (int i = 0; i < 30; ++i) {
        Buf y = Zeros(y0.dims), m = Zeros(m0.dims);
        RunKernel(*conv, {&x, &f, &b, &y});
        RunKernel(*matmul, {&mx, &mw, &mb, &m});
        const std::string d = Compare(y.data, std::vector<double>(y0.data.begin(), y0.data.end()), 1e-6, 1e-6) +
                              Compare(m.data, std::vector<double>(m0.data.begin(), m0.data.end()), 1e-6, 1e-6);
        if (!d.empty()) failures[t] = d;
      }
      const std::vector<double> want = ReferenceMatmul(ms, mx, mw, &mb);
      if (failures[t].empty()) failures[t] = Compare(m0.data, want);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

}  // namespace
}  // namespace kiln::jit
