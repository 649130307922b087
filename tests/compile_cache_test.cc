// compiler/compile_cache.cc on a cache of the test's own, with a small real
// cluster (relu, scale): single-flight compiles, parallel compiles of
// different signatures, the LRU bound, the recompile limit, FindById, Clear,
// ResetStats, the on_compile hook, the verbose recompile log, unknown keys;
// and the cache key's hashes. Failed compiles and rejected signatures:
// compile_cache_signature_test.cc; the deny list, shadow checks and launch
// counters of a runtime: launch_services_test.cc.
#include "compiler/compile_cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/error.h"
#include "tests/compile_cache_test_util.h"

namespace kiln {
namespace {

using test::Count;
using test::kA;
using test::kB;
using test::kC;
using test::kD;
using test::Object;
using test::ReluScale;
using test::Sig;

jit::CompileCacheOptions Options(size_t capacity = 256, int recompile_limit = 8) {
  jit::CompileCacheOptions o;
  o.cache_capacity = capacity;
  o.recompile_limit = recompile_limit;
  // Every signature compiles on its own here: these tests are about the cache
  // of specialised compiles (tests/dynamic_shapes_test.cc has the dynamic ones).
  o.dynamic = jit::DynamicPolicy::kOff;
  o.compile = test::LoweringCase::DefaultOptions();
  return o;
}

class CompileCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { test::RegisterGateOp(); }
  void TearDown() override { test::g_gate = nullptr; }
};

// The options' default ISA is this CPU's: with AVX-512 on a CPU that has
// only AVX2 the elementwise code could not be generated (every group fell
// back to framework kernels) and fused attention refused to run.
TEST(CompileOptionsTest, TheDefaultIsaIsTheHosts) {
  EXPECT_EQ(jit::CompileOptions{}.isa, HostIsa());
  EXPECT_TRUE(IsaSupported(jit::CompileOptions{}.isa));
}

TEST_F(CompileCacheTest, EightThreadsAskingForOneSignatureCompileItOnce) {
  jit::CompileCache compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  // The first compile is held until the seven others have found its entry.
  test::Gate gate([&](int) { return compiler.stats().hits >= 7; });
  test::g_gate = &gate;
  std::vector<Object> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { got[t] = compiler.Compile(key, kA); });
  for (auto& t : threads) t.join();
  const jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.hits, 7);
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(gate.max_inside(), 1);
  ASSERT_NE(got[0], nullptr);
  for (const Object& o : got) EXPECT_EQ(o, got[0]);
  EXPECT_EQ(compiler.CachedObjects(), std::vector<Object>{got[0]});
}

// A caller that waited for another thread's compile gets an object that
// FindById (the executor launch mode's jit_kernel ops) already finds, and
// statistics that already count it. Before, the waiters were woken before
// the object was registered, and a jit_kernel could fail with "compiled
// object N is no longer cached" (seen in concurrency_test under ASan). The
// window is short: many rounds, each with three waiters.
TEST_F(CompileCacheTest, AWaiterGetsAnObjectThatIsAlreadyRegistered) {
  int missing = 0, uncounted = 0;
  for (int round = 0; round < 300; ++round) {
    jit::CompileCache compiler(Options());
    const std::string key = compiler.AddSubgraph(ReluScale(/*gated=*/true));
    test::Gate gate([&](int) { return compiler.stats().hits >= 3; });
    test::g_gate = &gate;
    std::vector<std::thread> threads;
    std::mutex mu;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        const Object obj = compiler.Compile(key, kA);
        const bool found = obj != nullptr && compiler.FindById(obj->id) == obj;
        const bool counted = compiler.stats().compiles == 1;
        std::lock_guard<std::mutex> lock(mu);
        missing += !found;
        uncounted += !counted;
      });
    }
    for (auto& t : threads) t.join();
    test::g_gate = nullptr;
  }
  EXPECT_EQ(missing, 0) << "callers got an object FindById did not know yet";
  EXPECT_EQ(uncounted, 0) << "callers got an object before the compile was counted";
}

TEST_F(CompileCacheTest, DifferentSignaturesCompileInParallelEachOnce) {
  jit::CompileCache compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  const std::vector<jit::ShapeSignature> sigs = {kA, kB, kC, kD};
  // Each compile is held until all four are in flight and the second caller
  // of each signature has found its entry.
  test::Gate gate([&](int inside) { return inside >= 4 && compiler.stats().hits >= 4; });
  test::g_gate = &gate;
  std::vector<Object> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { got[t] = compiler.Compile(key, sigs[t % 4]); });
  for (auto& t : threads) t.join();
  const jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.compiles, 4);
  EXPECT_EQ(s.hits, 4);
  EXPECT_EQ(s.compiles_per_key.at(key), 4);
  EXPECT_EQ(gate.max_inside(), 4) << "the four compiles ran at the same time";
  for (int t = 0; t < 4; ++t) {
    ASSERT_NE(got[t], nullptr);
    EXPECT_EQ(got[t + 4], got[t]);
    EXPECT_EQ(got[t]->signature, sigs[t]);
    for (int u = 0; u < t; ++u) EXPECT_NE(got[t]->id, got[u]->id);
  }
}

TEST_F(CompileCacheTest, TheCacheDropsTheLeastRecentlyUsedObject) {
  jit::CompileCache compiler(Options(/*capacity=*/2));
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  const Object b = compiler.Compile(key, kB);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{a, b})) << "oldest use first";
  const Object c = compiler.Compile(key, kC);
  EXPECT_EQ(compiler.stats().evictions, 1);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{b, c}));
  // A is compiled again; that evicts B.
  const Object a2 = compiler.Compile(key, kA);
  EXPECT_NE(a2, a);
  EXPECT_EQ(compiler.stats().compiles, 4);
  EXPECT_EQ(compiler.stats().evictions, 2);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{c, a2}));
  // A hit on C makes A the least recently used: B evicts A, not C.
  EXPECT_EQ(compiler.Compile(key, kC), c);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{a2, c}));
  const Object b2 = compiler.Compile(key, kB);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{c, b2}));
  EXPECT_EQ(compiler.Compile(key, kC), c);
  EXPECT_EQ(compiler.stats().hits, 2);
  EXPECT_EQ(compiler.stats().compiles, 5);
  EXPECT_EQ(compiler.stats().evictions, 3);
  // A smaller capacity evicts at once.
  jit::CompileCacheOptions o = compiler.options();
  o.cache_capacity = 1;
  compiler.Configure(o);
  EXPECT_EQ(compiler.stats().evictions, 4);
  EXPECT_EQ(compiler.CachedObjects(), std::vector<Object>{c});
}

// Past the limit a cluster compiles no more: new signatures get null (the
// framework ops), the ones still cached stay compiled.
TEST_F(CompileCacheTest, PastTheRecompileLimitOnlyCachedSignaturesRunCompiled) {
  jit::CompileCache compiler(Options(/*capacity=*/2, /*recompile_limit=*/2));
  const std::string key = compiler.AddSubgraph(ReluScale());
  const std::string other = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  const Object a = compiler.Compile(key, kA);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(compiler.Compile(key, kB), nullptr);
  testing::internal::CaptureStderr();
  EXPECT_EQ(compiler.Compile(key, kC), nullptr);
  EXPECT_EQ(compiler.stats().fallback_calls, 1);
  EXPECT_EQ(compiler.Compile(key, kA), a) << "compiled before and still cached";
  EXPECT_EQ(compiler.Compile(key, kD), nullptr);
  EXPECT_EQ(compiler.Compile(key, kC), nullptr);
  // Two signatures of another key evict kB, then kA (capacity 2): kA is not compiled again.
  ASSERT_NE(compiler.Compile(other, kC), nullptr) << "another key has its own count";
  ASSERT_NE(compiler.Compile(other, kD), nullptr);
  EXPECT_EQ(compiler.Compile(key, kA), nullptr) << "evicted, and the key compiles no more";
  const std::string err = testing::internal::GetCapturedStderr();
  // One line, once: the cluster and what changed from the last signature compiled.
  EXPECT_EQ(err, "kiln jit: cluster " + key +
                     " reached its limit of 2 shape signatures (--jit_recompile_limit); new ones run through the "
                     "framework ops: dims 2 -> 3 in 1 of 1 inputs, first x f32[2,8] -> f32[3,8]\n");
  const jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.fallback_calls, 4);
  EXPECT_EQ(s.compiles, 4);
  EXPECT_EQ(s.hits, 1);
}

TEST_F(CompileCacheTest, FindByIdFindsLiveObjectsOnly) {
  jit::CompileCache compiler(Options(/*capacity=*/1));
  const std::string key = compiler.AddSubgraph(ReluScale());
  EXPECT_EQ(compiler.AddSubgraph(ReluScale()), key) << "AddSubgraph is idempotent";
  EXPECT_EQ(compiler.Keys(), std::vector<std::string>{key});
  Object a = compiler.Compile(key, kA);
  ASSERT_NE(a, nullptr);
  const uint64_t id = a->id;
  EXPECT_EQ(compiler.FindById(id), a);
  EXPECT_EQ(compiler.FindById(id + 1000), nullptr);
  const Object b = compiler.Compile(key, kB);  // evicts A
  EXPECT_NE(b->id, id);
  EXPECT_EQ(compiler.FindById(id), a) << "evicted, but still held";
  a.reset();
  EXPECT_EQ(compiler.FindById(id), nullptr);
  EXPECT_EQ(compiler.FindById(b->id), b);
}

TEST_F(CompileCacheTest, ClearDropsObjectsAndStatsButKeepsSubgraphs) {
  jit::CompileCache compiler(Options(256, /*recompile_limit=*/1));
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  EXPECT_EQ(compiler.Compile(key, kB), nullptr) << "past the limit";
  compiler.Clear();
  const jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.fallback_calls, 0);
  EXPECT_TRUE(s.compiles_per_key.empty());
  EXPECT_TRUE(compiler.CachedObjects().empty());
  EXPECT_EQ(compiler.FindById(a->id), nullptr) << "even while held";
  EXPECT_EQ(compiler.Keys(), std::vector<std::string>{key});
  EXPECT_EQ(compiler.GetSubgraph(key).outputs, std::vector<std::string>{"s"});
  const Object b = compiler.Compile(key, kB);
  ASSERT_NE(b, nullptr) << "the recompile limit starts afresh";
  EXPECT_NE(b->id, a->id);
  EXPECT_EQ(compiler.stats().compiles, 1);
}

TEST_F(CompileCacheTest, ResetStatsKeepsObjects) {
  jit::CompileCache compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  EXPECT_EQ(compiler.Compile(key, kA), a);
  compiler.ResetStats();
  jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.compile_ms, 0.0);
  EXPECT_EQ(compiler.CachedObjects(), std::vector<Object>{a});
  EXPECT_EQ(compiler.Compile(key, kA), a);
  s = compiler.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.compiles, 0);
}

TEST_F(CompileCacheTest, OnCompileRunsOncePerCompileAndNeverOnAHit) {
  jit::CompileCacheOptions o = Options();
  std::vector<std::string> seen;  // "<key> <signature>" per call
  bool fail = false;
  o.on_compile = [&](const jit::CompiledObject& obj, const JitSubgraph& sg) {
    seen.push_back(obj.key + " " + obj.signature.ToString() + " " + sg.outputs.at(0));
    if (fail) throw Error(ErrorCode::kInternal, "dump failed");
  };
  jit::CompileCache compiler(o);
  const std::string key = compiler.AddSubgraph(ReluScale());
  compiler.Compile(key, kA);
  compiler.Compile(key, kA);
  compiler.Compile(key, kB);
  compiler.Compile(key, kB);
  EXPECT_EQ(seen, (std::vector<std::string>{key + " (f32[4,8]) s", key + " (f32[2,8]) s"}));
  fail = true;
  testing::internal::CaptureStderr();
  EXPECT_NE(compiler.Compile(key, kC), nullptr) << "an error in the hook is reported and ignored";
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("after compiling cluster " + key + ": dump failed"), std::string::npos) << err;
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(compiler.stats().compiles, 3);
}

TEST_F(CompileCacheTest, VerboseLogsWhatChangedOnARecompile) {
  jit::CompileCacheOptions o = Options(/*capacity=*/1);
  o.verbose = 1;
  o.cluster_name = [](const std::string&) { return std::string("c7"); };
  jit::CompileCache compiler(o);
  const std::string key = compiler.AddSubgraph(ReluScale());
  testing::internal::CaptureStderr();
  compiler.Compile(key, kA);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "") << "a first compile is not a recompile";
  testing::internal::CaptureStderr();
  compiler.Compile(key, kB);
  compiler.Compile(key, kB);  // a hit: no line
  compiler.Compile(key, kA);  // evicted by B
  err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "kiln jit: cluster c7 recompiles: input x dims [4,8] -> [2,8]\n"
            "kiln jit: cluster c7 recompiles: signature (f32[4,8]) was compiled before (evicted, or options "
            "changed)\n");
  o.verbose = 0;
  compiler.Configure(o);
  testing::internal::CaptureStderr();
  compiler.Compile(key, kC);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST_F(CompileCacheTest, AnUnknownKeyIsNotFound) {
  jit::CompileCache compiler(Options());
  for (const auto& call : std::vector<std::function<void()>>{[&] { compiler.Compile("nope", kA); },
                                                              [&] { compiler.GetSubgraph("nope"); }}) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound);
      EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
    }
  }
}

// The cache key hashes every dim in order: dims swapped or cancelling out
// (what XOR-ing element hashes confuses) hash differently, as do options.
TEST(JitCacheKeyHashTest, SignaturesAndOptionsHashEveryPartInOrder) {
  const std::vector<std::pair<jit::ShapeSignature, jit::ShapeSignature>> differ = {
      {Sig({{4, 8}}), Sig({{8, 4}})},           {Sig({{2, 2}}), Sig({{4, 4}})},
      {Sig({{2, 2}, {3}}), Sig({{4, 4}, {3}})}, {Sig({{4}, {8}}), Sig({{8}, {4}})},
      {Sig({{2, 3}, {4}}), Sig({{2}, {3, 4}})}, {Sig({{1, 2}, {1, 2}}), Sig({{2, 1}, {2, 1}})},
      {Sig({{4, 8}}), Sig({{4, 8}, {}})},       {Sig({}), Sig({{}})}};
  for (const auto& [a, b] : differ) EXPECT_NE(a.Hash(), b.Hash()) << a.ToString() << " vs " << b.ToString();
  jit::ShapeSignature f64 = Sig({{4, 8}});
  f64.inputs[0].dtype = DataType::kFP64;
  EXPECT_NE(f64.Hash(), Sig({{4, 8}}).Hash());
  EXPECT_EQ(Sig({{4, 8}, {8}}).Hash(), Sig({{4, 8}, {8}}).Hash());

  jit::CompileOptions base;
  std::vector<jit::CompileOptions> options(8, base);
  options[1].use_onednn = !base.use_onednn;
  options[2].fuse_elementwise = !base.fuse_elementwise;
  options[3].reuse_buffers = !base.reuse_buffers;
  options[4].isa = base.isa == Isa::kAvx512 ? Isa::kAvx2 : Isa::kAvx512;
  options[5].deterministic = !base.deterministic;
  options[6].allow_slow_impls = !base.allow_slow_impls;
  options[7].amp_compute = ComputeType::kBF16;
  for (size_t i = 0; i < options.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      EXPECT_NE(options[i].Hash(), options[j].Hash()) << i << " vs " << j;
      EXPECT_FALSE(options[i] == options[j]) << i << " vs " << j;
    }
  }
  // The oneDNN settings the cluster's kernels get are the options' own.
  const onednn::Settings from6 = options[6].OneDnnSettings(), from5 = options[5].OneDnnSettings();
  EXPECT_TRUE(from6.allow_slow_impls && !from6.deterministic && from6.amp_compute == ComputeType::kF32);
  EXPECT_TRUE(!from5.allow_slow_impls && from5.deterministic);
  EXPECT_EQ(options[7].OneDnnSettings().amp_compute, ComputeType::kBF16);
  jit::CompileOptions one = base, other = base;  // two flags swapped
  one.use_onednn = true;
  one.fuse_elementwise = false;
  other.use_onednn = false;
  other.fuse_elementwise = true;
  EXPECT_NE(one.Hash(), other.Hash());
  EXPECT_EQ(jit::CompileOptions().Hash(), base.Hash());
}

// Options are part of the cache key: the same signature compiles again under
// other options, and the first object stays cached.
TEST_F(CompileCacheTest, OtherCompileOptionsCompileAgain) {
  jit::CompileCache compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  jit::CompileCacheOptions o = compiler.options();
  o.compile.reuse_buffers = !o.compile.reuse_buffers;
  compiler.Configure(o);
  const Object a2 = compiler.Compile(key, kA);
  EXPECT_NE(a2, a);
  EXPECT_EQ(a2->options, o.compile);
  EXPECT_EQ(compiler.stats().compiles, 2);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{a, a2}));
}

}  // namespace
}  // namespace kiln
