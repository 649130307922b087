// Numeric parity of every oneDNN kernel with its reference kernel, forward and
// grad, on odd shapes (sizes 1, 7, 17, 33, odd channel counts), conv with
// stride/padding/dilation/groups, both pool types, broadcast elementwise and
// in-place runs. Each case also checks that the oneDNN kernel did the work (its
// run counter moved), so a silent fallback to the reference cannot pass; the
// cases that are meant to fall back check the opposite.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/onednn/primitive_cache.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::RandomTensor;

constexpr double kAtol = 1e-5;
constexpr double kRtol = 1e-4;

enum class Expect { kOneDnn, kFallback };

struct Tolerance {
  double atol = kAtol;
  double rtol = kRtol;
};

std::string Describe(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs) {
  std::string s = op.type() + "(";
  for (const auto& [name, t] : inputs) s += name + ":" + t.ShapeString() + " ";
  for (const auto& a : op.attrs()) s += a.name() + "=" + AttrToString(AttrFromProto(a)) + " ";
  return s + ")";
}

// Runs `op` with the reference kernels and with oneDNN, compares every output
// arg, and checks whether the oneDNN kernel of op.type() handled the call.
void ExpectParity(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs, Expect expect = Expect::kOneDnn,
                  Tolerance tol = {}) {
  SCOPED_TRACE(Describe(op, inputs));
  const int64_t before = OneDnnKernelRuns(op.type());
  auto ref = test::RunOp(op, inputs, /*use_onednn=*/false);
  ASSERT_EQ(OneDnnKernelRuns(op.type()), before) << "use_onednn=false ran the oneDNN kernel";
  auto dnn = test::RunOp(op, inputs, /*use_onednn=*/true);
  EXPECT_EQ(OneDnnKernelRuns(op.type()), before + (expect == Expect::kOneDnn ? 1 : 0))
      << (expect == Expect::kOneDnn ? "the oneDNN kernel fell back to the reference"
                                    : "the oneDNN kernel ran where it should fall back");
  int compared = 0;
  for (const auto& slot : op.outputs()) {
    for (const auto& arg : slot.args()) {
      if (arg == kEmptyVarName) continue;
      const Tensor& want = ref->GetVar(arg)->Get();
      ASSERT_TRUE(want.initialized()) << "reference did not write " << arg;
      const Variable* got = dnn->FindVar(arg);
      ASSERT_TRUE(got != nullptr && got->Get().initialized()) << "oneDNN run did not write " << arg;
      EXPECT_EQ(test::CompareTensors(got->Get(), want, tol.atol, tol.rtol), "") << "output " << slot.name();
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// Builds the grad op of `fwd` with its grad maker, feeds it the forward inputs,
// the forward outputs (computed by the reference) and random gradients for
// every forward output, and checks parity of the grad op. Gradients named in
// `skip` are not requested (their args become @EMPTY@).
void ExpectGradParity(const proto::OpDesc& fwd, const std::map<std::string, Tensor>& inputs, std::mt19937& rng,
                      Expect expect = Expect::kOneDnn, Tolerance tol = {}, const std::set<std::string>& skip = {}) {
  SCOPED_TRACE("grad of " + Describe(fwd, inputs));
  const OpInfo& info = OpRegistry::Global().Get(fwd.type());
  ASSERT_TRUE(info.grad_maker) << fwd.type();
  std::vector<proto::OpDesc> grads = info.grad_maker(fwd);
  ASSERT_EQ(grads.size(), 1u);
  proto::OpDesc g = grads[0];

  auto base = test::RunOp(fwd, inputs, /*use_onednn=*/false);
  std::map<std::string, Tensor> feed = inputs;
  for (const auto& slot : fwd.outputs()) {
    for (const auto& arg : slot.args()) {
      const Tensor& out = base->GetVar(arg)->Get();
      feed[arg].CopyFrom(out);
      feed[GradVarName(arg)] = RandomTensor(out.dims(), DataType::kFP32, rng);
    }
  }
  for (auto& slot : *g.mutable_inputs()) {
    for (auto& arg : *slot.mutable_args()) {
      if (!feed.count(arg)) arg = kEmptyVarName;
    }
  }
  for (auto& slot : *g.mutable_outputs()) {
    for (auto& arg : *slot.mutable_args()) {
      if (skip.count(arg)) arg = kEmptyVarName;
    }
  }
  std::map<std::string, Tensor> grad_feed;
  for (const auto& slot : g.inputs()) {
    for (const auto& arg : slot.args()) {
      if (arg != kEmptyVarName) grad_feed[arg].CopyFrom(feed.at(arg));
    }
  }
  ExpectParity(g, grad_feed, expect, tol);
}

std::mt19937& Rng() {
  static std::mt19937 rng(20261122);
  return rng;
}

Tensor Rand(const Dims& dims, double lo = -1.0, double hi = 1.0) {
  return RandomTensor(dims, DataType::kFP32, Rng(), lo, hi);
}

// Every case must run on oneDNN, including those where oneDNN only has a
// generic implementation that the kernels refuse by default (see
// SlowImplementationsFallBackByDefault): parity of the descriptors is checked
// on all of them.
class OneDnnParityTest : public ::testing::Test {
 protected:
  void SetUp() override { onednn::SetAllowSlowImplementations(true); }
  void TearDown() override { onednn::SetAllowSlowImplementations(false); }
};

// ---- registry -------------------------------------------------------------------------------

TEST_F(OneDnnParityTest, KernelsAreAttachedToEveryListedOp) {
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

TEST_F(OneDnnParityTest, Matmul) {
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

TEST_F(OneDnnParityTest, MatmulGradOfOneInput) {
  const std::map<std::string, Tensor> in = {{"x", Rand({3, 7, 17})}, {"y", Rand({17, 33})}};
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"x@GRAD"});
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"y@GRAD"});
}

TEST_F(OneDnnParityTest, LargerMatmul) {
  const std::map<std::string, Tensor> in = {{"x", Rand({64, 256})}, {"y", Rand({256, 129})}};
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectParity(op, in, Expect::kOneDnn, {1e-4, 1e-4});
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {1e-4, 1e-4});
}

TEST_F(OneDnnParityTest, Fp64FallsBack) {
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

TEST_F(OneDnnParityTest, Conv2d) {
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
  EXPECT_EQ(onednn::IsaRank("ref:any"), 0);
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  for (const auto& shapes : std::vector<std::pair<Dims, Dims>>{{{64, 6, 14, 14}, {16, 6, 5, 5}},
                                                               {{64, 1, 28, 28}, {6, 1, 5, 5}},
                                                               {{8, 16, 9, 9}, {32, 16, 3, 3}}}) {
    const Dims& in = shapes.first;  // not a structured binding: lambdas below capture it
    const Dims& f = shapes.second;
    onednn::PrimitiveCache cache(8);
    onednn::ConvHandler h(cache, in, f, {1, 1}, {2, 2}, {1, 1}, 1);
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
    EXPECT_EQ(onednn::IsaRank(chosen), std::max(onednn::IsaRank(blocked), onednn::IsaRank(nhwc)))
        << chosen << " against blocked " << blocked << " and channels-last " << nhwc;
  }
}

// ---- pool2d ----------------------------------------------------------------------------------------

TEST_F(OneDnnParityTest, Pool2d) {
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
TEST_F(OneDnnParityTest, MaxPoolGradWithOverlappingWindows) {
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

// ---- softmax and layer_norm --------------------------------------------------------------------------

TEST_F(OneDnnParityTest, Softmax) {
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1}, -1}, {{7}, 0}, {{17, 33}, -1}, {{17, 33}, 0}, {{2, 7, 5}, 1}, {{2, 7, 5}, 2}, {{3, 1, 33}, -1}};
  for (const auto& [dims, axis] : cases) {
    const std::map<std::string, Tensor> in = {{"x", Rand(dims, -3, 3)}};
    const proto::OpDesc op = OpBuilder("softmax").In("X", {"x"}).Out("Out", {"out"}).Attr("axis", axis).Build();
    ExpectParity(op, in);
    ExpectGradParity(op, in, Rng());
  }
}

TEST_F(OneDnnParityTest, LayerNorm) {
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1, 1}, 1}, {{7, 17}, 1}, {{2, 7, 33}, 2}, {{2, 7, 33}, 1}, {{17, 3, 1}, 1}};
  for (const auto& [dims, begin] : cases) {
    const int64_t cols = Numel(Dims(dims.begin() + begin, dims.end()));
    for (bool with_scale : {true, false}) {
      for (bool with_bias : {true, false}) {
        for (bool with_stats : {true, false}) {
          std::map<std::string, Tensor> in = {{"x", Rand(dims, -2, 2)}};
          OpBuilder b("layer_norm");
          b.In("X", {"x"}).Out("Y", {"y"}).Attr("begin_norm_axis", begin).Attr("epsilon", 1e-5f);
          if (with_scale) {
            in["s"] = Rand({cols}, 0.5, 1.5);
            b.In("Scale", {"s"});
          }
          if (with_bias) {
            in["b"] = Rand({cols});
            b.In("Bias", {"b"});
          }
          if (with_stats) b.Out("Mean", {"mean"}).Out("Variance", {"var"});
          const proto::OpDesc op = b.Build();
          ExpectParity(op, in);
          ExpectGradParity(op, in, Rng());
        }
      }
    }
  }
}

TEST_F(OneDnnParityTest, LayerNormGradOfScaleOnly) {
  const std::map<std::string, Tensor> in = {{"x", Rand({7, 33})}, {"s", Rand({33})}, {"b", Rand({33})}};
  const proto::OpDesc op = OpBuilder("layer_norm")
                               .In("X", {"x"})
                               .In("Scale", {"s"})
                               .In("Bias", {"b"})
                               .Out("Y", {"y"})
                               .Out("Mean", {"mean"})
                               .Out("Variance", {"var"})
                               .Build();
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"x@GRAD", "b@GRAD"});
  ExpectGradParity(op, in, Rng(), Expect::kOneDnn, {}, {"s@GRAD"});
}

// ---- eltwise -------------------------------------------------------------------------------------------

TEST_F(OneDnnParityTest, Activations) {
  const std::vector<Dims> shapes = {{1}, {7}, {17}, {33}, {3, 7, 33}, {1000}};
  for (const std::string type : {"relu", "tanh", "sigmoid", "exp", "gelu"}) {
    for (bool approximate : {false, true}) {
      if (type != "gelu" && approximate) continue;
      for (const auto& dims : shapes) {
        const std::map<std::string, Tensor> in = {{"x", Rand(dims, -3, 3)}};
        OpBuilder b(type);
        b.In("X", {"x"}).Out("Out", {"out"});
        if (type == "gelu") b.Attr("approximate", approximate);
        const proto::OpDesc op = b.Build();
        ExpectParity(op, in);
        ExpectGradParity(op, in, Rng());
      }
    }
  }
}

TEST_F(OneDnnParityTest, Scale) {
  for (const auto& dims : std::vector<Dims>{{1}, {7}, {17, 33}}) {
    for (bool after : {true, false}) {
      const std::map<std::string, Tensor> in = {{"x", Rand(dims)}};
      const proto::OpDesc op = OpBuilder("scale")
                                   .In("X", {"x"})
                                   .Out("Out", {"out"})
                                   .Attr("scale", 1.7f)
                                   .Attr("bias", -0.3f)
                                   .Attr("bias_after_scale", after)
                                   .Build();
      ExpectParity(op, in);
      ExpectGradParity(op, in, Rng());
    }
  }
}

// ---- binary and sum -------------------------------------------------------------------------------------

TEST_F(OneDnnParityTest, ElementwiseWithBroadcast) {
  struct BinCase {
    Dims x, y;
    int64_t axis;
  };
  const std::vector<BinCase> cases = {
      {{1}, {1}, -1},
      {{7}, {7}, -1},
      {{17, 33}, {17, 33}, -1},
      {{17, 33}, {33}, -1},
      {{17, 33}, {1}, -1},
      {{17, 33}, {17}, 0},
      {{17, 33}, {17, 1}, -1},
      {{2, 3, 7, 5}, {3}, 1},
      {{2, 3, 7, 5}, {3, 7}, 1},
      {{2, 3, 7, 5}, {1, 3, 1, 5}, -1},
      {{2, 3, 7, 5}, {7, 1}, -1},
      {{2, 3, 7, 5}, {2, 1, 7, 1}, 0},
  };
  for (const std::string type : {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"}) {
    for (const auto& c : cases) {
      // Divisors away from 0.
      const std::map<std::string, Tensor> in = {{"x", Rand(c.x)}, {"y", Rand(c.y, 0.5, 1.5)}};
      const proto::OpDesc op =
          OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", c.axis).Build();
      ExpectParity(op, in);
    }
  }
}

TEST_F(OneDnnParityTest, Sum) {
  for (size_t n : {1u, 2u, 3u, 5u}) {
    std::map<std::string, Tensor> in;
    std::vector<std::string> args;
    for (size_t i = 0; i < n; ++i) {
      args.push_back("x" + std::to_string(i));
      in[args.back()] = Rand({7, 33});
    }
    ExpectParity(OpBuilder("sum").In("X", args).Out("Out", {"out"}).Build(), in);
  }
  // The same var twice.
  ExpectParity(OpBuilder("sum").In("X", {"a", "a"}).Out("Out", {"out"}).Build(), {{"a", Rand({17})}});
}

// ---- in place -------------------------------------------------------------------------------------------------

// Out names the same var as X (what the in-place pass produces): the kernel
// must pass one memory object for both and still match.
TEST_F(OneDnnParityTest, InPlace) {
  const Tensor x = Rand({7, 33});
  ExpectParity(OpBuilder("relu").In("X", {"x"}).Out("Out", {"x"}).Build(), {{"x", x}});
  ExpectParity(OpBuilder("gelu").In("X", {"x"}).Out("Out", {"x"}).Build(), {{"x", x}});
  ExpectParity(OpBuilder("softmax").In("X", {"x"}).Out("Out", {"x"}).Build(), {{"x", x}});
  ExpectParity(OpBuilder("scale").In("X", {"x"}).Out("Out", {"x"}).Attr("scale", 2.0f).Build(), {{"x", x}});
  ExpectParity(OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"x"}).Build(),
               {{"x", x}, {"y", Rand({33})}});
  ExpectParity(OpBuilder("elementwise_mul").In("X", {"x"}).In("Y", {"x"}).Out("Out", {"x"}).Build(), {{"x", x}});
  ExpectParity(OpBuilder("sum").In("X", {"x", "y"}).Out("Out", {"x"}).Build(), {{"x", x}, {"y", Rand({7, 33})}});
  // Grad ops writing X@GRAD over Out@GRAD.
  const Tensor y = Rand({7, 33}, 0, 1);
  ExpectParity(OpBuilder("softmax_grad").In("Out", {"y"}).In("Out@GRAD", {"g"}).Out("X@GRAD", {"g"}).Build(),
               {{"y", y}, {"g", x}});
  ExpectParity(OpBuilder("relu_grad").In("Out", {"y"}).In("Out@GRAD", {"g"}).Out("X@GRAD", {"g"}).Build(),
               {{"y", y}, {"g", x}});
  // oneDNN binary and sum run in place over their first source only.
  ExpectParity(OpBuilder("elementwise_add").In("X", {"a"}).In("Y", {"y"}).Out("Out", {"y"}).Build(),
               {{"a", x}, {"y", Rand({7, 33})}}, Expect::kFallback);
  ExpectParity(OpBuilder("sum").In("X", {"a", "y"}).Out("Out", {"y"}).Build(), {{"a", x}, {"y", Rand({7, 33})}},
               Expect::kFallback);
}

// ---- random shapes -------------------------------------------------------------------------------------------

int64_t Pick(std::initializer_list<int64_t> values) {
  std::uniform_int_distribution<size_t> d(0, values.size() - 1);
  return *(values.begin() + d(Rng()));
}

// Random dims of rank `rank` from the sizes that exercise vector tails.
Dims RandomDims(size_t rank) {
  Dims d(rank);
  for (auto& x : d) x = Pick({1, 7, 17, 33});
  return d;
}

TEST_F(OneDnnParityTest, RandomMatmul) {
  for (int iter = 0; iter < 24; ++iter) {
    const int64_t m = Pick({1, 7, 17, 33}), k = Pick({1, 7, 17, 33}), n = Pick({1, 7, 17, 33});
    Dims batch = RandomDims(static_cast<size_t>(Pick({0, 1, 2})));
    for (auto& b : batch) b = std::min<int64_t>(b, 7);
    const bool tx = Pick({0, 1}), ty = Pick({0, 1});
    Dims x = batch, y = batch;
    x.insert(x.end(), {tx ? k : m, tx ? m : k});
    y.insert(y.end(), {ty ? n : k, ty ? k : n});
    const proto::OpDesc op = OpBuilder("matmul")
                                 .In("X", {"x"})
                                 .In("Y", {"y"})
                                 .Out("Out", {"out"})
                                 .Attr("transpose_X", tx)
                                 .Attr("transpose_Y", ty)
                                 .Attr("alpha", 0.75f)
                                 .Build();
    const std::map<std::string, Tensor> in = {{"x", Rand(x)}, {"y", Rand(y)}};
    ExpectParity(op, in);
    ExpectGradParity(op, in, Rng());
  }
}

TEST_F(OneDnnParityTest, RandomConvAndPool) {
  for (int iter = 0; iter < 24; ++iter) {
    const int64_t groups = Pick({1, 1, 2, 3});
    const int64_t c = groups * Pick({1, 2, 3}), o = groups * Pick({1, 3});
    const int64_t kh = Pick({1, 2, 3}), kw = Pick({1, 2, 3});
    const std::vector<int64_t> strides = {Pick({1, 2, 3}), Pick({1, 2, 3})};
    const std::vector<int64_t> dilations = {Pick({1, 2}), Pick({1, 2})};
    const std::vector<int64_t> paddings = {Pick({0, 1, 2}), Pick({0, 1, 2})};
    const int64_t h = std::max(Pick({1, 7, 17}), dilations[0] * (kh - 1) + 1);
    const int64_t w = std::max(Pick({1, 7, 17, 33}), dilations[1] * (kw - 1) + 1);
    const std::map<std::string, Tensor> in = {{"in", Rand({Pick({1, 2}), c, h, w})}, {"f", Rand({o, c / groups, kh, kw})}};
    const proto::OpDesc conv = OpBuilder("conv2d")
                                   .In("Input", {"in"})
                                   .In("Filter", {"f"})
                                   .Out("Output", {"out"})
                                   .Attr("strides", strides)
                                   .Attr("paddings", paddings)
                                   .Attr("dilations", dilations)
                                   .Attr("groups", groups)
                                   .Build();
    ExpectParity(conv, in);
    ExpectGradParity(conv, in, Rng());

    const std::vector<int64_t> ksize = {std::min(kh, h), std::min(kw, w)};
    const std::vector<int64_t> pool_pad = {std::min<int64_t>(paddings[0], ksize[0] - 1),
                                           std::min<int64_t>(paddings[1], ksize[1] - 1)};
    const proto::OpDesc pool = OpBuilder("pool2d")
                                   .In("X", {"in"})
                                   .Out("Out", {"out"})
                                   .Attr("pooling_type", std::string(iter % 2 ? "max" : "avg"))
                                   .Attr("ksize", ksize)
                                   .Attr("strides", strides)
                                   .Attr("paddings", pool_pad)
                                   .Attr("exclusive", iter % 3 != 0)
                                   .Build();
    ExpectParity(pool, {{"in", in.at("in")}});
    ExpectGradParity(pool, {{"in", in.at("in")}}, Rng());
  }
}

TEST_F(OneDnnParityTest, RandomElementwiseAndNorm) {
  const std::vector<std::string> binary = {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"};
  for (int iter = 0; iter < 32; ++iter) {
    const Dims x = RandomDims(static_cast<size_t>(Pick({1, 2, 3, 4})));
    // Y: a window of X's dims starting at a random axis, some set to 1.
    const int64_t start = Pick({0, 1, 2, 3}) % static_cast<int64_t>(x.size());
    const int64_t len = 1 + Pick({0, 1, 2, 3}) % (static_cast<int64_t>(x.size()) - start);
    Dims y(x.begin() + start, x.begin() + start + len);
    for (auto& d : y) d = Pick({0, 1}) ? d : 1;
    const int64_t axis = start + len == static_cast<int64_t>(x.size()) && Pick({0, 1}) ? -1 : start;
    const proto::OpDesc op = OpBuilder(binary[iter % 4])
                                 .In("X", {"x"})
                                 .In("Y", {"y"})
                                 .Out("Out", {"out"})
                                 .Attr("axis", axis)
                                 .Build();
    ExpectParity(op, {{"x", Rand(x)}, {"y", Rand(y, 0.5, 1.5)}});

    const proto::OpDesc softmax =
        OpBuilder("softmax").In("X", {"x"}).Out("Out", {"out"}).Attr("axis", start).Build();
    ExpectParity(softmax, {{"x", Rand(x, -3, 3)}});
    ExpectGradParity(softmax, {{"x", Rand(x, -3, 3)}}, Rng());

    if (x.size() >= 2) {
      const int64_t begin = std::max<int64_t>(1, start);
      const int64_t cols = Numel(Dims(x.begin() + begin, x.end()));
      const proto::OpDesc ln = OpBuilder("layer_norm")
                                   .In("X", {"x"})
                                   .In("Scale", {"s"})
                                   .In("Bias", {"b"})
                                   .Out("Y", {"y"})
                                   .Out("Mean", {"mean"})
                                   .Out("Variance", {"var"})
                                   .Attr("begin_norm_axis", begin)
                                   .Build();
      const std::map<std::string, Tensor> in = {{"x", Rand(x, -2, 2)}, {"s", Rand({cols})}, {"b", Rand({cols})}};
      ExpectParity(ln, in);
      ExpectGradParity(ln, in, Rng());
    }
  }
}

// ---- cache ------------------------------------------------------------------------------------------------------

// The kernels go through the global cache: a repeated shape hits, a new one misses.
TEST_F(OneDnnParityTest, KernelsUseTheGlobalCache) {
  onednn::PrimitiveCache& cache = onednn::PrimitiveCache::Global();
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  const std::map<std::string, Tensor> in = {{"x", Rand({11, 13})}, {"y", Rand({13, 3})}};
  const auto s0 = cache.stats();
  test::RunOp(op, in, true);
  const auto s1 = cache.stats();
  EXPECT_EQ(s1.misses, s0.misses + 1);
  test::RunOp(op, in, true);
  const auto s2 = cache.stats();
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.hits, s1.hits + 1);
  test::RunOp(op, {{"x", Rand({12, 13})}, {"y", Rand({13, 3})}}, true);
  EXPECT_EQ(cache.stats().misses, s2.misses + 1);
}

// By default the kernels fall back where oneDNN would use a generic
// implementation measured slower than the reference kernel; the same shapes
// with the innermost axis or a per-channel broadcast stay on oneDNN.
TEST_F(OneDnnParityTest, Reductions) {
  struct Case {
    Dims dims;
    std::vector<int64_t> dim;
    bool keep_dim, reduce_all;
  };
  const std::vector<Case> cases = {{{1}, {0}, false, false},       {{17, 33}, {1}, false, false},
                                   {{17, 33}, {0}, true, false},   {{7, 16, 33}, {1}, false, false},
                                   {{2, 7, 5}, {-1}, true, false}, {{2, 7, 5}, {0, 2}, false, false},
                                   {{3, 7, 33}, {0}, false, true}};
  for (const auto& c : cases) {
    const std::map<std::string, Tensor> in = {{"x", Rand(c.dims, -3, 3)}};
    for (const char* type : {"reduce_sum", "reduce_mean"}) {
      const proto::OpDesc op = OpBuilder(type)
                                   .In("X", {"x"})
                                   .Out("Out", {"out"})
                                   .Attr("dim", c.dim)
                                   .Attr("keep_dim", c.keep_dim)
                                   .Attr("reduce_all", c.reduce_all)
                                   .Build();
      // Nothing to reduce ([1] -> [1]): oneDNN has no such reduction.
      ExpectParity(op, in, c.dims == Dims{1} ? Expect::kFallback : Expect::kOneDnn);
    }
    ExpectParity(OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build(), in,
                 c.dims == Dims{1} ? Expect::kFallback : Expect::kOneDnn);
  }
}

TEST(OneDnnPolicyTest, SlowImplementationsFallBackByDefault) {
  ASSERT_FALSE(onednn::AllowSlowImplementations());
  const std::map<std::string, Tensor> x = {{"x", Rand({17, 33})}};
  const auto softmax = [](int64_t axis) {
    return OpBuilder("softmax").In("X", {"x"}).Out("Out", {"out"}).Attr("axis", axis).Build();
  };
  ExpectParity(softmax(0), x, Expect::kFallback);
  ExpectGradParity(softmax(0), x, Rng(), Expect::kFallback);
  ExpectParity(softmax(1), x, Expect::kOneDnn);
  ExpectGradParity(softmax(1), x, Rng(), Expect::kOneDnn);

  const auto add = OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectParity(add, {{"x", Rand({2, 3, 7, 5})}, {"y", Rand({1, 3, 1, 5})}}, Expect::kFallback);
  ExpectParity(add, {{"x", Rand({2, 3, 7, 5})}, {"y", Rand({1, 3, 7, 1})}}, Expect::kOneDnn);

  EXPECT_TRUE(onednn::IsSlowImplementation("ref:any"));
  EXPECT_TRUE(onednn::IsSlowImplementation("simple_nchw:any"));
  EXPECT_FALSE(onednn::IsSlowImplementation("jit:avx512_core"));
  EXPECT_FALSE(onednn::IsSlowImplementation("simple_layer_normalization:any"));
}

}  // namespace
}  // namespace kiln
