// Resize of the matmul kernels of the JIT (compiler/kernels/onednn/
// onednn_kernels.h, compiler/kernels/gemv_kernels.h) and of the framework op
// kernel (compiler/kernels/onednn/op_kernel.h): a kernel made for one shape,
// resized to others (M of 1, odd, with tails, several leading dims), runs as
// a kernel made for the new shape and as the double-precision reference;
// dims that change what the kernel was made for (K, the weight, a mismatched
// output) are refused with the reason. Also the cost of a Resize, printed.
// Conv and batch norm: onednn_conv_resize_test.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <random>

#include "compiler/kernels/gemv_kernels.h"
#include "compiler/kernels/onednn/batch_norm_kernels.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/kernels/onednn/op_kernel.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "tests/bf16_util.h"
#include "tests/onednn_jit_kernels_test_util.h"
#include "tests/resize_test_util.h"

namespace kiln::jit {
namespace {

using namespace resize_test;  // NOLINT
using onednn_jit_kernels_test::Buf;
using onednn_jit_kernels_test::Compare;
using onednn_jit_kernels_test::ReferenceMatmul;

int64_t N(const FusedMatmulSpec& s) { return s.transpose_w ? s.w_dims[0] : s.w_dims[1]; }

// X, W[, bias], Out for `s`, X and W in their dtypes.
std::vector<Arg> MatmulArgs(const FusedMatmulSpec& s, std::mt19937& rng) {
  std::vector<Arg> a = {RandomArg(s.x_dims, s.x_dtype, rng), RandomArg(s.w_dims, s.w_dtype, rng)};
  if (s.bias) a.push_back(RandomArg({N(s)}, DataType::kFP32, rng));
  Dims out = s.x_dims;
  out.back() = N(s);
  a.push_back(ZeroArg(out));
  return a;
}

std::vector<float> Floats(const Arg& a) {
  const auto* p = reinterpret_cast<const float*>(a.bytes.data());
  return {p, p + Numel(a.dims)};
}

// Resizes a kernel made for `made` to each of `rows` (X's new dims) and
// checks it against a kernel made for them and, in f32, the reference.
void CheckMatmulResizes(const FusedMatmulSpec& made, const std::vector<Dims>& xs, std::mt19937& rng) {
  auto kernel = MakeFusedMatmulKernel(made, onednn::Settings{}, "matmul_0");
  for (const Dims& x : xs) {
    FusedMatmulSpec s = made;
    s.x_dims = x;
    const std::vector<Arg> args = MatmulArgs(s, rng);
    auto fresh = MakeFusedMatmulKernel(s, onednn::Settings{}, "matmul_0");
    EXPECT_EQ(ResizedMatchesFresh(*kernel, *fresh, args), "") << DimsToString(x) << " " << kernel->Describe();
    if (s.compute != ComputeType::kF32 || s.x_dtype != DataType::kFP32 || s.w_dtype != DataType::kFP32) continue;
    std::string why;
    auto resized = kernel->Resize(DimsOf(args), &why);
    ASSERT_NE(resized, nullptr) << why;
    std::vector<Arg> run = args;
    RunOn(*resized, &run);
    Buf xb{x, Floats(args[0])}, wb{s.w_dims, Floats(args[1])}, bb{{N(s)}, s.bias ? Floats(args[2]) : std::vector<float>{}};
    EXPECT_EQ(Compare(Floats(run.back()), ReferenceMatmul(s, xb, wb, s.bias ? &bb : nullptr)), "") << DimsToString(x);
  }
}

const std::vector<Dims> kRows = {{1, 33}, {17, 33}, {144, 33}, {3, 5, 33}, {1, 1, 33}, {64, 33}};

TEST(MatmulResizeTest, ResizedMatmulsMatchFreshKernelsAndTheReference) {
  std::mt19937 rng(21);
  for (int mode = 0; mode < 5; ++mode) {
    FusedMatmulSpec s;
    s.x_dims = {64, 33};
    s.transpose_w = mode == 3;
    s.w_dims = s.transpose_w ? Dims{100, 33} : Dims{33, 100};
    s.bias = mode % 2 == 1;
    s.alpha = mode == 4 ? 0.5f : 1.f;
    s.activation = mode == 1 ? MatmulActivation::kRelu : mode >= 2 ? MatmulActivation::kGelu : MatmulActivation::kNone;
    CheckMatmulResizes(s, kRows, rng);
  }
}

TEST(MatmulResizeTest, Bf16MatmulsResize) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(22);
  for (int mode = 0; mode < 3; ++mode) {
    FusedMatmulSpec s;
    s.x_dims = {64, 33};
    s.w_dims = {33, 100};
    s.bias = true;
    s.activation = MatmulActivation::kGeluTanh;
    s.compute = ComputeType::kBF16;
    if (mode >= 1) s.w_dtype = DataType::kBF16;  // a bf16 weight copy
    if (mode == 2) s.x_dtype = DataType::kBF16;  // X stored in bf16
    CheckMatmulResizes(s, kRows, rng);
  }
}

TEST(MatmulResizeTest, RefusesAnotherKOrWeightOrOutput) {
  FusedMatmulSpec s;
  s.x_dims = {8, 16};
  s.w_dims = {16, 24};
  s.bias = true;
  auto kernel = MakeFusedMatmulKernel(s, onednn::Settings{}, "matmul_0");
  std::string why;
  EXPECT_NE(kernel->Resize({{2, 3, 16}, {16, 24}, {24}, {2, 3, 24}}, &why), nullptr) << why;
  EXPECT_EQ(kernel->Resize({{8, 17}, {17, 24}, {24}, {8, 24}}, &why), nullptr);
  EXPECT_EQ(why, "matmul_0: argument 1 must be [16,24], got [17,24] (the weight and bias keep their dims)");
  EXPECT_EQ(kernel->Resize({{8, 17}, {16, 24}, {24}, {8, 24}}, &why), nullptr);
  EXPECT_EQ(why, "matmul_0: X must be [..., 16] (the K it was made for) without a zero dim, got [8,17]");
  EXPECT_EQ(kernel->Resize({{8, 16}, {16, 24}, {24}, {9, 24}}, &why), nullptr);
  EXPECT_EQ(why, "matmul_0: Out must hold the 8 x 24 product of X [8,16], got [9,24]");
  EXPECT_EQ(kernel->Resize({{0, 16}, {16, 24}, {24}, {0, 24}}, &why), nullptr);
  EXPECT_EQ(why, "matmul_0: X must be [..., 16] (the K it was made for) without a zero dim, got [0,16]");
  EXPECT_EQ(kernel->Resize({{8, 16}, {16, 24}, {8, 24}}, &why), nullptr);
  EXPECT_EQ(why, "matmul_0: expected dims for 4 arguments, got 3");
}

// X, dY, lr, W -> [W_old,] scaled, W (W read and written: one buffer).
void CheckSgdResizes(const Dims& made_x, int64_t n, bool keep_old, ComputeType compute, std::mt19937& rng) {
  const int64_t k = made_x.back();
  auto kernel = MakeMatmulSgdKernel(made_x, {k, n}, onednn::Settings{}, "matmul_sgd_0", keep_old, compute);
  for (const Dims& x : std::vector<Dims>{{1, k}, {17, k}, {2, 9, k}, {144, k}}) {
    Dims dy = x;
    dy.back() = n;
    const MatmulSgdScratch scratch = MatmulSgdScratchOf(x, {k, n}, compute);
    std::vector<Arg> bufs = {RandomArg(x, DataType::kFP32, rng), RandomArg(dy, DataType::kFP32, rng),
                             RandomArg({1}, DataType::kFP32, rng, 0.1f, 0.5f), RandomArg({k, n}, DataType::kFP32, rng),
                             ZeroArg({scratch.numel}, scratch.dtype), ZeroArg({k, n})};
    std::vector<int> bind = {0, 1, 2, 3, 4, 3};
    if (keep_old) bind = {0, 1, 2, 3, 5, 4, 3};
    auto fresh = MakeMatmulSgdKernel(x, {k, n}, onednn::Settings{}, "matmul_sgd_0", keep_old, compute);
    EXPECT_EQ(ResizedMatchesFresh(*kernel, *fresh, bufs, bind), "") << DimsToString(x) << " " << kernel->Describe();
  }
  std::string why;
  const Dims wrong_w = {k + 1, n};
  std::vector<Dims> dims = {{4, k}, {4, n}, {1}, wrong_w};
  if (keep_old) dims.push_back(wrong_w);
  dims.push_back({MatmulSgdScratchOf({4, k}, {k, n}, compute).numel});
  dims.push_back(wrong_w);
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_EQ(why, "matmul_sgd_0: argument 3 must be " + DimsToString({k, n}) + ", got " + DimsToString(wrong_w) +
                     " (W keeps its dims)");
  for (Dims* d : {&dims[3], &dims.back()}) *d = {k, n};
  if (keep_old) dims[4] = {k, n};
  dims[keep_old ? 5 : 4] = {7};
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_NE(why.find("the scaled operand's buffer must hold"), std::string::npos) << why;
  dims[keep_old ? 5 : 4] = {MatmulSgdScratchOf({4, k}, {k, n}, compute).numel};
  dims[1] = {5, n};
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_EQ(why, "matmul_sgd_0: dY must be [..., " + std::to_string(n) + "] with the 4 rows of X, got " +
                     DimsToString({5, n}));
}

TEST(MatmulSgdResizeTest, ResizedStepsMatchFreshKernels) {
  std::mt19937 rng(23);
  for (bool keep_old : {false, true}) {
    CheckSgdResizes({32, 16}, 40, keep_old, ComputeType::kF32, rng);  // lr scales X
    CheckSgdResizes({32, 40}, 16, keep_old, ComputeType::kF32, rng);  // lr scales dY
  }
}

TEST(MatmulSgdResizeTest, Bf16StepsResize) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(24);
  for (bool keep_old : {false, true}) CheckSgdResizes({32, 16}, 40, keep_old, ComputeType::kBF16, rng);
}

TEST(GemvResizeTest, ServesOneRowOnlyAndSaysWhy) {
  auto mm = MakeGemvMatmulKernel(16, 8, /*bias=*/true, /*relu=*/false, "matmul_0");
  std::string why;
  EXPECT_NE(mm->Resize({{1, 1, 16}, {16, 8}, {8}, {1, 1, 8}}, &why), nullptr) << why;
  EXPECT_EQ(mm->Resize({{2, 16}, {16, 8}, {8}, {2, 8}}, &why), nullptr);
  EXPECT_EQ(why, "matmul_0: a batch-1 kernel: X must be one row of 16, got [2,16] (more rows take a oneDNN matmul, "
                 "compiled for them)");
  auto sgd = MakeGemvGradSgdKernel(16, 8, /*with_dx=*/true, "gemv_sgd_0");
  EXPECT_NE(sgd->Resize({{1, 16}, {1, 8}, {1}, {16, 8}, {1, 16}, {16, 8}}, &why), nullptr) << why;
  EXPECT_EQ(sgd->Resize({{1, 16}, {1, 8}, {1}, {16, 9}, {1, 16}, {16, 9}}, &why), nullptr);
  EXPECT_EQ(why, "gemv_sgd_0: W must stay [16, 8], got [16,9]");
}

TEST(FrameworkOpKernelResizeTest, ReadsDimsAtRunTimeAndChecksSizesFromAttributes) {
  const OpRegistry& reg = OpRegistry::Global();
  std::vector<std::string> names;
  int num_inputs = 0;
  const proto::OpDesc relu = OpBuilder("relu").In("X", {"x"}).Out("Out", {"y"}).Build();
  FrameworkOpKernel k(relu, reg.Get("relu"), false, onednn::Settings{}, &names, &num_inputs);
  EXPECT_TRUE(k.ReadsDimsAtRunTime());
  std::mt19937 rng(25);
  for (const Dims& d : std::vector<Dims>{{1}, {3, 17}, {2, 5, 7}}) {
    std::vector<Arg> a = {RandomArg(d, DataType::kFP32, rng), ZeroArg(d)};
    RunOn(k, &a);
    const std::vector<float> x = Floats(a[0]), y = Floats(a[1]);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], std::max(0.f, x[i])) << DimsToString(d);
  }
  std::string why;
  EXPECT_NE(k.Resize({{4, 4}, {4, 4}}, &why), nullptr);
  // reshape2 to a fixed [4, 9]: other inputs give other dims, and a buffer
  // of the old ones is an error, not a silent copy.
  const proto::OpDesc reshape =
      OpBuilder("reshape2").In("X", {"x"}).Out("Out", {"y"}).Attr("shape", std::vector<int64_t>{4, 9}).Build();
  FrameworkOpKernel r(reshape, reg.Get("reshape2"), false, onednn::Settings{}, &names, &num_inputs);
  std::vector<Arg> ok = {RandomArg({3, 12}, DataType::kFP32, rng), ZeroArg({4, 9})};
  RunOn(r, &ok);
  EXPECT_EQ(ok[0].bytes, ok[1].bytes);
  std::vector<Arg> bad = {RandomArg({3, 12}, DataType::kFP32, rng), ZeroArg({6, 6})};
  try {
    RunOn(r, &bad);
    ADD_FAILURE() << "no error for a reshape2 output bound with other dims";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reshape2 output Out ('y'): the op makes it [4,9] for these inputs, but the "
                                         "buffer bound to it is [6,6]"),
              std::string::npos)
        << e.what();
  }
}

// Microseconds per Resize to a new shape (its primitive created) and to a
// shape seen before (a lookup in the primitive cache), for 8 shapes no
// other test uses; printed, not checked (the machine is shared).
void ReportResizeCost(const char* what, const runtime::Kernel& kernel,
                      const std::function<std::vector<Dims>(int64_t)>& dims_of) {
  using Clock = std::chrono::steady_clock;
  std::string why;
  const int kShapes = 8;
  double us[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kShapes; ++i) ASSERT_NE(kernel.Resize(dims_of(i), &why), nullptr) << why;
    us[pass] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kShapes;
  }
  std::cout << what << " Resize: " << us[0] << " us for a new shape, " << us[1] << " us for a shape seen before\n";
}

TEST(MatmulResizeTest, ReportsTheCostOfAResize) {
  FusedMatmulSpec s;
  s.x_dims = {64, 512};
  s.w_dims = {512, 512};
  s.bias = true;
  s.activation = MatmulActivation::kGelu;
  auto mm = MakeFusedMatmulKernel(s, onednn::Settings{}, "matmul_0");
  ReportResizeCost("matmul 512x512 + bias + gelu", *mm, [](int64_t i) {
    return std::vector<Dims>{{1000 + 7 * i, 512}, {512, 512}, {512}, {1000 + 7 * i, 512}};
  });
  auto sgd = MakeMatmulSgdKernel({64, 512}, {512, 256}, onednn::Settings{}, "matmul_sgd_0");
  ReportResizeCost("matmul_sgd 512x256", *sgd, [](int64_t i) {
    const int64_t m = 1000 + 7 * i;
    return std::vector<Dims>{{m, 512}, {m, 256}, {1}, {512, 256}, {MatmulSgdScratchOf({m, 512}, {512, 256}).numel},
                             {512, 256}};
  });
  FusedConvSpec c;
  c.input_dims = {2, 16, 14, 14};
  c.filter_dims = {32, 16, 3, 3};
  c.strides = c.paddings = c.dilations = {1, 1};
  c.bias = true;
  c.activation = MatmulActivation::kRelu;
  auto conv = MakeFusedConvKernel(c, onednn::Settings{}, "conv_0");
  ReportResizeCost("conv 3x3 16->32", *conv, [](int64_t i) {
    return std::vector<Dims>{{1 + i, 16, 30, 30}, {32, 16, 3, 3}, {32}, {1 + i, 32, 30, 30}};
  });
  BatchNormSpec b;
  b.x_dims = {2, 32, 14, 14};
  b.layout = ActLayout::kNChw16c;
  auto bn = MakeBatchNormKernel(b, onednn::Settings{}, "bn_0");
  ReportResizeCost("batch norm 32 channels nChw16c", *bn, [](int64_t i) {
    const Dims c = {32}, x = {1 + i, 2, 30, 30, 16};
    return std::vector<Dims>{x, c, c, c, c, {1 + i, 32, 30, 30}, c, c, c, c};
  });
}

}  // namespace
}  // namespace kiln::jit
