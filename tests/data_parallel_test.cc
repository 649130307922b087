// The data-parallel transform (framework/distributed/data_parallel.h): where
// the buckets' collectives go, that the JIT's clusters do not span them, and
// that in one process (a world of one rank) the program trains exactly as
// without them. Runs across ranks are tests/distributed_test.py's.
#include <gtest/gtest.h>

#include <map>

#include "framework/distributed/data_parallel.h"
#include "framework/executor.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/trainer.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"
#include "tests/test_jit.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

Model Mlp(OptimizerKind optimizer) {
  TrainConfig tc;
  tc.optimizer = optimizer;
  return BuildMlp(MlpConfig{64, {32, 16}, 10}, tc);
}

std::vector<std::string> Types(const proto::ProgramDesc& p) {
  std::vector<std::string> out;
  for (const auto& op : p.blocks(0).ops()) out.push_back(op.type());
  return out;
}

int IndexOf(const std::vector<std::string>& types, const std::string& type, int from = 0) {
  for (int i = from; i < static_cast<int>(types.size()); ++i) {
    if (types[i] == type) return i;
  }
  return -1;
}

TEST(DataParallelTest, OneBucketStartsAfterTheLastGradientAndWaitsBeforeTheUpdates) {
  Model m = Mlp(OptimizerKind::kSgd);
  const DataParallelReport r = AppendDataParallel(&m.train);
  ASSERT_EQ(r.buckets.size(), 1u) << r.ToString();
  EXPECT_EQ(r.buckets[0].grads.size(), 6u);  // 3 weights, 3 biases
  ValidateProgram(m.train);
  const std::vector<std::string> types = Types(m.train);
  const int start = IndexOf(types, "c_allreduce_start"), wait = IndexOf(types, "c_allreduce_wait");
  ASSERT_GT(start, 0);
  EXPECT_EQ(wait, start + 1);  // nothing after the last gradient but the updates
  EXPECT_EQ(types[wait + 1], "sgd");
  EXPECT_EQ(IndexOf(types, "sgd"), wait + 1);  // every update reads averaged gradients
  EXPECT_EQ(r.buckets[0].start_after, start - 1);
}

// Small buckets: one per gradient or two; each starts right after the op that
// finishes its last gradient, so the backward ops after it overlap with it.
TEST(DataParallelTest, SmallBucketsStartDuringTheBackwardPass) {
  Model m = Mlp(OptimizerKind::kAdam);
  DataParallelOptions o;
  o.bucket_bytes = 1024;
  const DataParallelReport r = AppendDataParallel(&m.train, o);
  ValidateProgram(m.train);
  EXPECT_GE(r.buckets.size(), 4u) << r.ToString();
  const proto::BlockDesc& b = m.train.blocks(0);
  for (const auto& bucket : r.buckets) {
    ASSERT_GE(bucket.start_after, 0);
    // The op before the start writes one of the bucket's gradients ...
    const std::vector<std::string> outs = OutputVars(b.ops(bucket.start_after));
    bool writes_one = false;
    for (const auto& g : bucket.grads) writes_one |= std::find(outs.begin(), outs.end(), g) != outs.end();
    EXPECT_TRUE(writes_one) << bucket.name << " starts after " << OpLabel(b.ops(bucket.start_after), bucket.start_after);
    // ... and no op between start and wait reads one of them.
    int i = bucket.start_after + 1;
    ASSERT_EQ(b.ops(i).type(), "c_allreduce_start");
    for (++i; b.ops(i).type() != "c_allreduce_wait" || FindAttr(b.ops(i), "bucket")->s() != bucket.name; ++i) {
      const std::vector<std::string> reads = InputVars(b.ops(i));
      for (const auto& g : bucket.grads) {
        EXPECT_EQ(std::find(reads.begin(), reads.end(), g), reads.end()) << OpLabel(b.ops(i), i) << " reads " << g;
      }
    }
  }
  const std::vector<std::string> types = Types(m.train);
  EXPECT_LT(IndexOf(types, "c_allreduce_start"), IndexOf(types, "matmul_grad", IndexOf(types, "matmul_grad") + 1))
      << "the first bucket starts before the backward pass ends";
}

TEST(DataParallelTest, DoesNotFireTwiceOrWithoutUpdates) {
  Model m = Mlp(OptimizerKind::kSgd);
  AppendDataParallel(&m.train);
  EXPECT_NE(test::ErrorOf([&] { AppendDataParallel(&m.train); }).find("already averages gradients"),
            std::string::npos);
  Model f = Mlp(OptimizerKind::kSgd);
  EXPECT_NE(test::ErrorOf([&] { AppendDataParallel(&f.forward); }).find("no optimizer op reads a gradient"),
            std::string::npos);
}

// build_jit_pass keeps every cluster on one side of each collective.
TEST(DataParallelTest, ClustersDoNotSpanTheCollectives) {
  test::TestJit jit;
  Model m = Mlp(OptimizerKind::kMomentum);
  DataParallelOptions o;
  o.bucket_bytes = 4096;
  AppendDataParallel(&m.train, o);
  BuildJitPassOptions bo;
  bo.keep_vars = {m.features, m.labels, m.loss};
  BuildJitReport report;
  jit.ApplyBuildJit(m.train, bo, &report);
  ASSERT_FALSE(report.clusters.empty());
  // Op labels are "op #<index> '<type>'": compare indices with the collectives'.
  std::vector<int> collectives;
  for (int i = 0; i < m.train.blocks(0).ops_size(); ++i) {
    if (m.train.blocks(0).ops(i).type().rfind("c_allreduce", 0) == 0) collectives.push_back(i);
  }
  for (const auto& c : report.clusters) {
    std::vector<int> idx;
    for (const auto& label : c.ops) idx.push_back(std::stoi(label.substr(label.find('#') + 1)));
    for (int k : collectives) {
      const bool before = std::all_of(idx.begin(), idx.end(), [k](int i) { return i < k; });
      const bool after = std::all_of(idx.begin(), idx.end(), [k](int i) { return i > k; });
      EXPECT_TRUE(before || after) << c.key << " spans op #" << k;
    }
  }
}

// The updates after a bucket's wait read only averaged gradients (no data
// edge to each other): they compile as one cluster, not one op each.
TEST(DataParallelTest, UpdatesAfterAWaitFormOneCluster) {
  test::TestJit jit;
  Model m = Mlp(OptimizerKind::kMomentum);
  AppendDataParallel(&m.train, DataParallelOptions{});
  BuildJitPassOptions bo;
  bo.keep_vars = {m.features, m.labels, m.loss};
  BuildJitReport report;
  jit.ApplyBuildJit(m.train, bo, &report);
  int updates_clustered = 0;
  for (const auto& c : report.clusters) {
    int momentum = 0;
    for (const auto& label : c.ops) momentum += label.find("'momentum'") != std::string::npos;
    if (momentum > 0) {
      EXPECT_EQ(momentum, static_cast<int>(c.ops.size())) << c.key;
    }
    updates_clustered += momentum;
  }
  EXPECT_EQ(updates_clustered, static_cast<int>(m.params.size()));
  for (const auto& e : report.excluded) EXPECT_NE(e.type, "momentum") << e.op;
}

// In one process the averages are the values themselves: the same losses,
// bit for bit, as the program without them.
TEST(DataParallelTest, OneProcessTrainsAsWithoutTheCollectives) {
  const test::TrainCase base = test::SmallTrainCases()[0];
  Model dp = base.model;
  DataParallelOptions o;
  o.bucket_bytes = 2048;
  AppendDataParallel(&dp.train, o);
  TrainOptions t;
  t.max_steps = 12;
  const TrainResult plain = Train(base.model, base.train, base.test, t);
  const TrainResult averaged = Train(dp, base.train, base.test, t);
  ASSERT_EQ(plain.losses.size(), averaged.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(plain.losses[i], averaged.losses[i]) << i;
}

}  // namespace
}  // namespace kiln
