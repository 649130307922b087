// Threads sharing the JIT compiler and the oneDNN primitive cache. Eight
// threads compile and launch the same and different clusters (the small
// models' training programs at two batch sizes) through one JIT of the
// test's own (tests/test_jit.h) and jit_launch, in both launch modes; eight
// executors run the JIT-off programs through PrimitiveCache::Global(), also
// with a capacity so small that entries are evicted while other threads use
// them. Every thread's losses equal the single-threaded run's, and each
// (cluster, shape signature) compiles once however many threads ask.
//
// The ThreadSanitizer build (-DKILN_TSAN=ON, run by tools/setup.sh --test)
// runs this file; the normal build runs it too.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "framework/onednn/primitive_cache.h"
#include "framework/trainer.h"
#include "tests/test_jit.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

using onednn::PrimitiveCache;

constexpr int kThreads = 8;
constexpr int kSteps = 2;
constexpr int64_t kBatches[] = {16, 24};

// One model's program at one batch size, its ops from `registry`.
struct Config {
  const test::TrainCase* c;
  const proto::ProgramDesc* program;
  int64_t batch;
  const OpRegistry* registry;
};

std::vector<float> Train(const Config& cfg) {
  const Model& m = cfg.c->model;
  Scope scope;
  Executor({}, *cfg.registry).RunProgram(m.startup, scope);
  Executor exec({}, *cfg.registry);
  auto plan = exec.Prepare(*cfg.program, 0, {m.loss});
  std::vector<float> losses;
  for (int s = 0; s < kSteps; ++s) {
    const Dataset b = SliceRows(cfg.c->train, s * cfg.batch, (s + 1) * cfg.batch);
    FeedTensor(cfg.program->blocks(0), scope, m.features, b.features);
    FeedTensor(cfg.program->blocks(0), scope, m.labels, b.labels);
    exec.Run(*plan, scope);
    losses.push_back(scope.GetVar(m.loss)->Get().data<float>()[0]);
  }
  return losses;
}

// Runs config t % configs.size() on thread t, all threads released at once.
// A thread's error fails the test (naming the thread) instead of ending the
// process.
std::vector<std::vector<float>> TrainOnThreads(const std::vector<Config>& configs) {
  std::vector<std::vector<float>> losses(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      try {
        losses[t] = Train(configs[t % configs.size()]);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  return losses;
}

void ExpectSameLosses(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<float>& w = want[t % want.size()];
    ASSERT_EQ(got[t].size(), w.size()) << "thread " << t;
    for (size_t s = 0; s < w.size(); ++s) EXPECT_FLOAT_EQ(got[t][s], w[s]) << "thread " << t << " step " << s;
  }
}

class ConcurrencyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cases_ = new std::vector<test::TrainCase>(test::SmallTrainCases()); }
  static void TearDownTestSuite() { delete cases_; }

  // Every model's training program through build_jit_pass, its subgraphs
  // stored in `jit`.
  static std::vector<proto::ProgramDesc> Jitted(test::TestJit& jit) {
    std::vector<proto::ProgramDesc> jitted;
    for (const test::TrainCase& c : *cases_) {
      BuildJitPassOptions o;
      o.keep_vars = {c.model.features, c.model.labels, c.model.loss};
      // With the loss left out each program has a forward and a backward
      // cluster, so threads also launch different clusters of one program.
      o.deny_ops = {"softmax_with_cross_entropy"};
      jitted.push_back(jit.ApplyBuildJit(c.model.train, o));
    }
    return jitted;
  }

  // Every model at every batch size: 6 configs on 8 threads, so two configs
  // run on two threads at once (same clusters, same shapes), and every
  // cluster is asked for two shape signatures at once. The programs are
  // `jitted` (run with `jit`'s registry), or the training programs when
  // `jit` is null.
  static std::vector<Config> Configs(const test::TestJit* jit = nullptr,
                                     const std::vector<proto::ProgramDesc>* jitted = nullptr) {
    std::vector<Config> configs;
    const OpRegistry* registry = jit != nullptr ? &jit->registry() : &OpRegistry::Global();
    for (size_t i = 0; i < cases_->size(); ++i) {
      for (int64_t batch : kBatches) {
        const proto::ProgramDesc* program = jit != nullptr ? &(*jitted)[i] : &(*cases_)[i].model.train;
        configs.push_back({&(*cases_)[i], program, batch, registry});
      }
    }
    return configs;
  }

  static inline std::vector<test::TrainCase>* cases_ = nullptr;
};

TEST_F(ConcurrencyTest, EightThreadsCompileAndLaunchTheSameAndDifferentClusters) {
  test::TestJit jit;
  const std::vector<proto::ProgramDesc> jitted = Jitted(jit);
  const std::vector<Config> configs = Configs(&jit, &jitted);
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit->SetLaunchMode(mode);
    // Single-threaded: the losses, and how many compiles all configs need.
    jit->ClearCache();
    std::vector<std::vector<float>> want;
    for (const Config& cfg : configs) want.push_back(Train(cfg));
    const int64_t compiles = jit->stats().compiles;
    ASSERT_GT(compiles, static_cast<int64_t>(configs.size()));

    jit->ClearCache();
    const auto got = TrainOnThreads(configs);
    ExpectSameLosses(got, want);
    const jit::JitStats stats = jit->stats();
    EXPECT_EQ(stats.compiles, compiles) << "a (cluster, signature) compiled twice, or one was missed";
    EXPECT_EQ(stats.failures, 0);
    EXPECT_GT(stats.hits, 0);
  }
}

TEST_F(ConcurrencyTest, ExecutorsShareThePrimitiveCacheEvenWhileItEvicts) {
  const std::vector<Config> configs = Configs();
  PrimitiveCache& cache = PrimitiveCache::Global();
  const size_t capacity = cache.stats().capacity;
  cache.Clear();
  std::vector<std::vector<float>> want;
  for (const Config& cfg : configs) want.push_back(Train(cfg));
  const size_t entries = cache.stats().size;
  ASSERT_GT(entries, 8u) << "the models should use oneDNN primitives";

  cache.Clear();
  ExpectSameLosses(TrainOnThreads(configs), want);
  EXPECT_EQ(cache.stats().size, entries) << "the threads built other primitives than one thread does";
  EXPECT_GT(cache.stats().hits, 0);

  // Far fewer entries than the threads use: entries are evicted while other
  // threads still run them (the shared_ptr keeps them alive).
  cache.Clear();
  cache.set_capacity(3);
  ExpectSameLosses(TrainOnThreads(configs), want);
  EXPECT_GT(cache.stats().evictions, 0);
  cache.set_capacity(capacity);
  cache.Clear();
}

}  // namespace
}  // namespace kiln
