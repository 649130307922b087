// compiler/jit_compiler.cc on its own JitCompiler (not Instance()), with a
// small real cluster (relu, scale): single-flight compiles, parallel compiles
// of different signatures, the LRU bound, the recompile limit, failed
// compiles answered from the cache, FindById, ClearCache, ResetStats, launch
// counters, the on_compile hook, the verbose recompile log, unknown keys; and
// the cache key's hashes.
#include "compiler/jit_compiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using jit::JitCompiler;
using Object = std::shared_ptr<const jit::CompiledObject>;

// Holds the compiles that reach it (in the test_gate op's shape inference)
// until ready(number of compiles held) is true; from then on lets every
// compile through.
class Gate {
 public:
  explicit Gate(std::function<bool(int)> ready) : ready_(std::move(ready)) {}
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    max_inside_ = std::max(max_inside_, inside_);
    // Only a guard against hanging when the compiler is broken (the test's
    // assertions then fail); no timing is checked.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!open_ && !ready_(inside_) && std::chrono::steady_clock::now() < give_up) {
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    open_ = true;
    --inside_;
    cv_.notify_all();
  }
  int max_inside() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_inside_;
  }

 private:
  std::function<bool(int)> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0, max_inside_ = 0;
  bool open_ = false;
};
Gate* g_gate = nullptr;  // set while a test's threads run

// test_gate: Out = X; each compile of a cluster holding it passes g_gate.
void RegisterGateOp() {
  if (OpRegistry::Global().Find("test_gate") != nullptr) return;
  OpInfo info;
  info.type = "test_gate";
  info.doc = "test op: Out = X; its shape inference waits at the test's gate";
  info.inputs = {{"X"}};
  info.outputs = {{"Out"}};
  info.infer_shape = [](InferShapeContext& ctx) {
    if (g_gate != nullptr) g_gate->Pass();
    ctx.SetOutput("Out", ctx.InputDims("X"), ctx.InputDtype("X"));
  };
  info.reference_kernel = [](ExecContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X")); };
  OpRegistry::GlobalForRegistration().Add(std::move(info));
}

// relu(x) = r, scale(r) = s (gated: test_gate(x) first).
JitSubgraph ReluScale(bool gated = false) {
  test::LoweringCase c;
  const std::string x = gated ? "g" : "x";
  if (gated) c.ops.push_back(OpBuilder("test_gate").In("X", {"x"}).Out("Out", {"g"}).Build());
  c.ops.push_back(OpBuilder("relu").In("X", {x}).Out("Out", {"r"}).Build());
  c.ops.push_back(OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 2.0f).Build());
  c.inputs = {{"x", {4, 8}}};
  c.outputs = {"s"};
  return test::MakeSubgraph(c);
}

jit::ShapeSignature Sig(const std::vector<Dims>& dims) {
  jit::ShapeSignature sig;
  for (const Dims& d : dims) sig.inputs.push_back({DataType::kFP32, d});
  return sig;
}
const jit::ShapeSignature kA = Sig({{4, 8}}), kB = Sig({{2, 8}}), kC = Sig({{3, 8}}), kD = Sig({{1, 8}});

jit::JitCompilerOptions Options(size_t capacity = 256, int recompile_limit = 8) {
  jit::JitCompilerOptions o;
  o.cache_capacity = capacity;
  o.recompile_limit = recompile_limit;
  o.compile = test::LoweringCase::DefaultOptions();
  return o;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class JitCompilerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { RegisterGateOp(); }
  void TearDown() override { g_gate = nullptr; }
};

TEST_F(JitCompilerTest, EightThreadsAskingForOneSignatureCompileItOnce) {
  JitCompiler compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  // The first compile is held until the seven others have found its entry.
  Gate gate([&](int) { return compiler.stats().hits >= 7; });
  g_gate = &gate;
  std::vector<Object> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { got[t] = compiler.Compile(key, kA); });
  for (auto& t : threads) t.join();
  const jit::JitStats s = compiler.stats();
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
TEST_F(JitCompilerTest, AWaiterGetsAnObjectThatIsAlreadyRegistered) {
  int missing = 0, uncounted = 0;
  for (int round = 0; round < 300; ++round) {
    JitCompiler compiler(Options());
    const std::string key = compiler.AddSubgraph(ReluScale(/*gated=*/true));
    Gate gate([&](int) { return compiler.stats().hits >= 3; });
    g_gate = &gate;
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
    g_gate = nullptr;
  }
  EXPECT_EQ(missing, 0) << "callers got an object FindById did not know yet";
  EXPECT_EQ(uncounted, 0) << "callers got an object before the compile was counted";
}

TEST_F(JitCompilerTest, DifferentSignaturesCompileInParallelEachOnce) {
  JitCompiler compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  const std::vector<jit::ShapeSignature> sigs = {kA, kB, kC, kD};
  // Each compile is held until all four are in flight and the second caller
  // of each signature has found its entry.
  Gate gate([&](int inside) { return inside >= 4 && compiler.stats().hits >= 4; });
  g_gate = &gate;
  std::vector<Object> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { got[t] = compiler.Compile(key, sigs[t % 4]); });
  for (auto& t : threads) t.join();
  const jit::JitStats s = compiler.stats();
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

TEST_F(JitCompilerTest, TheCacheDropsTheLeastRecentlyUsedObject) {
  JitCompiler compiler(Options(/*capacity=*/2));
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
  jit::JitCompilerOptions o = compiler.options();
  o.cache_capacity = 1;
  compiler.Configure(o);
  EXPECT_EQ(compiler.stats().evictions, 4);
  EXPECT_EQ(compiler.CachedObjects(), std::vector<Object>{c});
}

// Past the limit a cluster compiles no more: new signatures get null (the
// framework ops), the ones still cached stay compiled.
TEST_F(JitCompilerTest, PastTheRecompileLimitOnlyCachedSignaturesRunCompiled) {
  JitCompiler compiler(Options(/*capacity=*/2, /*recompile_limit=*/2));
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
  EXPECT_EQ(Count(err, "reached 2 shape signatures (limit 2"), 1u) << err;
  EXPECT_EQ(Count(err, "it compiles no more"), 1u) << err;
  EXPECT_NE(err.find(key), std::string::npos) << err;
  const jit::JitStats s = compiler.stats();
  EXPECT_EQ(s.fallback_calls, 4);
  EXPECT_EQ(s.compiles, 4);
  EXPECT_EQ(s.hits, 1);
}

// --jit_deny_clusters: a denied key never compiles; other keys do.
TEST_F(JitCompilerTest, ADeniedClusterRunsItsFrameworkOps) {
  JitCompiler probe(Options());
  const std::string key = probe.AddSubgraph(ReluScale());
  jit::JitCompilerOptions o = Options();
  o.deny_clusters = {key};
  JitCompiler compiler(o);
  ASSERT_EQ(compiler.AddSubgraph(ReluScale()), key);
  const std::string other = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  EXPECT_EQ(compiler.Compile(key, kA), nullptr);
  EXPECT_EQ(compiler.Compile(key, kA), nullptr);
  EXPECT_NE(compiler.Compile(other, kA), nullptr);
  const jit::JitStats s = compiler.stats();
  EXPECT_EQ(s.denied_calls, 2);
  EXPECT_EQ(s.fallback_calls, 2);
  EXPECT_EQ(s.compiles, 1);
}

TEST_F(JitCompilerTest, FindByIdFindsLiveObjectsOnly) {
  JitCompiler compiler(Options(/*capacity=*/1));
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

TEST_F(JitCompilerTest, ClearCacheDropsObjectsAndStatsButKeepsSubgraphs) {
  JitCompiler compiler(Options(256, /*recompile_limit=*/1));
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  EXPECT_EQ(compiler.Compile(key, kB), nullptr) << "past the limit";
  compiler.Count(jit::LaunchEvent::kLaunch);
  compiler.ClearCache();
  const jit::JitStats s = compiler.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.fallback_calls, 0);
  EXPECT_TRUE(s.compiles_per_key.empty());
  EXPECT_EQ(s.launch.launches, 0);
  EXPECT_TRUE(compiler.CachedObjects().empty());
  EXPECT_EQ(compiler.FindById(a->id), nullptr) << "even while held";
  EXPECT_EQ(compiler.Keys(), std::vector<std::string>{key});
  EXPECT_EQ(compiler.GetSubgraph(key).outputs, std::vector<std::string>{"s"});
  const Object b = compiler.Compile(key, kB);
  ASSERT_NE(b, nullptr) << "the recompile limit starts afresh";
  EXPECT_NE(b->id, a->id);
  EXPECT_EQ(compiler.stats().compiles, 1);
}

TEST_F(JitCompilerTest, ResetStatsKeepsObjectsAndLaunchCountersCount) {
  JitCompiler compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  EXPECT_EQ(compiler.Compile(key, kA), a);
  const std::vector<std::pair<jit::LaunchEvent, int>> events = {
      {jit::LaunchEvent::kLaunch, 6},       {jit::LaunchEvent::kDonated, 1},     {jit::LaunchEvent::kCopyProtected, 2},
      {jit::LaunchEvent::kFrameworkFallback, 3}, {jit::LaunchEvent::kInputDonated, 4}, {jit::LaunchEvent::kInputKept, 5}};
  std::vector<std::thread> threads;
  for (const auto& [event, n] : events) {
    threads.emplace_back([&compiler, event = event, n = n] {
      for (int i = 0; i < 1000 * n; ++i) compiler.Count(event);
    });
  }
  for (auto& t : threads) t.join();
  const jit::LaunchStats l = compiler.stats().launch;
  EXPECT_EQ(l.launches, 6000);
  EXPECT_EQ(l.donated, 1000);
  EXPECT_EQ(l.copy_protected, 2000);
  EXPECT_EQ(l.framework_fallbacks, 3000);
  EXPECT_EQ(l.inputs_donated, 4000);
  EXPECT_EQ(l.inputs_kept, 5000);
  compiler.ResetLaunchStats();
  EXPECT_EQ(compiler.stats().launch.launches, 0);
  EXPECT_EQ(compiler.stats().compiles, 1) << "ResetLaunchStats keeps the compile counts";
  compiler.Count(jit::LaunchEvent::kDonated);
  compiler.ResetStats();
  jit::JitStats s = compiler.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.compile_ms, 0.0);
  EXPECT_EQ(s.launch.donated, 0);
  EXPECT_EQ(compiler.CachedObjects(), std::vector<Object>{a});
  EXPECT_EQ(compiler.Compile(key, kA), a);
  s = compiler.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.compiles, 0);
}

TEST_F(JitCompilerTest, OnCompileRunsOncePerCompileAndNeverOnAHit) {
  jit::JitCompilerOptions o = Options();
  std::vector<std::string> seen;  // "<key> <signature>" per call
  bool fail = false;
  o.on_compile = [&](const jit::CompiledObject& obj, const JitSubgraph& sg) {
    seen.push_back(obj.key + " " + obj.signature.ToString() + " " + sg.outputs.at(0));
    if (fail) throw Error(ErrorCode::kInternal, "dump failed");
  };
  JitCompiler compiler(o);
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

TEST_F(JitCompilerTest, VerboseLogsWhatChangedOnARecompile) {
  jit::JitCompilerOptions o = Options(/*capacity=*/1);
  o.verbose = 1;
  o.cluster_name = [](const std::string&) { return std::string("c7"); };
  JitCompiler compiler(o);
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

TEST_F(JitCompilerTest, AnUnknownKeyIsNotFound) {
  JitCompiler compiler(Options());
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
  std::vector<jit::CompileOptions> options(6, base);
  options[1].use_onednn = !base.use_onednn;
  options[2].fuse_elementwise = !base.fuse_elementwise;
  options[3].reuse_buffers = !base.reuse_buffers;
  options[4].isa = base.isa == Isa::kAvx512 ? Isa::kAvx2 : Isa::kAvx512;
  options[5].deterministic = !base.deterministic;
  for (size_t i = 0; i < options.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(options[i].Hash(), options[j].Hash()) << i << " vs " << j;
  }
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
TEST_F(JitCompilerTest, OtherCompileOptionsCompileAgain) {
  JitCompiler compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale());
  const Object a = compiler.Compile(key, kA);
  jit::JitCompilerOptions o = compiler.options();
  o.compile.reuse_buffers = !o.compile.reuse_buffers;
  compiler.Configure(o);
  const Object a2 = compiler.Compile(key, kA);
  EXPECT_NE(a2, a);
  EXPECT_EQ(a2->options, o.compile);
  EXPECT_EQ(compiler.stats().compiles, 2);
  EXPECT_EQ(compiler.CachedObjects(), (std::vector<Object>{a, a2}));
}

// Shadow checks: launches 1, 1+N, 1+2N, ... of each cluster are checked, each
// cluster counted on its own; nothing is counted while checks are off.
TEST_F(JitCompilerTest, BeginLaunchChecksEveryNthLaunchOfEachCluster) {
  JitCompiler compiler(Options());
  const std::string a = compiler.AddSubgraph(ReluScale());
  const std::string b = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  EXPECT_FALSE(compiler.BeginLaunch(a).shadow);
  EXPECT_EQ(compiler.BeginLaunch(a).launch, 0) << "not counted while checks are off";
  jit::JitCompilerOptions o = Options();
  o.shadow.every = 3;
  o.shadow.rtol = 0.25;
  compiler.Configure(o);
  std::string checked;
  for (int i = 0; i < 7; ++i) {
    const jit::LaunchChecks c = compiler.BeginLaunch(a);
    EXPECT_EQ(c.launch, i + 1);
    EXPECT_EQ(c.tolerances.rtol, 0.25);
    checked += c.shadow ? "x" : ".";
    if (i < 2) {
      EXPECT_EQ(compiler.BeginLaunch(b).shadow, i == 0);
    }
  }
  EXPECT_EQ(checked, "x..x..x");
  EXPECT_EQ(compiler.stats().shadow_checks, 4);  // a: 1, 4, 7; b: 1
}

// A failed check denies the cluster from the next Compile on, and is kept and
// reported once however many threads fail it at the same time; ClearCache
// forgets it.
TEST_F(JitCompilerTest, AShadowFailureDeniesTheClusterOnceForAllThreads) {
  JitCompiler compiler(Options());
  const std::string key = compiler.AddSubgraph(ReluScale());
  const std::string other = compiler.AddSubgraph(ReluScale(/*gated=*/true));
  ASSERT_NE(compiler.Compile(key, kA), nullptr);
  jit::ShadowFailure f;
  f.key = key;
  f.op = "op #0 'relu' (relu)";
  f.var = "r";
  f.launch = 3;
  std::atomic<int> first{0};
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&] { first += compiler.DenyAfterShadowFailure(f); });
  for (auto& t : threads) t.join();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first.load(), 1);
  EXPECT_EQ(Count(err, "shadow check failed for cluster " + key + " at launch 3 of the cluster: op #0 'relu' (relu)"), 1u)
      << err;
  EXPECT_EQ(compiler.Compile(key, kA), nullptr) << "cached, but denied";
  EXPECT_NE(compiler.Compile(other, kA), nullptr);
  const jit::JitStats s = compiler.stats();
  ASSERT_EQ(s.shadow_failures.size(), 1u);
  EXPECT_EQ(s.shadow_failures[0].var, "r");
  EXPECT_EQ(s.denied_calls, 1);
  compiler.ClearCache();
  EXPECT_NE(compiler.Compile(key, kA), nullptr);
}

}  // namespace
}  // namespace kiln
