// Shape churn (tools/bench_churn.h): a training run that sees a new batch size
// every step keeps the JIT's cache and by-id map, the executor-mode programs
// and the oneDNN primitive cache within their bounds, in both launch modes,
// whether the clusters keep compiling (recompile limit out of reach) or stop
// at the limit; and the losses stay those of the run without the JIT.
// (Small capacities and 150 sizes keep it fast; docs/jit.md has the figures of
// `kiln bench --bench_what churn` over 10,000 sizes.)
#include "tools/bench_churn.h"

#include <gtest/gtest.h>

#include <cmath>

#include "framework/onednn/primitive_cache.h"
#include "tests/test_jit.h"
#include "tests/train_cases.h"

namespace kiln::tools {
namespace {


constexpr size_t kJitCapacity = 8;
constexpr size_t kPrimitiveCapacity = 48;
constexpr int64_t kSizes = 150;

// The churn runs on the test's own JIT (tests/test_jit.h).
class BenchChurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_primitive_capacity_ = onednn::PrimitiveCache::Global().stats().capacity;
    onednn::PrimitiveCache::Global().set_capacity(kPrimitiveCapacity);
  }
  void TearDown() override { onednn::PrimitiveCache::Global().set_capacity(saved_primitive_capacity_); }
  // Empties the JIT's cache and gives it `mode`, the small capacity,
  // `recompile_limit` and the dynamic shapes policy.
  void Configure(jit::LaunchMode mode, int recompile_limit, jit::DynamicPolicy dynamic = jit::DynamicPolicy::kOff) {
    jit::JitOptions o;
    o.cache_capacity = kJitCapacity;
    o.recompile_limit = recompile_limit;
    o.launch_mode = mode;
    o.dynamic = dynamic;
    jit_->ClearCache();
    jit_->Configure(o);
  }
  // The losses of a churn run, checking the bounds after every step.
  std::vector<float> Churn(const Model& m, const proto::ProgramDesc& program, std::vector<ChurnPoint>* points) {
    std::vector<float> losses;
    ChurnOptions o;
    o.sizes = kSizes;
    o.checkpoints = {50, 100};
    o.on_step = [this, &losses](int64_t batch, float loss) {
      losses.push_back(loss);
      const jit::JitRuntime& c = jit_.runtime();
      EXPECT_LE(c.cache().cache_size(), kJitCapacity) << "batch " << batch;
      // Expired ids are dropped when the map passes 2 * capacity + 64.
      EXPECT_LE(c.cache().ids_tracked(), 2 * kJitCapacity + 65) << "batch " << batch;
      // Objects compiled for every batch size stay beside the LRU's entries.
      EXPECT_LE(c.executor_programs_alive(), static_cast<int64_t>(kJitCapacity) + c.stats().dynamic_compiles)
          << "batch " << batch;
      EXPECT_LE(onednn::PrimitiveCache::Global().stats().size, kPrimitiveCapacity) << "batch " << batch;
    };
    *points = RunChurn(m, program, o, ExecutorOptions(), jit_.runtime(), jit_.registry());
    return losses;
  }
  test::TestJit jit_;
  size_t saved_primitive_capacity_ = 0;
};

void ExpectSameLosses(const std::vector<float>& off, const std::vector<float>& on, const std::string& what) {
  ASSERT_EQ(off.size(), on.size()) << what;
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_NEAR(on[i], off[i], 1e-4 * std::max(1.0f, std::fabs(off[i]))) << what << " step " << i + 1;
  }
}

TEST_F(BenchChurnTest, CachesStayBoundedInBothLaunchModes) {
  const Model m = test::SmallTrainCases()[0].model;  // the MLP
  BuildJitPassOptions bo;
  bo.keep_vars = {m.features, m.labels, m.loss};
  bo.deny_ops = {"softmax_with_cross_entropy"};  // two clusters compete for the caches
  const proto::ProgramDesc program = jit_.ApplyBuildJit(m.train, bo);
  int clusters = 0;
  for (const auto& op : program.blocks(0).ops()) clusters += op.type() == "jit_launch";
  ASSERT_GE(clusters, 2);
  std::vector<ChurnPoint> points;
  const std::vector<float> off = Churn(m, m.train, &points);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points.back().sizes_seen, kSizes);
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    const std::string what = mode == jit::LaunchMode::kRuntime ? "runtime" : "executor";

    // Every size compiles (the limit is out of reach): the LRU evicts.
    Configure(mode, /*recompile_limit=*/1000000);
    ExpectSameLosses(off, Churn(m, program, &points), what + " compiling every size");
    const ChurnPoint& end = points.back();
    EXPECT_EQ(end.jit_compiles, clusters * kSizes) << what;
    EXPECT_EQ(end.jit_evictions, end.jit_compiles - static_cast<int64_t>(kJitCapacity)) << what;
    EXPECT_EQ(end.jit_cache_entries, kJitCapacity) << what;
    EXPECT_EQ(end.framework_fallbacks, 0) << what;
    // The launches ran in `mode`: executor-mode programs exist in it alone.
    EXPECT_EQ(end.executor_programs > 0, mode == jit::LaunchMode::kExecutor) << what;
    EXPECT_EQ(end.primitive_cache_entries, kPrimitiveCapacity) << what << ": the churn fills it";

    // Past the limit the clusters compile no more and new sizes run the
    // framework ops; the cache keeps what was compiled.
    Configure(mode, /*recompile_limit=*/4);
    testing::internal::CaptureStderr();
    ExpectSameLosses(off, Churn(m, program, &points), what + " past the recompile limit");
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("reached its limit of 4 shape signatures"), std::string::npos) << err;
    EXPECT_EQ(points.back().jit_compiles, 4 * clusters) << what;
    EXPECT_EQ(points.back().jit_cache_entries, static_cast<size_t>(4 * clusters)) << what;
    EXPECT_EQ(points.back().framework_fallbacks, clusters * (kSizes - 4)) << what;

    // --jit_dynamic auto: each cluster compiles for its first size and once
    // for every size; the others are instances, past the limit too.
    Configure(mode, /*recompile_limit=*/4, jit::DynamicPolicy::kAuto);
    ExpectSameLosses(off, Churn(m, program, &points), what + " with dynamic shapes");
    const jit::JitStats s = jit_.runtime().stats();
    EXPECT_EQ(s.dynamic_compiles, clusters) << what;
    EXPECT_EQ(points.back().jit_compiles, 2 * clusters) << what;
    EXPECT_EQ(points.back().framework_fallbacks, 0) << what;
    EXPECT_EQ(s.instances, clusters * (kSizes - 2)) << what;
  }
}

}  // namespace
}  // namespace kiln::tools
