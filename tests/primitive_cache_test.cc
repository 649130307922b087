// PrimitiveCache and the handler base: typed keys, hit/miss by shape, LRU
// eviction, and concurrent use of one cache from several threads.
#include "framework/onednn/primitive_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <unordered_set>

#include "framework/onednn/handlers.h"
#include "tests/op_test_util.h"

namespace kiln::onednn {
namespace {

PrimitiveKey MatmulKey(const Dims& a, const Dims& b) {
  PrimitiveKey k;
  k.kind = PrimitiveKind::kMatmul;
  k.dims = {a, b};
  return k;
}

// A real (cheap) primitive for entries: eltwise relu over `n` floats.
std::shared_ptr<const PrimitiveEntry> ReluEntry(int64_t n) {
  const dnnl::memory::desc md = PlainDesc({n});
  dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, md),
      OneDnnHandler::DefaultAttr(), OneDnnHandler::Engine());
  auto e = std::make_shared<PrimitiveEntry>();
  e->pd = pd;
  e->primitive = dnnl::eltwise_forward(pd);
  return e;
}

// Reference row-major product, for checking results of the threads.
Tensor NaiveMatmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  Tensor c(DataType::kFP32, {m, n});
  float* cp = c.mutable_data<float>();
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += static_cast<double>(ap[i * k + kk]) * bp[kk * n + j];
      cp[i * n + j] = static_cast<float>(s);
    }
  }
  return c;
}

TEST(PrimitiveKeyTest, EqualityAndHashCoverEveryField) {
  const PrimitiveKey base = MatmulKey({4, 8}, {8, 16});
  EXPECT_EQ(base, MatmulKey({4, 8}, {8, 16}));
  EXPECT_EQ(base.Hash(), MatmulKey({4, 8}, {8, 16}).Hash());

  std::vector<PrimitiveKey> variants;
  auto vary = [&](auto&& change) {
    PrimitiveKey k = base;
    change(k);
    variants.push_back(k);
  };
  vary([](PrimitiveKey& k) { k.kind = PrimitiveKind::kBinary; });
  vary([](PrimitiveKey& k) { k.dtype = DataType::kFP64; });
  vary([](PrimitiveKey& k) { k.dims[0] = {5, 8}; });
  vary([](PrimitiveKey& k) { k.dims = {{4, 8}, {8, 16}, {1}}; });
  vary([](PrimitiveKey& k) { k.dims = {{4, 8, 1}, {8, 16}}; });
  vary([](PrimitiveKey& k) { k.algorithm = static_cast<int>(dnnl::algorithm::eltwise_relu); });
  vary([](PrimitiveKey& k) { k.transpose_a = true; });
  vary([](PrimitiveKey& k) { k.transpose_b = true; });
  vary([](PrimitiveKey& k) { k.axis = 1; });
  vary([](PrimitiveKey& k) { k.groups = 2; });
  vary([](PrimitiveKey& k) { k.kept_layout = ActLayout::kNChw16c; });
  vary([](PrimitiveKey& k) { k.kept_layout = ActLayout::kNhwc; });
  vary([](PrimitiveKey& k) {
    k.kept_layout = ActLayout::kNhwc;
    k.kept_dtype = DataType::kBF16;
  });
  vary([](PrimitiveKey& k) { k.src_kept_layout = ActLayout::kNChw8c; });
  vary([](PrimitiveKey& k) { k.diff_src_kept_layout = ActLayout::kNChw8c; });
  vary([](PrimitiveKey& k) { k.kernel = {2, 2}; });
  vary([](PrimitiveKey& k) { k.strides = {2, 2}; });
  vary([](PrimitiveKey& k) { k.dilations = {1, 1}; });
  vary([](PrimitiveKey& k) { k.padding_l = {1, 1}; });
  vary([](PrimitiveKey& k) { k.padding_r = {1, 0}; });
  vary([](PrimitiveKey& k) { k.alpha = 0.5f; });
  vary([](PrimitiveKey& k) { k.beta = 0.5f; });
  vary([](PrimitiveKey& k) { k.epsilon = 1e-5f; });
  vary([](PrimitiveKey& k) { k.flags = 3; });
  vary([](PrimitiveKey& k) { k.output_scale = -1.0f; });
  vary([](PrimitiveKey& k) { k.bias = true; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu)}; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_gelu_tanh)}; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu, 0.1f)}; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_linear, 0.0f, 1.0f)}; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Sum()}; });
  vary([](PrimitiveKey& k) { k.threads = 1; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Sum(0.5f)}; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Sum(), PostOp::Eltwise(dnnl::algorithm::eltwise_relu)}; });
  vary([](PrimitiveKey& k) { k.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu), PostOp::Sum()}; });
  vary([](PrimitiveKey& k) {
    PostOp scaled = PostOp::Eltwise(dnnl::algorithm::eltwise_relu);
    scaled.scale = 2.0f;
    k.post_ops = {scaled};
  });
  std::unordered_set<size_t> hashes = {base.Hash()};
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(variants[i], base) << "variant " << i << ": " << variants[i].ToString();
    hashes.insert(variants[i].Hash());
    for (size_t j = 0; j < i; ++j) EXPECT_NE(variants[i], variants[j]) << i << " vs " << j;
  }
  // Not required by the contract, but a hash this weak would hurt the cache.
  EXPECT_GE(hashes.size(), variants.size());
}

TEST(PrimitiveKeyTest, ToStringIsReadable) {
  PrimitiveKey k = MatmulKey({64, 784}, {784, 10});
  k.transpose_b = true;
  EXPECT_EQ(k.ToString(), "matmul f32 [64,784]x[784,10] trans_b scale=1");
  PrimitiveKey c;
  c.kind = PrimitiveKind::kConvForward;
  c.dims = {{2, 3, 7, 7}, {4, 3, 3, 3}};
  c.strides = {2, 2};
  c.padding_l = {1, 1};
  c.padding_r = {1, 1};
  c.dilations = {0, 0};
  EXPECT_EQ(c.ToString(),
            "conv_fwd f32 [2,3,7,7]x[4,3,3,3] strides=[2,2] dilations=[0,0] pad_l=[1,1] pad_r=[1,1]");
  PrimitiveKey e;
  e.kind = PrimitiveKind::kEltwiseForward;
  e.dims = {{33}};
  e.algorithm = static_cast<int>(dnnl::algorithm::eltwise_relu);
  EXPECT_EQ(e.ToString(), "eltwise_fwd f32 [33] alg=eltwise_relu");
}

TEST(PrimitiveKeyTest, ToStringShowsTheFusion) {
  PrimitiveKey k = MatmulKey({64, 784}, {784, 10});
  k.bias = true;
  k.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu)};
  EXPECT_EQ(k.ToString(), "matmul f32 [64,784]x[784,10] scale=1 +bias +relu");
  k.bias = false;
  k.output_scale = -1.0f;
  k.post_ops = {PostOp::Sum(), PostOp::Eltwise(dnnl::algorithm::eltwise_gelu_erf)};
  EXPECT_EQ(k.ToString(), "matmul f32 [64,784]x[784,10] scale=-1 +sum +gelu_erf");
  k.post_ops = {PostOp::Sum(0.5f), PostOp::Eltwise(dnnl::algorithm::eltwise_linear, 2.0f, 1.0f)};
  EXPECT_EQ(k.ToString(), "matmul f32 [64,784]x[784,10] scale=-1 +sum(scale=0.5) +linear(alpha=2,beta=1)");
  PrimitiveKey c;
  c.kind = PrimitiveKind::kConvForward;
  c.dims = {{1, 3, 5, 5}, {4, 3, 3, 3}};
  c.bias = true;
  c.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu)};
  EXPECT_EQ(c.ToString(), "conv_fwd f32 [1,3,5,5]x[4,3,3,3] +bias +relu");
  c.output_scale = 0.25f;
  EXPECT_EQ(c.ToString(), "conv_fwd f32 [1,3,5,5]x[4,3,3,3] scale=0.25 +bias +relu");
}

TEST(PrimitiveCacheTest, HitOnSameShapeMissOnNewShape) {
  PrimitiveCache cache(8);
  int created = 0;
  auto create = [&] {
    ++created;
    return ReluEntry(16);
  };
  auto a = cache.GetOrCreate(MatmulKey({4, 8}, {8, 16}), create);
  auto b = cache.GetOrCreate(MatmulKey({4, 8}, {8, 16}), create);
  EXPECT_EQ(a, b);
  EXPECT_EQ(created, 1);
  auto c = cache.GetOrCreate(MatmulKey({5, 8}, {8, 16}), create);
  EXPECT_NE(a, c);
  EXPECT_EQ(created, 2);
  const PrimitiveCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 0);
  EXPECT_EQ(s.size, 2u);
  EXPECT_EQ(s.capacity, 8u);
  EXPECT_EQ(cache.Find(MatmulKey({6, 8}, {8, 16})), nullptr);
  EXPECT_EQ(cache.stats().misses, 3);
}

TEST(PrimitiveCacheTest, EvictsLeastRecentlyUsedAtCapacity) {
  PrimitiveCache cache(3);
  for (int64_t m = 1; m <= 3; ++m) cache.Insert(MatmulKey({m, 8}, {8, 8}), ReluEntry(m));
  // Touch m=1 so that m=2 is the least recently used.
  ASSERT_NE(cache.Find(MatmulKey({1, 8}, {8, 8})), nullptr);
  cache.Insert(MatmulKey({4, 8}, {8, 8}), ReluEntry(4));
  EXPECT_TRUE(cache.Contains(MatmulKey({1, 8}, {8, 8})));
  EXPECT_FALSE(cache.Contains(MatmulKey({2, 8}, {8, 8})));
  EXPECT_TRUE(cache.Contains(MatmulKey({3, 8}, {8, 8})));
  EXPECT_TRUE(cache.Contains(MatmulKey({4, 8}, {8, 8})));
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().size, 3u);
  const std::vector<PrimitiveKey> keys = cache.Keys();
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0], MatmulKey({4, 8}, {8, 8}));  // most recent first
  EXPECT_EQ(keys[1], MatmulKey({1, 8}, {8, 8}));
  EXPECT_EQ(keys[2], MatmulKey({3, 8}, {8, 8}));

  // An entry handed out stays valid after its eviction.
  auto held = cache.Find(MatmulKey({3, 8}, {8, 8}));
  cache.set_capacity(1);
  EXPECT_EQ(cache.stats().size, 1u);
  EXPECT_EQ(cache.stats().evictions, 3);
  EXPECT_TRUE(cache.Contains(MatmulKey({3, 8}, {8, 8})));
  ASSERT_NE(held, nullptr);
  EXPECT_TRUE(static_cast<bool>(held->primitive));

  cache.Clear();
  EXPECT_EQ(cache.stats().size, 0u);
  EXPECT_EQ(cache.stats().hits, 0);
}

TEST(PrimitiveCacheTest, FailedCreationInsertsNothing) {
  PrimitiveCache cache(4);
  EXPECT_THROW(cache.GetOrCreate(MatmulKey({1, 1}, {1, 1}),
                                 []() -> std::shared_ptr<const PrimitiveEntry> { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(cache.stats().size, 0u);
}

TEST(OneDnnHandlerTest, MatmulHandlerUsesItsCache) {
  PrimitiveCache cache(16);
  std::mt19937 rng(1);
  const Tensor a = test::RandomTensor({7, 17}, DataType::kFP32, rng);
  const Tensor b = test::RandomTensor({17, 33}, DataType::kFP32, rng);
  for (int i = 0; i < 3; ++i) {
    MatmulHandler h(cache, Settings{}, a.dims(), false, b.dims(), false, 1.0f);
    ASSERT_TRUE(h.valid());
    EXPECT_EQ(h.dst_dims(), (Dims{7, 33}));
    Tensor c(DataType::kFP32, h.dst_dims());
    ASSERT_TRUE(h.Run(a, b, &c));
    EXPECT_EQ(test::CompareTensors(c, NaiveMatmul(a, b), 1e-5, 1e-4), "");
  }
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().hits, 2);
  EXPECT_EQ(cache.Keys()[0].ToString(), "matmul f32 [7,17]x[17,33] scale=1");
}

// Fused forwards through the Tensor API: the JIT runs the same entries on raw
// buffers (onednn_jit_kernels_test).
TEST(OneDnnHandlerTest, MatmulHandlerFusesBiasReluAndScale) {
  PrimitiveCache cache(16);
  std::mt19937 rng(3);
  const Tensor a = test::RandomTensor({5, 9}, DataType::kFP32, rng);
  const Tensor b = test::RandomTensor({9, 6}, DataType::kFP32, rng);
  const Tensor bias = test::RandomTensor({6}, DataType::kFP32, rng);
  FusedOps fused;
  fused.bias = true;
  fused.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu)};
  MatmulHandler h(cache, Settings{}, a.dims(), false, b.dims(), false, 0.5f, fused);
  ASSERT_TRUE(h.valid());
  Tensor c(DataType::kFP32, h.dst_dims());
  EXPECT_FALSE(h.Run(a, b, &c));  // the fused bias is required
  ASSERT_TRUE(h.Run(a, b, &bias, &c));
  Tensor want = NaiveMatmul(a, b);
  float* w = want.mutable_data<float>();
  for (int64_t i = 0; i < want.numel(); ++i) w[i] = std::max(0.0f, 0.5f * w[i] + bias.data<float>()[i % 6]);
  EXPECT_EQ(test::CompareTensors(c, want, 1e-5, 1e-4), "");
  EXPECT_EQ(cache.Keys()[0].ToString(), "matmul f32 [5,9]x[9,6] scale=0.5 +bias +relu");
  // The plain product of the same shapes is another entry.
  MatmulHandler plain(cache, Settings{}, a.dims(), false, b.dims(), false, 0.5f);
  ASSERT_TRUE(plain.Run(a, b, &c));
  EXPECT_EQ(cache.stats().size, 2u);
}

TEST(OneDnnHandlerTest, MatmulHandlerSumPostOpAddsToDst) {
  PrimitiveCache cache(4);
  std::mt19937 rng(4);
  const Tensor a = test::RandomTensor({3, 4}, DataType::kFP32, rng);
  const Tensor b = test::RandomTensor({4, 2}, DataType::kFP32, rng);
  Tensor c = test::RandomTensor({3, 2}, DataType::kFP32, rng);
  Tensor want = NaiveMatmul(a, b);
  for (int64_t i = 0; i < want.numel(); ++i) want.mutable_data<float>()[i] = c.data<float>()[i] - want.data<float>()[i];
  FusedOps fused;
  fused.post_ops = {PostOp::Sum()};
  MatmulHandler h(cache, Settings{}, a.dims(), false, b.dims(), false, -1.0f, fused);
  ASSERT_TRUE(h.Run(a, b, &c));
  EXPECT_EQ(test::CompareTensors(c, want, 1e-5, 1e-4), "");
}

TEST(OneDnnHandlerTest, ConvHandlerFusedForwardMatchesPlainPlusBiasRelu) {
  PrimitiveCache cache(8);
  std::mt19937 rng(5);
  const Tensor x = test::RandomTensor({2, 4, 7, 6}, DataType::kFP32, rng);
  const Tensor f = test::RandomTensor({6, 2, 3, 3}, DataType::kFP32, rng);
  const Tensor bias = test::RandomTensor({6}, DataType::kFP32, rng);
  FusedOps fused;
  fused.bias = true;
  fused.post_ops = {PostOp::Eltwise(dnnl::algorithm::eltwise_relu)};
  ConvHandler h(cache, Settings{}, x.dims(), f.dims(), {2, 1}, {1, 1}, {1, 1}, 2, fused);
  ConvHandler plain(cache, Settings{}, x.dims(), f.dims(), {2, 1}, {1, 1}, {1, 1}, 2);
  ASSERT_TRUE(h.valid() && plain.valid());
  Tensor out(DataType::kFP32, h.output_dims()), want(DataType::kFP32, plain.output_dims());
  ASSERT_TRUE(h.RunForward(x, f, &bias, &out));
  ASSERT_TRUE(plain.RunForward(x, f, &want));
  const int64_t plane = want.dim(2) * want.dim(3);
  float* w = want.mutable_data<float>();
  for (int64_t i = 0; i < want.numel(); ++i) w[i] = std::max(0.0f, w[i] + bias.data<float>()[(i / plane) % 6]);
  EXPECT_EQ(test::CompareTensors(out, want, 1e-5, 1e-4), "");
  EXPECT_EQ(h.forward_key().ToString(),
            "conv_fwd f32 [2,4,7,6]x[6,2,3,3] groups=2 strides=[2,1] dilations=[0,0] pad_l=[1,1] pad_r=[1,1] "
            "+bias +relu");
  // The fused handler's backward keys are the plain convolution's.
  EXPECT_EQ(h.backward_key(), plain.backward_key());
}

TEST(OneDnnHandlerTest, InPlaceRunUsesOneMemoryForSrcAndDst) {
  PrimitiveCache cache(4);
  Tensor x = test::FloatTensor({5}, {-2, -1, 0, 1, 2});
  Tensor out(DataType::kFP32, {5});
  out.ShareBufferWith(x);
  EltwiseHandler h(cache, Settings{}, 5, dnnl::algorithm::eltwise_relu);
  ASSERT_TRUE(h.RunForward(x, &out));
  EXPECT_TRUE(out.IsSharedBufferWith(x));
  EXPECT_EQ(test::CompareTensors(out, test::FloatTensor({5}, {0, 0, 0, 1, 2}), 0, 0), "");
}

// 8 threads share one cache, each multiplying its own tensors many times with
// shapes some threads share (hits across threads) and some they do not.
TEST(PrimitiveCacheTest, ConcurrentMatmulFromEightThreads) {
  PrimitiveCache cache(64);
  constexpr int kThreads = 8;
  constexpr int kIters = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      // Threads 0-3 share one shape; 4-7 each have their own.
      const int64_t m = t < 4 ? 9 : 10 + t;
      const Tensor a = test::RandomTensor({m, 17}, DataType::kFP32, rng);
      const Tensor b = test::RandomTensor({17, 33}, DataType::kFP32, rng);
      const Tensor want = NaiveMatmul(a, b);
      for (int i = 0; i < kIters; ++i) {
        MatmulHandler h(cache, Settings{}, a.dims(), false, b.dims(), false, 1.0f);
        Tensor c(DataType::kFP32, {m, 33});
        if (!h.Run(a, b, &c) || !test::CompareTensors(c, want, 1e-5, 1e-4).empty()) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const PrimitiveCacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, kThreads * kIters);
  EXPECT_EQ(s.size, 5u);  // one shared shape + four own shapes
  // Concurrent first lookups of one key may all miss; never more than the
  // threads that use it.
  EXPECT_GE(s.misses, 5);
  EXPECT_LE(s.misses, kThreads);
  EXPECT_EQ(s.evictions, 0);
}

// Under eviction pressure (capacity below the working set) results stay right
// and the counters add up.
TEST(PrimitiveCacheTest, ConcurrentUseWithEvictions) {
  PrimitiveCache cache(2);
  constexpr int kThreads = 8;
  constexpr int kIters = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(200 + t);
      for (int i = 0; i < kIters; ++i) {
        const int64_t m = 1 + (t + i) % 5;
        const Tensor a = test::RandomTensor({m, 7}, DataType::kFP32, rng);
        const Tensor b = test::RandomTensor({7, 3}, DataType::kFP32, rng);
        MatmulHandler h(cache, Settings{}, a.dims(), false, b.dims(), false, 1.0f);
        Tensor c(DataType::kFP32, {m, 3});
        if (!h.Run(a, b, &c) || !test::CompareTensors(c, NaiveMatmul(a, b), 1e-5, 1e-4).empty()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const PrimitiveCacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, kThreads * kIters);
  EXPECT_LE(s.size, 2u);
  EXPECT_GT(s.evictions, 0);
  // Every miss inserts or finds an entry another thread inserted meanwhile;
  // what was inserted is either still there or was evicted.
  EXPECT_LE(static_cast<int64_t>(s.size) + s.evictions, s.misses);
}

}  // namespace
}  // namespace kiln::onednn
