// Numeric parity of the oneDNN kernels with their reference kernels, forward
// and grad, on odd shapes (sizes 1, 7, 17, 33, odd channel counts): matmul,
// conv with stride/padding/dilation/groups, both pool types. Each case also
// checks that the oneDNN kernel did the work (its run counter moved), so a
// silent fallback to the reference cannot pass. The other ops, random shapes
// and the cache: onednn_parity_eltwise_test.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/onednn/primitive_cache.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/onednn_parity_test_util.h"

namespace kiln {
namespace {

using namespace onednn_parity_test;  // the helpers shared by the split files (tests/onednn_parity_test_util.h)

// ---- registry -------------------------------------------------------------------------------

TEST(OneDnnParityTest, KernelsAreAttachedToEveryListedOp) {
  const std::vector<std::string> want = {
      "batch_norm", "batch_norm_grad", "concat", "conv2d", "conv2d_grad", "elementwise_add", "elementwise_div",
      "elementwise_mul", "elementwise_sub", "exp", "exp_grad", "gelu", "gelu_grad", "layer_norm", "layer_norm_grad",
      "log_softmax", "log_softmax_grad", "matmul", "matmul_grad", "mean", "pool2d", "pool2d_grad", "reduce_mean",
      "reduce_sum", "relu", "relu_grad", "scale", "scale_grad", "sigmoid", "sigmoid_grad", "softmax", "softmax_grad",
      "split_grad", "sum", "tanh", "tanh_grad"};
  EXPECT_EQ(OneDnnKernelOps(), want);
  for (const auto& type : want) {
    const OpInfo* info = OpRegistry::Global().Find(type);
    ASSERT_NE(info, nullptr) << type << " is not registered";
    EXPECT_TRUE(static_cast<bool>(info->onednn_kernel)) << type;
  }
  EXPECT_FALSE(static_cast<bool>(OpRegistry::Global().Get("reshape2").onednn_kernel));
}

// ---- matmul ---------------------------------------------------------------------------------------

struct MatmulShapes {
  Dims x, y;  // as op(X) is [.., M, K] and op(Y) [.., K, N] before transposes
  Expect grad;  // whether matmul_grad runs on oneDNN
};

Dims Transposed(Dims d) {
  std::swap(d[d.size() - 1], d[d.size() - 2]);
  return d;
}

TEST(OneDnnParityTest, Matmul) {
  const std::vector<MatmulShapes> shapes = {
      {{1, 1}, {1, 1}, Expect::kOneDnn},
      {{7, 17}, {17, 33}, Expect::kOneDnn},
      {{1, 33}, {33, 1}, Expect::kOneDnn},
      {{33, 7}, {7, 17}, Expect::kOneDnn},
      {{3, 7, 17}, {17, 5}, Expect::kOneDnn},          // batch folds into rows
      {{2, 3, 7, 17}, {1, 17, 5}, Expect::kOneDnn},    // Y batch of 1s
      {{2, 3, 7, 17}, {2, 3, 17, 5}, Expect::kOneDnn},
      {{5, 1, 7}, {5, 7, 17}, Expect::kOneDnn},
      {{2, 1, 7, 17}, {1, 3, 17, 5}, Expect::kFallback},  // both broadcast: grads need sums
      {{7, 17}, {3, 17, 5}, Expect::kFallback},           // X broadcast over Y's batch
  };
  for (const auto& s : shapes) {
    for (bool tx : {false, true}) {
      for (bool ty : {false, true}) {
        for (float alpha : {1.0f, 0.5f}) {
          const std::map<std::string, Tensor> in = {{"x", Rand(tx ? Transposed(s.x) : s.x)},
                                                    {"y", Rand(ty ? Transposed(s.y) : s.y)}};
          const proto::OpDesc op = OpBuilder("matmul")
                                       .In("X", {"x"})
                                       .In("Y", {"y"})
                                       .Out("Out", {"out"})
                                       .Attr("transpose_X", tx)
                                       .Attr("transpose_Y", ty)
                                       .Attr("alpha", alpha)
                                       .Build();
          ExpectParity(op, in);
          // Y@GRAD sums over X's batch when Y has none: that folds into one
          // product only with X untransposed.
          const bool y_sums = Numel(Dims(s.x.begin(), s.x.end() - 2)) > 1 && Numel(Dims(s.y.begin(), s.y.end() - 2)) == 1;
          const Expect grad = (y_sums && tx) ? Expect::kFallback : s.grad;
          ExpectGradParity(op, in, Rng(), grad);
        }
      }
    }
  }
}

TEST(OneDnnParityTest, MatmulGradOfOneInput) {
  const std::map<std::string, Tensor> in = {{"x", Rand({3, 7, 17})}, {"y", Rand({17, 33})}};
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"x@GRAD"});
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"y@GRAD"});
}

TEST(OneDnnParityTest, LargerMatmul) {
  const std::map<std::string, Tensor> in = {{"x", Rand({64, 256})}, {"y", Rand({256, 129})}};
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectParity(op, in, Expect::kOneDnn, {1e-4, 1e-4});
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {1e-4, 1e-4});
}

TEST(OneDnnParityTest, Fp64FallsBack) {
  const std::map<std::string, Tensor> in = {{"x", test::CastTo(Rand({7, 17}), DataType::kFP64)},
                                            {"y", test::CastTo(Rand({17, 5}), DataType::kFP64)}};
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectParity(op, in, Expect::kFallback, {0, 0});
  const proto::OpDesc relu = OpBuilder("relu").In("X", {"x"}).Out("Out", {"out"}).Build();
  ExpectParity(relu, {{"x", in.at("x")}}, Expect::kFallback, {0, 0});
}

// ---- conv2d ----------------------------------------------------------------------------------------

struct ConvCase {
  Dims input;   // NCHW
  Dims filter;  // OIHW (I = C / groups)
  std::vector<int64_t> strides, paddings, dilations;
  int64_t groups;
};

TEST(OneDnnParityTest, Conv2d) {
  const std::vector<ConvCase> cases = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{2, 3, 7, 7}, {5, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{2, 3, 7, 7}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{1, 3, 17, 17}, {7, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
      {{2, 1, 17, 7}, {3, 1, 3, 2}, {3, 2}, {2, 1}, {1, 1}, 1},   // strides that skip the last rows
      {{1, 3, 17, 17}, {5, 3, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 1},  // dilation
      {{2, 5, 7, 9}, {3, 5, 2, 3}, {2, 1}, {0, 1}, {2, 1}, 1},
      {{2, 4, 7, 7}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},    // groups
      {{1, 6, 9, 9}, {9, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 3},
      {{2, 3, 7, 7}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},    // depthwise
      {{1, 33, 7, 7}, {17, 33, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}, // 1x1
      {{3, 7, 1, 17}, {5, 7, 1, 3}, {1, 2}, {0, 1}, {1, 1}, 1},
      // LeNet's layers at odd sizes: filter gradients that run channels-last.
      {{3, 1, 13, 11}, {6, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
      {{3, 6, 9, 7}, {16, 6, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
  };
  for (const auto& c : cases) {
    const std::map<std::string, Tensor> in = {{"in", Rand(c.input)}, {"f", Rand(c.filter)}};
    const proto::OpDesc op = OpBuilder("conv2d")
                                 .In("Input", {"in"})
                                 .In("Filter", {"f"})
                                 .Out("Output", {"out"})
                                 .Attr("strides", c.strides)
                                 .Attr("paddings", c.paddings)
                                 .Attr("dilations", c.dilations)
                                 .Attr("groups", c.groups)
                                 .Build();
    ExpectParity(op, in);
    ExpectGradParity(op, in, Rng());
    ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"f@GRAD"});
    ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"in@GRAD"});
  }
}

// Each convolution primitive works blocked or channels-last, whichever gets
// the higher ISA: on this host oneDNN 2.6 runs LeNet's second filter
// gradient blocked at jit:avx2 and channels-last at jit:avx512_core.
TEST(ConvLayoutTest, FilterGradientRunsAtLeastAtTheBlockedLayoutsIsa) {
  EXPECT_GT(onednn::IsaRank("jit:avx512_core"), onednn::IsaRank("jit:avx2"));
  EXPECT_GT(onednn::IsaRank("brgconv:avx512_core_amx"), onednn::IsaRank("jit:avx512_core_bf16"));
  EXPECT_GT(onednn::IsaRank("jit:avx2"), onednn::IsaRank("x64:gemm:jit"));
  EXPECT_LT(onednn::IsaRank("ref:any"), onednn::IsaRank("x64:gemm:jit"));
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  for (const auto& shapes : std::vector<std::pair<Dims, Dims>>{{{64, 6, 14, 14}, {16, 6, 5, 5}},
                                                               {{64, 1, 28, 28}, {6, 1, 5, 5}},
                                                               {{8, 16, 9, 9}, {32, 16, 3, 3}}}) {
    const Dims& in = shapes.first;  // not a structured binding: lambdas below capture it
    const Dims& f = shapes.second;
    onednn::PrimitiveCache cache(8);
    onednn::ConvHandler h(cache, onednn::Settings{}, in, f, {1, 1}, {2, 2}, {1, 1}, 1);
    ASSERT_TRUE(h.valid());
    Tensor d_filter(DataType::kFP32, f);
    ASSERT_TRUE(h.RunBackwardWeights(Rand(in), Rand(h.output_dims()), &d_filter));
    const std::string chosen = h.acquired_entry()->impl;
    // Each layout's implementation, straight from oneDNN.
    auto impl = [&](memory::format_tag act) {
      auto md = [](const Dims& d, memory::format_tag tag) {
        return memory::desc(memory::dims(d.begin(), d.end()), memory::data_type::f32, tag);
      };
      const memory::dims s{1, 1}, p{2, 2};
      const memory::desc src = md(in, act), dst = md(h.output_dims(), act), wei = md(f, memory::format_tag::any);
      dnnl::convolution_forward::primitive_desc fwd(
          {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, wei, dst, s, p, p}, engine);
      return dnnl::convolution_backward_weights::primitive_desc(
                 {dnnl::algorithm::convolution_direct, src, wei, dst, s, p, p}, engine, fwd)
          .impl_info_str();
    };
    const std::string blocked = impl(memory::format_tag::any), nhwc = impl(memory::format_tag::nhwc);
    // Plain NCHW (gemm-based) only where both get the reference implementation.
    const int best = std::max(onednn::IsaRank(blocked), onednn::IsaRank(nhwc));
    EXPECT_EQ(onednn::IsaRank(chosen), best >= 0 ? best : std::max(best, onednn::IsaRank(impl(memory::format_tag::nchw))))
        << chosen << " against blocked " << blocked << " and channels-last " << nhwc;
  }
}

// ---- pool2d ----------------------------------------------------------------------------------------

TEST(OneDnnParityTest, Pool2d) {
  struct PoolCase {
    Dims x;
    std::vector<int64_t> ksize, strides, paddings;
  };
  const std::vector<PoolCase> cases = {
      {{1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 0}},
      {{2, 3, 7, 7}, {2, 2}, {2, 2}, {0, 0}},
      {{2, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1}},
      {{1, 5, 17, 17}, {3, 3}, {1, 1}, {1, 1}},
      {{1, 7, 17, 9}, {2, 3}, {3, 2}, {1, 0}},  // strides that skip the last rows
      {{3, 1, 7, 33}, {3, 2}, {2, 3}, {2, 1}},
      {{1, 3, 1, 7}, {1, 3}, {1, 1}, {0, 1}},
  };
  for (const auto& c : cases) {
    for (const std::string type : {"max", "avg"}) {
      for (bool exclusive : {true, false}) {
        if (type == "max" && !exclusive) continue;
        for (bool global : {false, true}) {
          const std::map<std::string, Tensor> in = {{"x", Rand(c.x)}};
          const proto::OpDesc op = OpBuilder("pool2d")
                                       .In("X", {"x"})
                                       .Out("Out", {"out"})
                                       .Attr("pooling_type", type)
                                       .Attr("ksize", c.ksize)
                                       .Attr("strides", c.strides)
                                       .Attr("paddings", c.paddings)
                                       .Attr("exclusive", exclusive)
                                       .Attr("global_pooling", global)
                                       .Build();
          ExpectParity(op, in);
          ExpectGradParity(op, in, Rng());
        }
      }
    }
  }
}

// Max pooling routes each window's gradient to its maximum; with distinct
// values every window has one, and overlapping windows add up.
TEST(OneDnnParityTest, MaxPoolGradWithOverlappingWindows) {
  Tensor x(DataType::kFP32, {1, 2, 6, 6});
  float* p = x.mutable_data<float>();
  std::vector<int> perm(72);
  for (int i = 0; i < 72; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), Rng());
  for (int i = 0; i < 72; ++i) p[i] = static_cast<float>(perm[i]) * 0.25f - 9.0f;
  const proto::OpDesc op = OpBuilder("pool2d")
                               .In("X", {"x"})
                               .Out("Out", {"out"})
                               .Attr("pooling_type", std::string("max"))
                               .Attr("ksize", std::vector<int64_t>{3, 3})
                               .Attr("strides", std::vector<int64_t>{1, 1})
                               .Attr("paddings", std::vector<int64_t>{1, 1})
                               .Build();
  ExpectParity(op, {{"x", x}}, Expect::kOneDnn, {0, 0});
  ExpectGradParity(op, {{"x", x}}, Rng());
}

}  // namespace
}  // namespace kiln
