// launch_op/launch_services.cc and launch_op/jit_runtime.cc on a runtime of
// the test's own, with the small cluster of compile_cache_test.cc: the deny
// list, the shadow-check schedule, a failed check denying its cluster once,
// the launch counters, and what ClearCache and ResetStats drop.
#include "launch_op/jit_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/compile_cache_test_util.h"

namespace kiln {
namespace {

using test::Count;
using test::kA;
using test::kB;
using test::Object;
using test::ReluScale;

jit::JitOptions Options(size_t capacity = 256, int recompile_limit = 8) {
  jit::JitOptions o;
  o.cache_capacity = capacity;
  o.recompile_limit = recompile_limit;
  o.compile = test::LoweringCase::DefaultOptions();
  return o;
}

class JitRuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { test::RegisterGateOp(); }
};

// --jit_deny_clusters: a denied key never compiles; other keys do.
TEST_F(JitRuntimeTest, ADeniedClusterRunsItsFrameworkOps) {
  const std::string key = JitSubgraphFingerprint(ReluScale());
  jit::JitOptions o = Options();
  o.deny_clusters = {key};
  jit::JitRuntime jit(o);
  ASSERT_EQ(jit.cache().AddSubgraph(ReluScale()), key);
  const std::string other = jit.cache().AddSubgraph(ReluScale(/*gated=*/true));
  EXPECT_EQ(jit.Compile(key, kA), nullptr);
  EXPECT_EQ(jit.Compile(key, kA), nullptr);
  EXPECT_NE(jit.Compile(other, kA), nullptr);
  const jit::JitStats s = jit.stats();
  EXPECT_EQ(s.denied_calls, 2);
  EXPECT_EQ(s.fallback_calls, 2);
  EXPECT_EQ(s.compiles, 1);
}

TEST_F(JitRuntimeTest, ClearCacheDropsObjectsAndStatsButKeepsSubgraphs) {
  jit::JitRuntime jit(Options(256, /*recompile_limit=*/1));
  const std::string key = jit.cache().AddSubgraph(ReluScale());
  const Object a = jit.Compile(key, kA);
  EXPECT_EQ(jit.Compile(key, kB), nullptr) << "past the limit";
  jit.launch().Count(jit::LaunchEvent::kLaunch);
  jit.ClearCache();
  const jit::JitStats s = jit.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.fallback_calls, 0);
  EXPECT_TRUE(s.compiles_per_key.empty());
  EXPECT_EQ(s.launch.launches, 0);
  EXPECT_TRUE(jit.cache().CachedObjects().empty());
  EXPECT_EQ(jit.cache().FindById(a->id), nullptr) << "even while held";
  EXPECT_EQ(jit.cache().Keys(), std::vector<std::string>{key});
  EXPECT_EQ(jit.cache().GetSubgraph(key).outputs, std::vector<std::string>{"s"});
  const Object b = jit.Compile(key, kB);
  ASSERT_NE(b, nullptr) << "the recompile limit starts afresh";
  EXPECT_NE(b->id, a->id);
  EXPECT_EQ(jit.stats().compiles, 1);
}

TEST_F(JitRuntimeTest, ResetStatsKeepsObjectsAndLaunchCountersCount) {
  jit::JitRuntime jit(Options());
  const std::string key = jit.cache().AddSubgraph(ReluScale());
  const Object a = jit.Compile(key, kA);
  EXPECT_EQ(jit.Compile(key, kA), a);
  const std::vector<std::pair<jit::LaunchEvent, int>> events = {
      {jit::LaunchEvent::kLaunch, 6},       {jit::LaunchEvent::kDonated, 1},     {jit::LaunchEvent::kCopyProtected, 2},
      {jit::LaunchEvent::kFrameworkFallback, 3}, {jit::LaunchEvent::kInputDonated, 4}, {jit::LaunchEvent::kInputKept, 5}};
  std::vector<std::thread> threads;
  for (const auto& [event, n] : events) {
    threads.emplace_back([&jit, event = event, n = n] {
      for (int i = 0; i < 1000 * n; ++i) jit.launch().Count(event);
    });
  }
  for (auto& t : threads) t.join();
  const jit::LaunchStats l = jit.stats().launch;
  EXPECT_EQ(l.launches, 6000);
  EXPECT_EQ(l.donated, 1000);
  EXPECT_EQ(l.copy_protected, 2000);
  EXPECT_EQ(l.framework_fallbacks, 3000);
  EXPECT_EQ(l.inputs_donated, 4000);
  EXPECT_EQ(l.inputs_kept, 5000);
  jit.launch().ResetCounters();
  EXPECT_EQ(jit.stats().launch.launches, 0);
  EXPECT_EQ(jit.stats().compiles, 1) << "ResetCounters keeps the compile counts";
  jit.launch().Count(jit::LaunchEvent::kDonated);
  jit.ResetStats();
  jit::JitStats s = jit.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.compile_ms, 0.0);
  EXPECT_EQ(s.launch.donated, 0);
  EXPECT_EQ(jit.cache().CachedObjects(), std::vector<Object>{a});
  EXPECT_EQ(jit.Compile(key, kA), a);
  s = jit.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.compiles, 0);
}

// Shadow checks: launches 1, 1+N, 1+2N, ... of each cluster are checked, each
// cluster counted on its own; nothing is counted while checks are off.
TEST_F(JitRuntimeTest, BeginLaunchChecksEveryNthLaunchOfEachCluster) {
  jit::JitRuntime jit(Options());
  const std::string a = jit.cache().AddSubgraph(ReluScale());
  const std::string b = jit.cache().AddSubgraph(ReluScale(/*gated=*/true));
  EXPECT_FALSE(jit.launch().BeginLaunch(a).shadow);
  EXPECT_EQ(jit.launch().BeginLaunch(a).launch, 0) << "not counted while checks are off";
  jit::JitOptions o = Options();
  o.shadow.every = 3;
  o.shadow.rtol = 0.25;
  jit.Configure(o);
  std::string checked;
  for (int i = 0; i < 7; ++i) {
    const jit::LaunchChecks c = jit.launch().BeginLaunch(a);
    EXPECT_EQ(c.launch, i + 1);
    EXPECT_EQ(c.tolerances.rtol, 0.25);
    checked += c.shadow ? "x" : ".";
    if (i < 2) {
      EXPECT_EQ(jit.launch().BeginLaunch(b).shadow, i == 0);
    }
  }
  EXPECT_EQ(checked, "x..x..x");
  EXPECT_EQ(jit.stats().shadow_checks, 4);  // a: 1, 4, 7; b: 1
}

// A failed check denies the cluster from the next Compile on, and is kept and
// reported once however many threads fail it at the same time; ClearCache
// forgets it.
TEST_F(JitRuntimeTest, AShadowFailureDeniesTheClusterOnceForAllThreads) {
  jit::JitRuntime jit(Options());
  const std::string key = jit.cache().AddSubgraph(ReluScale());
  const std::string other = jit.cache().AddSubgraph(ReluScale(/*gated=*/true));
  ASSERT_NE(jit.Compile(key, kA), nullptr);
  jit::ShadowFailure f;
  f.key = key;
  f.op = "op #0 'relu' (relu)";
  f.var = "r";
  f.launch = 3;
  std::atomic<int> first{0};
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&] { first += jit.launch().DenyAfterShadowFailure(f); });
  for (auto& t : threads) t.join();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first.load(), 1);
  EXPECT_EQ(Count(err, "shadow check failed for cluster " + key + " at launch 3 of the cluster: op #0 'relu' (relu)"), 1u)
      << err;
  EXPECT_EQ(jit.Compile(key, kA), nullptr) << "cached, but denied";
  EXPECT_NE(jit.Compile(other, kA), nullptr);
  const jit::JitStats s = jit.stats();
  ASSERT_EQ(s.shadow_failures.size(), 1u);
  EXPECT_EQ(s.shadow_failures[0].var, "r");
  EXPECT_EQ(s.denied_calls, 1);
  jit.ClearCache();
  EXPECT_NE(jit.Compile(key, kA), nullptr);
}

}  // namespace
}  // namespace kiln
