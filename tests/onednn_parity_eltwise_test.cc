// Numeric parity of oneDNN kernels with their reference kernels, as
// onednn_parity_test, for softmax, layer_norm, activations, scale,
// broadcast elementwise and sum, in-place runs, random shapes of every kind
// and reductions; the global primitive cache and the fallback of slow
// implementations. Each case also checks that the oneDNN kernel did the
// work (its run counter moved), or, where it must fall back, that it did not.
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

// ---- softmax and layer_norm --------------------------------------------------------------------------

TEST(OneDnnParityTest, Softmax) {
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1}, -1}, {{7}, 0}, {{17, 33}, -1}, {{17, 33}, 0}, {{2, 7, 5}, 1}, {{2, 7, 5}, 2}, {{3, 1, 33}, -1}};
  for (const auto& [dims, axis] : cases) {
    const std::map<std::string, Tensor> in = {{"x", Rand(dims, -3, 3)}};
    const proto::OpDesc op = OpBuilder("softmax").In("X", {"x"}).Out("Out", {"out"}).Attr("axis", axis).Build();
    ExpectParity(op, in);
    ExpectGradParity(op, in, Rng());
  }
}

TEST(OneDnnParityTest, LayerNorm) {
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

TEST(OneDnnParityTest, LayerNormGradOfScaleOnly) {
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

TEST(OneDnnParityTest, Activations) {
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

TEST(OneDnnParityTest, Scale) {
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

TEST(OneDnnParityTest, ElementwiseWithBroadcast) {
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

TEST(OneDnnParityTest, Sum) {
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
TEST(OneDnnParityTest, InPlace) {
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

TEST(OneDnnParityTest, RandomMatmul) {
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

TEST(OneDnnParityTest, RandomConvAndPool) {
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

TEST(OneDnnParityTest, RandomElementwiseAndNorm) {
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
TEST(OneDnnParityTest, KernelsUseTheGlobalCache) {
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
TEST(OneDnnParityTest, Reductions) {
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
  const onednn::Settings defaults;
  ASSERT_FALSE(defaults.allow_slow_impls);
  const std::map<std::string, Tensor> x = {{"x", Rand({17, 33})}};
  const auto softmax = [](int64_t axis) {
    return OpBuilder("softmax").In("X", {"x"}).Out("Out", {"out"}).Attr("axis", axis).Build();
  };
  ExpectParity(softmax(0), x, Expect::kFallback, {}, defaults);
  ExpectGradParity(softmax(0), x, Rng(), Expect::kFallback, {}, {}, defaults);
  ExpectParity(softmax(1), x, Expect::kOneDnn, {}, defaults);
  ExpectGradParity(softmax(1), x, Rng(), SoftmaxBackwardByDefault(), {}, {}, defaults);
  // The same run allowed slow implementations takes oneDNN's generic one.
  ExpectParity(softmax(0), x, Expect::kOneDnn, {}, test::AllowSlowOneDnn());

  const auto add = OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
  ExpectParity(add, {{"x", Rand({2, 3, 7, 5})}, {"y", Rand({1, 3, 1, 5})}}, Expect::kFallback, {}, defaults);
  ExpectParity(add, {{"x", Rand({2, 3, 7, 5})}, {"y", Rand({1, 3, 7, 1})}}, Expect::kOneDnn, {}, defaults);

  EXPECT_TRUE(onednn::IsSlowImplementation("ref:any"));
  EXPECT_TRUE(onednn::IsSlowImplementation("simple_nchw:any"));
  EXPECT_FALSE(onednn::IsSlowImplementation("jit:avx512_core"));
  EXPECT_FALSE(onednn::IsSlowImplementation("simple_layer_normalization:any"));
}

}  // namespace
}  // namespace kiln
