// compiler/kernels/onednn/onednn_kernels.cc: the fused conv kernel (bias,
// relu/gelu) against the framework's reference kernels, and the shapes that
// make no convolution. The matmul kernels: onednn_jit_kernels_test.
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
  auto kernel = MakeFusedConvKernel(SpecOf(c), onednn::Settings{}, "conv_0");
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
  const std::string d = MakeFusedConvKernel(SpecOf(cases[0]), onednn::Settings{}, "conv_0")->Describe();
  EXPECT_EQ(d.rfind("oneDNN convolution (", 0), 0u) << d;
  EXPECT_NE(d.find(") + bias + relu post-op"), std::string::npos) << d;
}

TEST(FusedConvKernelTest, ShapesThatMakeNoConvolutionAreNamed) {
  ConvCase c{{1, 4, 7, 9}, {6, 3, 3, 3}};  // 4 input channels, filter wants 3
  try {
    MakeFusedConvKernel(SpecOf(c), onednn::Settings{}, "conv_0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("input [1,4,7,9] filter [6,3,3,3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected input [N,C,H,W], filter [O,C/groups,KH,KW]"), std::string::npos);
  }
  FusedMatmulSpec m;
  m.x_dims = Dims{3, 4};
  m.w_dims = Dims{5, 6};
  const std::string matmul_error = test::ErrorOf([&] { MakeFusedMatmulKernel(m, onednn::Settings{}, "m"); });
  EXPECT_NE(matmul_error.find("x [3,4] w [5,6] do not multiply: expected w [4,N]"), std::string::npos)
      << matmul_error;
  EXPECT_NE(test::ErrorOf([&] { MakeMatmulSgdKernel({3, 4}, {5, 6}, onednn::Settings{}, "s"); }).find("expects w [4,N], got [5,6]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::jit
