// A cluster without a compiled object runs its framework ops
// (launch_op/fallback.h): the fallback's registry holds every op of its base,
// its fused attention kernels (the compiler's tiled ones) match the reference
// kernels at odd sizes, causal and not, with gradients wanted in part or not
// flowing in; and a GPT whose every cluster is denied trains as with the JIT
// off, through the fallback and with no compile.
#include "launch_op/fallback.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/data/synthetic_tasks.h"
#include "framework/op_desc.h"
#include "tests/attention_case.h"
#include "tests/builtin_model_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::RandomTensor;
using test::RunOps;

using Case = test::AttentionCase;

TEST(FallbackRegistryTest, HoldsEveryOpOfItsBase) {
  OpRegistry base;
  RegisterAllOps(base);
  OpInfo extra;
  extra.type = "fallback_test_extra";
  extra.reference_kernel = [](ExecContext&) {};
  base.Add(extra);
  const auto fallback = jit::MakeFallbackRegistry(base, HostIsa());
  EXPECT_EQ(fallback->Types(), base.Types());
  // The JIT's own ops are left out (a cluster never holds them).
  test::TestJit jit;
  std::vector<std::string> want = jit.registry().Types();
  want.erase(std::remove_if(want.begin(), want.end(),
                            [](const std::string& t) { return t == "jit_launch" || t == "jit_kernel"; }),
             want.end());
  EXPECT_EQ(jit::MakeFallbackRegistry(jit.registry(), HostIsa())->Types(), want);
}

TEST(FallbackRegistryTest, FusedAttentionMatchesTheReferenceKernels) {
  const auto fallback = jit::MakeFallbackRegistry(OpRegistry::Global(), HostIsa());
  const std::vector<Case> cases = {
      {{2, 3}, 5, 7, 9, 6, false}, {{1, 2}, 11, 11, 8, 8, true}, {{3}, 1, 1, 3, 5, true},
      {{2, 1}, 33, 17, 16, 16, false}, {{1, 1}, 19, 19, 7, 3, true},
  };
  std::mt19937 rng(20261127);
  for (const Case& c : cases) {
    std::map<std::string, Tensor> in = {{"q", RandomTensor(c.Q(), DataType::kFP32, rng)},
                                        {"k", RandomTensor(c.K(), DataType::kFP32, rng)},
                                        {"v", RandomTensor(c.V(), DataType::kFP32, rng)},
                                        {"do", RandomTensor(c.Out(), DataType::kFP32, rng)}};
    // All gradients; dV alone; dQ and dK; none flowing in (all zero).
    const std::vector<std::vector<bool>> wanted = {
        {true, true, true, true}, {false, false, true, true}, {true, true, false, true}, {true, true, true, false}};
    for (const std::vector<bool>& w : wanted) {
      const std::vector<proto::OpDesc> ops =
          test::AttentionOps(c.Scale(), c.causal, w[3], {w[0] ? "dq" : "", w[1] ? "dk" : "", w[2] ? "dv" : ""});
      const auto want = RunOps(ops, in, /*use_onednn=*/false);
      const auto got = RunOps(ops, in, /*use_onednn=*/false, {}, *fallback);
      std::vector<std::string> outs = {"o", "lse"};
      if (w[0]) outs.push_back("dq");
      if (w[1]) outs.push_back("dk");
      if (w[2]) outs.push_back("dv");
      for (const std::string& o : outs) {
        EXPECT_EQ(CompareTensors(got->GetVar(o)->Get(), want->GetVar(o)->Get(), 2e-5, 2e-4), "")
            << c.Name() << " " << o << " wanted " << w[0] << w[1] << w[2] << " dout " << w[3];
      }
    }
  }
}

// Every cluster of a tiny GPT (its causal attention fused) denied: each
// launch runs the fallback, nothing compiles, and the losses are JIT off's.
TEST(FallbackTest, AGptWithEveryClusterDeniedTrainsAsJitOff) {
  const GptConfig c = test::TinyGpt();
  const Model m = BuildGpt(c, test::AdamAt001());
  const Dataset all = MakeSyntheticTokens(160, c.seq_len + 1, c.vocab, /*seed=*/5);
  auto [train, test] = SplitDataset(all, 0.8);
  TrainOptions o;
  o.epochs = 1000;
  o.batch_size = 8;
  o.max_steps = 6;
  const TrainResult off = Train(m, train, test, o);

  test::TestJit jit;
  bool fused = false;
  o.registry = &jit.registry();
  o.program_transform = [&](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    proto::ProgramDesc out = RunPipeline(p, test::KilnTrainPipeline(jit, keep), jit.registry());
    jit::JitOptions options = jit->options();
    for (const std::string& key : jit->cache().Keys()) {
      options.deny_clusters.insert(key);
      for (const auto& op : jit->cache().GetSubgraph(key).block.ops()) fused |= op.type() == "fused_attention";
    }
    jit->Configure(options);
    return out;
  };
  const TrainResult on = Train(m, train, test, o);
  EXPECT_TRUE(fused) << "the clusters hold no fused_attention: the test checks nothing of its kernels";
  EXPECT_EQ(jit->stats().compiles, 0);
  EXPECT_GT(jit->stats().fallback_calls, 0);
  ASSERT_EQ(on.losses.size(), off.losses.size());
  for (size_t i = 0; i < off.losses.size(); ++i) {
    EXPECT_NEAR(on.losses[i], off.losses[i], 1e-4f * std::max(1.0f, std::fabs(off.losses[i]))) << "step " << i;
  }
}

}  // namespace
}  // namespace kiln
