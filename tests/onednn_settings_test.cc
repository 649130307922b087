// onednn::Settings belong to a run, not to the process: a handler follows the
// settings it is built with (deterministic single-thread primitives under
// keys of their own, slow implementations refused or taken), runs with other
// settings share one cache at once, and the JIT's kernels follow the settings
// of the compile they were made by.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/kernels/onednn/op_kernel.h"
#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln::onednn {
namespace {

Settings Deterministic() {
  Settings s;
  s.deterministic = true;
  return s;
}

// a @ b on the reference kernel.
Tensor ReferenceMatmul(const Tensor& a, const Tensor& b) {
  const proto::OpDesc op = OpBuilder("matmul").In("X", {"a"}).In("Y", {"b"}).Out("Out", {"c"}).Build();
  return *test::RunOp(op, {{"a", a}, {"b", b}})->GetTensor("c");
}

// --deterministic: primitives are created and run for one OpenMP thread, in
// cache entries of their own; the caller's thread count is left as it was.
// With a cache per thread count, 1 and 2 threads give the same bits.
TEST(OneDnnSettingsTest, DeterministicPrimitivesAreSingleThreadedEntries) {
  const int saved_threads = omp_get_max_threads();
  std::mt19937 rng(5);
  const Tensor a = test::RandomTensor({64, 2048}, DataType::kFP32, rng);
  const Tensor b = test::RandomTensor({2048, 48}, DataType::kFP32, rng);
  std::vector<Tensor> results;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    PrimitiveCache cache(4);
    MatmulHandler h(cache, Deterministic(), a.dims(), false, b.dims(), false, 1.0f);
    Tensor c(DataType::kFP32, h.dst_dims());
    ASSERT_TRUE(h.Run(a, b, &c));
    EXPECT_EQ(omp_get_max_threads(), threads) << "restored after creating and running";
    EXPECT_EQ(cache.Keys()[0].ToString(), "matmul f32 [64,2048]x[2048,48] scale=1 threads=1");
    EXPECT_EQ(h.acquired_entry()->threads, 1) << "the entry runs on the thread count it was created for";
    results.push_back(c);
  }
  omp_set_num_threads(saved_threads);
  EXPECT_EQ(std::memcmp(results[0].raw_data(), results[1].raw_data(), results[0].bytes()), 0);
  EXPECT_EQ(test::CompareTensors(results[0], ReferenceMatmul(a, b), 1e-4, 1e-3), "");
  PrimitiveCache cache(4);
  MatmulHandler h(cache, Settings{}, a.dims(), false, b.dims(), false, 1.0f);
  Tensor c(DataType::kFP32, h.dst_dims());
  ASSERT_TRUE(h.Run(a, b, &c));
  EXPECT_EQ(cache.Keys()[0].ToString(), "matmul f32 [64,2048]x[2048,48] scale=1");
  EXPECT_EQ(h.acquired_entry()->threads, 0);
}

// A deterministic and a default run on two threads at once share one cache
// and keep entries of their own; the deterministic one gives the bits it
// gives alone.
TEST(OneDnnSettingsTest, RunsWithOtherSettingsShareOneCacheAtOnce) {
  std::mt19937 rng(6);
  const Tensor a = test::RandomTensor({64, 2048}, DataType::kFP32, rng);
  const Tensor b = test::RandomTensor({2048, 48}, DataType::kFP32, rng);
  PrimitiveCache cache(8);
  auto run = [&](const Settings& settings, Tensor* c) {
    MatmulHandler h(cache, settings, a.dims(), false, b.dims(), false, 1.0f);
    *c = Tensor(DataType::kFP32, h.dst_dims());
    return h.Run(a, b, c);
  };
  Tensor alone;
  ASSERT_TRUE(run(Deterministic(), &alone));
  std::vector<Tensor> det(4), plain(4);
  std::atomic<bool> ok{true};
  std::thread t1([&] {
    for (Tensor& c : det) {
      if (!run(Deterministic(), &c)) ok = false;
    }
  });
  std::thread t2([&] {
    for (Tensor& c : plain) {
      if (!run(Settings{}, &c)) ok = false;
    }
  });
  t1.join();
  t2.join();
  ASSERT_TRUE(ok);
  std::vector<std::string> keys;
  for (const PrimitiveKey& k : cache.Keys()) keys.push_back(k.ToString());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"matmul f32 [64,2048]x[2048,48] scale=1",
                                            "matmul f32 [64,2048]x[2048,48] scale=1 threads=1"}));
  const Tensor want = ReferenceMatmul(a, b);
  for (const Tensor& c : det) EXPECT_EQ(std::memcmp(c.raw_data(), alone.raw_data(), alone.bytes()), 0);
  for (const Tensor& c : plain) EXPECT_EQ(test::CompareTensors(c, want, 1e-4, 1e-3), "");
}

// A framework op in a compiled cluster (FrameworkOpKernel) runs with the
// settings of the compile: a softmax over a non-innermost axis, which oneDNN
// has only its generic implementation for, falls back under the default
// settings and runs on oneDNN when they allow slow implementations.
TEST(OneDnnSettingsTest, FrameworkOpKernelFollowsTheSettingsItWasMadeWith) {
  const proto::OpDesc op = OpBuilder("softmax").In("X", {"x"}).Out("Out", {"out"}).Attr("axis", int64_t{0}).Build();
  const OpInfo& info = OpRegistry::Global().Get("softmax");
  std::mt19937 rng(7);
  const Dims dims = {17, 33};
  const Tensor x = test::RandomTensor(dims, DataType::kFP32, rng);
  const Tensor want = *test::RunOp(op, {{"x", x}})->GetTensor("out");
  for (bool allow_slow : {false, true}) {
    SCOPED_TRACE(allow_slow ? "slow implementations allowed" : "default settings");
    Settings settings;
    settings.allow_slow_impls = allow_slow;
    std::vector<std::string> names;
    int num_inputs = 0;
    const jit::FrameworkOpKernel kernel(op, info, /*use_onednn=*/true, settings, &names, &num_inputs);
    ASSERT_EQ(names, (std::vector<std::string>{"x", "out"}));
    Tensor out(DataType::kFP32, dims);
    const runtime::BufferView args[2] = {{const_cast<void*>(x.raw_data()), DataType::kFP32, &dims},
                                         {out.raw_mutable_data(DataType::kFP32), DataType::kFP32, &dims}};
    const int64_t before = OneDnnKernelRuns("softmax");
    kernel.Run(args);
    EXPECT_EQ(OneDnnKernelRuns("softmax"), before + (allow_slow ? 1 : 0));
    EXPECT_EQ(test::CompareTensors(out, want, 1e-6, 1e-5), "");
  }
}

// The JIT's own oneDNN kernels create their primitives with the compile's
// settings: deterministic ones under threads=1 keys.
TEST(OneDnnSettingsTest, JitMatmulKernelFollowsTheCompileSettings) {
  jit::FusedMatmulSpec spec;
  spec.x_dims = {11, 37};
  spec.w_dims = {37, 23};
  auto listed = [](const std::string& key) {
    const std::vector<PrimitiveKey> keys = PrimitiveCache::Global().Keys();
    return std::any_of(keys.begin(), keys.end(), [&](const PrimitiveKey& k) { return k.ToString() == key; });
  };
  jit::MakeFusedMatmulKernel(spec, Deterministic(), "matmul_0");
  EXPECT_TRUE(listed("matmul f32 [11,37]x[37,23] scale=1 threads=1"));
  EXPECT_FALSE(listed("matmul f32 [11,37]x[37,23] scale=1"));
  jit::MakeFusedMatmulKernel(spec, Settings{}, "matmul_1");
  EXPECT_TRUE(listed("matmul f32 [11,37]x[37,23] scale=1"));
}

}  // namespace
}  // namespace kiln::onednn
