// compiler/kernels/onednn/onednn_kernels.cc: the fused matmul, matmul + sgd and fused conv
// kernels against double-precision references (the conv against the
// framework's reference kernels), their primitives shared through
// PrimitiveCache::Global(), their per-run buffers taken from the caching
// allocator, and one kernel run from several threads at once.
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
namespace {

using onednn::PrimitiveCache;

// A kernel argument: its floats and dims.
struct Buf {
  Dims dims;
  std::vector<float> data;
};

Buf Random(const Dims& dims, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Buf b{dims, std::vector<float>(static_cast<size_t>(Numel(dims)))};
  for (float& v : b.data) v = u(rng);
  return b;
}

Buf Zeros(const Dims& dims) { return {dims, std::vector<float>(static_cast<size_t>(Numel(dims)), 0.f)}; }

void RunKernel(const runtime::Kernel& kernel, const std::vector<Buf*>& args) {
  std::vector<runtime::BufferView> views;
  for (Buf* b : args) views.push_back({b->data.data(), DataType::kFP32, &b->dims});
  kernel.Run(views.data());
}

// "" when |got - want| <= atol + rtol * |want| everywhere, else the worst element.
std::string Compare(const std::vector<float>& got, const std::vector<double>& want, double atol = 1e-4,
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

double Activate(double v, MatmulActivation a) {
  switch (a) {
    case MatmulActivation::kNone: return v;
    case MatmulActivation::kRelu: return std::max(0.0, v);
    case MatmulActivation::kGelu: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case MatmulActivation::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  return v;
}

std::vector<double> ReferenceMatmul(const FusedMatmulSpec& s, const Buf& x, const Buf& w, const Buf* bias) {
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
std::string CheckFusedMatmul(const FusedMatmulSpec& s, std::mt19937& rng) {
  const int64_t k = s.x_dims.back(), m = Numel(s.x_dims) / k;
  const int64_t n = s.transpose_w ? s.w_dims[0] : s.w_dims[1];
  Buf x = Random(s.x_dims, rng), w = Random(s.w_dims, rng), bias = Random({n}, rng), out = Zeros({m, n});
  auto kernel = MakeFusedMatmulKernel(s, "matmul_0");
  std::vector<Buf*> args = {&x, &w};
  if (s.bias) args.push_back(&bias);
  args.push_back(&out);
  RunKernel(*kernel, args);
  const std::string diff = Compare(out.data, ReferenceMatmul(s, x, w, s.bias ? &bias : nullptr));
  return diff.empty() ? "" : kernel->Describe() + ": " + diff;
}

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
  const std::string d = MakeFusedMatmulKernel(s, "matmul_0")->Describe();
  EXPECT_EQ(d.rfind("oneDNN matmul (", 0), 0u) << d;
  EXPECT_NE(d.find(") + bias + relu post-op"), std::string::npos) << d;
  s.bias = false;
  s.activation = MatmulActivation::kGeluTanh;
  EXPECT_NE(MakeFusedMatmulKernel(s, "m")->Describe().find(") + gelu_tanh post-op"), std::string::npos);
}

void CheckMatmulSgd(const Dims& x_dims, int64_t n, bool keep_old, std::mt19937& rng) {
  const int64_t k = x_dims.back(), m = Numel(x_dims) / k;
  Buf x = Random(x_dims, rng), dy = Random({m, n}, rng), lr{{1}, {0.25f}}, w = Random({k, n}, rng);
  const Buf w0 = w;
  Buf w_old = Zeros({k, n});
  auto kernel = MakeMatmulSgdKernel(x_dims, {k, n}, "matmul_sgd_0", keep_old);
  // W as read and W as written are one buffer.
  std::vector<Buf*> args = {&x, &dy, &lr, &w};
  if (keep_old) args.push_back(&w_old);
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
  auto kernel = MakeMatmulSgdKernel(x_dims, {k, n}, "matmul_sgd_0", keep_old, ComputeType::kBF16);
  std::vector<Buf*> args = {&x, &dy, &lr, &w};
  if (keep_old) args.push_back(&w_old);
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
  auto kernel = MakeMatmulSgdKernel(x_dims, {k, n}, "matmul_sgd_0", false, ComputeType::kBF16, HostIsa(),
                                    DataType::kBF16);
  EXPECT_NE(kernel->Describe().find("lr * X rounded to bf16"), std::string::npos) << kernel->Describe();
  EXPECT_NE(kernel->Describe().find("dY stored in bf16"), std::string::npos) << kernel->Describe();
  runtime::BufferView args[] = {{x.data.data()}, {dy16.data()}, {lr.data.data()}, {w.data.data()}, {w.data.data()}};
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
  const std::string d = MakeMatmulSgdKernel({4, 8}, {8, 3}, "s", true)->Describe();
  EXPECT_NE(d.find(") W -= lr * X^T dY: weight gradient and sgd step in one primitive, the old W copied out first"),
            std::string::npos)
      << d;
}

// ---- fused conv -----------------------------------------------------------------------

struct ConvCase {
  Dims input, filter;
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = false;
  MatmulActivation act = MatmulActivation::kNone;
};

FusedConvSpec SpecOf(const ConvCase& c) {
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

// conv2d -> elementwise_add(Y=[O], axis 1) -> activation on the framework's
// reference kernels, in double.
Tensor ReferenceConv(const ConvCase& c, const Buf& x, const Buf& f, const Buf& bias) {
  std::vector<proto::OpDesc> ops = {OpBuilder("conv2d")
                                        .In("Input", {"x"})
                                        .In("Filter", {"f"})
                                        .Out("Output", {"conv"})
                                        .Attr("strides", std::vector<int64_t>{c.stride, c.stride})
                                        .Attr("paddings", std::vector<int64_t>{c.padding, c.padding})
                                        .Attr("dilations", std::vector<int64_t>{c.dilation, c.dilation})
                                        .Attr("groups", c.groups)
                                        .Build()};
  std::string last = "conv";
  if (c.bias) {
    ops.push_back(
        OpBuilder("elementwise_add").In("X", {last}).In("Y", {"b"}).Out("Out", {"add"}).Attr("axis", int64_t{1}).Build());
    last = "add";
  }
  if (c.act != MatmulActivation::kNone) {
    OpBuilder act(c.act == MatmulActivation::kRelu ? "relu" : "gelu");
    if (c.act != MatmulActivation::kRelu) act.Attr("approximate", c.act == MatmulActivation::kGeluTanh);
    ops.push_back(act.In("X", {last}).Out("Out", {"act"}).Build());
    last = "act";
  }
  auto tensor = [](const Buf& b) { return test::CastTo(test::FloatTensor(b.dims, b.data), DataType::kFP64); };
  auto scope = test::RunOps(ops, {{"x", tensor(x)}, {"f", tensor(f)}, {"b", tensor(bias)}}, /*use_onednn=*/false);
  Tensor out;
  out.CopyFrom(scope->GetVar(last)->Get());
  return out;
}

std::string CheckFusedConv(const ConvCase& c, std::mt19937& rng) {
  Buf x = Random(c.input, rng), f = Random(c.filter, rng), bias = Random({c.filter[0]}, rng);
  const Tensor want = ReferenceConv(c, x, f, bias);
  Buf out = Zeros(want.dims());
  auto kernel = MakeFusedConvKernel(SpecOf(c), "conv_0");
  std::vector<Buf*> args = {&x, &f};
  if (c.bias) args.push_back(&bias);
  args.push_back(&out);
  RunKernel(*kernel, args);
  const std::vector<double> w(want.data<double>(), want.data<double>() + want.numel());
  const std::string diff = Compare(out.data, w);
  return diff.empty() ? "" : kernel->Describe() + ": " + diff;
}

TEST(FusedConvKernelTest, MatchesFrameworkReferenceKernels) {
  std::mt19937 rng(14);
  for (int64_t batch : {1, 3}) {
    for (int64_t groups : {1, 2}) {
      for (int64_t stride : {1, 2}) {
        for (int64_t padding : {0, 1, 2}) {
          for (int mode = 0; mode < 4; ++mode) {  // bias x relu
            ConvCase c{{batch, 4, 7, 9}, {6, 4 / groups, 3, 3}, stride, padding, 1, groups};
            c.bias = mode & 1;
            c.act = (mode & 2) ? MatmulActivation::kRelu : MatmulActivation::kNone;
            EXPECT_EQ(CheckFusedConv(c, rng), "") << "batch " << batch << " groups " << groups << " stride " << stride
                                                  << " padding " << padding << " mode " << mode;
          }
        }
      }
    }
  }
}

TEST(FusedConvKernelTest, DilationOneByOneGeluAndWideChannels) {
  std::mt19937 rng(15);
  std::vector<ConvCase> cases = {
      {{2, 3, 11, 5}, {5, 3, 3, 2}, 1, 2, 2, 1, true, MatmulActivation::kRelu},
      {{1, 16, 6, 6}, {32, 16, 1, 1}, 1, 0, 1, 1, true, MatmulActivation::kNone},
      {{2, 16, 9, 9}, {16, 8, 3, 3}, 2, 1, 1, 2, true, MatmulActivation::kRelu},
      {{1, 8, 5, 7}, {4, 8, 3, 3}, 1, 1, 1, 1, true, MatmulActivation::kGelu},
      {{1, 8, 5, 7}, {4, 8, 3, 3}, 1, 1, 1, 1, false, MatmulActivation::kGeluTanh},
  };
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(CheckFusedConv(cases[i], rng), "") << "case " << i;
  const std::string d = MakeFusedConvKernel(SpecOf(cases[0]), "conv_0")->Describe();
  EXPECT_EQ(d.rfind("oneDNN convolution (", 0), 0u) << d;
  EXPECT_NE(d.find(") + bias + relu post-op"), std::string::npos) << d;
}

TEST(FusedConvKernelTest, ShapesThatMakeNoConvolutionAreNamed) {
  ConvCase c{{1, 4, 7, 9}, {6, 3, 3, 3}};  // 4 input channels, filter wants 3
  try {
    MakeFusedConvKernel(SpecOf(c), "conv_0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("input [1,4,7,9] filter [6,3,3,3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected input [N,C,H,W], filter [O,C/groups,KH,KW]"), std::string::npos);
  }
  FusedMatmulSpec m;
  m.x_dims = Dims{3, 4};
  m.w_dims = Dims{5, 6};
  const std::string matmul_error = test::ErrorOf([&] { MakeFusedMatmulKernel(m, "m"); });
  EXPECT_NE(matmul_error.find("x [3,4] w [5,6] do not multiply: expected w [4,N]"), std::string::npos)
      << matmul_error;
  EXPECT_NE(test::ErrorOf([&] { MakeMatmulSgdKernel({3, 4}, {5, 6}, "s"); }).find("expects w [4,N], got [5,6]"),
            std::string::npos);
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
  MakeFusedMatmulKernel(m, "matmul_0");
  MakeFusedConvKernel(c, "conv_0");
  MakeMatmulSgdKernel({13, 29}, {29, 31}, "matmul_sgd_0");
  const onednn::PrimitiveCacheStats before = cache.stats();
  MakeFusedMatmulKernel(m, "matmul_1");
  MakeFusedConvKernel(c, "conv_1");
  MakeMatmulSgdKernel({13, 29}, {29, 31}, "matmul_sgd_1");
  EXPECT_EQ(cache.stats().hits, before.hits + 3);
  EXPECT_EQ(cache.stats().misses, before.misses);
  EXPECT_TRUE(Listed("matmul f32 [13,29]x[29,31] scale=1 +bias +elu +linear(alpha=1)"));
  EXPECT_TRUE(Listed("matmul f32 [13,29]x[13,31] trans_a scale=-1 +sum"));
  EXPECT_TRUE(Listed("conv_fwd f32 [2,4,9,9]x[8,4,3,3] strides=[1,1] dilations=[0,0] pad_l=[1,1] pad_r=[1,1] "
                     "+bias +elu +linear(alpha=1)"));
}

// Scratchpads, reorder buffers and matmul_sgd's lr * dY come from the caching
// allocator for one run and go back right after: allocations grow during
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
  auto conv = MakeFusedConvKernel(SpecOf(cc), "conv_0");
  EXPECT_GE(allocations_of(*conv, {&x, &f, &b, &y}), 2) << conv->Describe();  // reordered src and dst at least

  Buf mx = Random({64, 32}, rng), dy = Random({64, 48}, rng), lr{{1}, {0.1f}}, w = Random({32, 48}, rng);
  auto sgd = MakeMatmulSgdKernel({64, 32}, {32, 48}, "matmul_sgd_0");
  EXPECT_GE(allocations_of(*sgd, {&mx, &dy, &lr, &w, &w}), 1);  // lr * dY

  // A matmul whose primitive wants a scratchpad takes one per run.
  FusedMatmulSpec m;
  m.x_dims = Dims{256, 1024};
  m.w_dims = Dims{1024, 512};
  onednn::MatmulHandler h(PrimitiveCache::Global(), m.x_dims, false, m.w_dims, false, 1.f);
  ASSERT_TRUE(h.AcquireForwardPrimitive());
  const size_t scratch_bytes = h.entry().pd.scratchpad_desc().get_size();
  RecordProperty("matmul_scratchpad_bytes", std::to_string(scratch_bytes));
  const bool wants_scratch = scratch_bytes > 0;
  Buf a = Random(m.x_dims, rng), bw = Random(m.w_dims, rng), out = Zeros({256, 512});
  auto matmul = MakeFusedMatmulKernel(m, "matmul_0");
  EXPECT_EQ(allocations_of(*matmul, {&a, &bw, &out}), wants_scratch ? 1 : 0) << matmul->Describe();
}

// One kernel (one cached primitive with its reorders) run by 4 threads at
// once on their own buffers gives each the single-threaded result.
TEST(OneDnnJitKernelsTest, FourThreadsRunOneKernelConcurrently) {
  const ConvCase cc{{3, 8, 11, 9}, {16, 4, 3, 3}, 2, 1, 1, 2, true, MatmulActivation::kRelu};
  auto conv = MakeFusedConvKernel(SpecOf(cc), "conv_0");
  FusedMatmulSpec ms;
  ms.x_dims = Dims{33, 65};
  ms.w_dims = Dims{65, 47};
  ms.bias = true;
  ms.activation = MatmulActivation::kGelu;
  auto matmul = MakeFusedMatmulKernel(ms, "matmul_0");
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
