// attention_fusion_pass: goldens for where it fires (softmax with its
// backward, the causal softmax forward only, the transformer's training
// program) and where it must not (probabilities fetched or read by another
// op, a scores matmul without transpose_Y, grad ops there in part); its
// report, registration and place in the pipeline; and training with it on
// and off (the same losses within 1e-4 on the JIT and on the reference
// kernels, the JIT on agreeing with the JIT off), with the probabilities
// gone from the peak tensor bytes.
#include "passes/attention_fusion_pass.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/allocator.h"
#include "framework/backward.h"
#include "framework/data/synthetic.h"
#include "framework/file_util.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/trainer.h"
#include "framework/validate.h"
#include "passes/pass_registry.h"
#include "passes/pipeline.h"
#include "tests/golden_util.h"
#include "tests/program_maker.h"
#include "tests/test_jit.h"

namespace kiln {
namespace {

using ir::Graph;

// ---- Programs ------------------------------------------------------------------

// Programs built with shape inference, plus the attention pattern.
struct AttentionProgram : test::ProgramMaker {
  AttentionProgram() : ProgramMaker(test::OutputDecl::kByShapeInference) {}
  // q, k, v [-1, 2, s, 4] -> `prefix`s = scores, `prefix`p = probs, `prefix`o.
  AttentionProgram& Attention(const std::string& prefix, int64_t s, const std::string& softmax = "softmax",
                              bool transpose_y = true) {
    const std::string q = prefix + "q", k = prefix + "k", v = prefix + "v";
    Var(q, {-1, 2, s, 4}).Var(k, transpose_y ? Dims{-1, 2, s, 4} : Dims{-1, 2, 4, s}).Var(v, {-1, 2, s, 4});
    Op(OpBuilder("matmul").In("X", {q}).In("Y", {k}).Out("Out", {prefix + "s"}).Attr("transpose_Y", transpose_y)
           .Attr("alpha", 0.5f));
    Op(OpBuilder(softmax).In("X", {prefix + "s"}).Out("Out", {prefix + "p"}));
    Op(OpBuilder("matmul").In("X", {prefix + "p"}).In("Y", {v}).Out("Out", {prefix + "o"}));
    return *this;
  }
  AttentionProgram& Mean(const std::string& x, const std::string& out) {
    Op(OpBuilder("mean").In("X", {x}).Out("Out", {out}));
    return *this;
  }
};

AttentionFusionPassOptions Keep(const std::set<std::string>& keep) {
  AttentionFusionPassOptions o;
  o.keep_vars = keep;
  return o;
}

bool Fuse(proto::ProgramDesc* p, const AttentionFusionPassOptions& o, AttentionFusionReport* report = nullptr) {
  Graph graph = Graph::FromBlock(p->blocks(0));
  const bool changed = AttentionFusionPass(o, report).Run(graph);
  graph.Verify();
  *p->mutable_blocks(0) = graph.ToBlock();
  return changed;
}

int CountOps(const proto::ProgramDesc& p, const std::string& type) {
  return static_cast<int>(std::count_if(p.blocks(0).ops().begin(), p.blocks(0).ops().end(),
                                        [&](const proto::OpDesc& op) { return op.type() == type; }));
}

// ---- Goldens -------------------------------------------------------------------

std::string GoldenDir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden/attention_fusion_pass/"; }
// The input program lives beside the golden; the builder must still make it.
AttentionFusionReport CheckGolden(const std::string& name, const proto::ProgramDesc& built,
                                  const std::set<std::string>& keep, bool expect_change) {
  const std::string input_path = GoldenDir() + name + ".pbtxt";
  const std::string golden_path = GoldenDir() + name + ".golden";
  if (test::UpdateGolden()) WriteFileAtomic(input_path, ProgramToText(built));
  const proto::ProgramDesc program = LoadProgram(input_path);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(program, built))
      << input_path << " differs from the test's builder; regenerate with KILN_UPDATE_GOLDEN=1";
  ValidateProgram(program);

  AttentionFusionReport report;
  Graph graph = Graph::FromBlock(program.blocks(0));
  const std::string before = graph.Print();
  const bool changed = AttentionFusionPass(Keep(keep), &report).Run(graph);
  graph.Verify();
  EXPECT_EQ(changed, expect_change) << name;
  proto::ProgramDesc after = program;
  *after.mutable_blocks(0) = graph.ToBlock();
  ValidateProgram(after);

  std::string keep_list;
  for (const auto& k : keep) keep_list += (keep_list.empty() ? "" : ", ") + k;
  std::string t = "# " + name + ": attention_fusion_pass golden (regenerate with KILN_UPDATE_GOLDEN=1)\n";
  t += "# options: keep_vars=[" + keep_list + "]\n## before\n" + before;
  t += std::string("## after: ") + (changed ? "changed" : "unchanged") + "\n" + graph.Print();
  t += "## report\n" + report.ToString() + "\n";
  test::ExpectGolden(golden_path, t);
  return report;
}

// Forward and backward of one attention become fused_attention and
// fused_attention_grad; scores, probabilities and their gradients leave.
TEST(AttentionFusionPassGolden, SoftmaxWithBackward) {
  AttentionProgram p;
  p.Attention("", 6).Mean("o", "loss");
  const AttentionFusionReport r = CheckGolden("softmax_backward", p.WithBackward("loss"), {"q", "k", "v", "loss"}, true);
  ASSERT_EQ(r.fused.size(), 1u);
  EXPECT_EQ(r.ToString(), "fused attention o (probs p, with backward)");
}

// The causal softmax fuses with causal=true; a forward-only program fuses
// its forward.
TEST(AttentionFusionPassGolden, CausalForwardOnly) {
  AttentionProgram p;
  p.Attention("", 5, "fused_softmax_mask_upper_triangle").Mean("o", "loss");
  const AttentionFusionReport r = CheckGolden("causal_forward", p.program, {"q", "k", "v", "loss"}, true);
  EXPECT_EQ(r.ToString(), "fused attention o (probs p, causal, forward only)");
}

// Does not fire: a's probabilities are fetched, b's are read by another op
// (their mean), c's keys come pre-transposed (the scores matmul has no
// transpose_Y), d's values come with another scale (alpha 2 in the second
// matmul).
TEST(AttentionFusionPassGolden, DoesNotFire) {
  AttentionProgram p;
  p.Attention("a.", 4).Attention("b.", 4).Attention("c.", 4, "softmax", false).Attention("d.", 4);
  p.block->mutable_ops(p.block->ops_size() - 1)->CopyFrom(
      OpBuilder("matmul").In("X", {"d.p"}).In("Y", {"d.v"}).Out("Out", {"d.o"}).Attr("alpha", 2.0f).Build());
  p.Op(OpBuilder("sum").In("X", {"a.o", "b.o", "c.o", "d.o"}).Out("Out", {"o"}));
  p.Mean("o", "loss1");
  p.Mean("b.p", "loss2").Op(OpBuilder("elementwise_add").In("X", {"loss1"}).In("Y", {"loss2"}).Out("Out", {"loss"}));
  const AttentionFusionReport r =
      CheckGolden("not_fired", p.WithBackward("loss"), {"a.q", "a.k", "a.v", "b.q", "b.k", "b.v", "c.q", "c.k", "c.v",
                                                        "d.q", "d.k", "d.v", "a.p", "loss"},
                  false);
  EXPECT_EQ(r.ToString(), "fused no attention");
}

// Q and K need no gradient: append_backward stops at dS (nothing reads it,
// no matmul_grad for the scores), and the fused grad computes dV alone.
TEST(AttentionFusionPass, ValuesOnlyGradient) {
  AttentionProgram p;
  p.Attention("", 5).Mean("o", "loss");
  for (const std::string v : {"q", "k"}) FindMutableVarDesc(p.block, v)->set_stop_gradient(true);
  proto::ProgramDesc program = p.WithBackward("loss");
  ASSERT_EQ(CountOps(program, "matmul_grad"), 1);
  AttentionFusionReport report;
  ASSERT_TRUE(Fuse(&program, Keep({"q", "k", "v", "loss"}), &report));
  EXPECT_EQ(report.ToString(), "fused attention o (probs p, with backward)");
  ASSERT_EQ(CountOps(program, "fused_attention_grad"), 1);
  for (const auto& op : program.blocks(0).ops()) {
    if (op.type() != "fused_attention_grad") continue;
    for (const auto& slot : op.outputs()) {
      const std::string want = slot.name() == "V@GRAD" ? "v@GRAD" : kEmptyVarName;
      EXPECT_EQ(slot.args(0), want) << slot.name();
    }
  }
  EXPECT_EQ(CountOps(program, "softmax_grad") + CountOps(program, "matmul_grad"), 0);
  EXPECT_NO_THROW(ValidateProgram(program));
}

TEST(AttentionFusionPassGolden, TransformerTrain) {
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  const AttentionFusionReport r = CheckGolden("transformer_train", m.train, {m.features, m.labels, m.loss}, true);
  EXPECT_EQ(r.ToString(), "fused attention matmul_4 (probs softmax_0, with backward)");
}

// ---- Programs, registry, pipeline ------------------------------------------------

TEST(AttentionFusionPass, TransformerProgramsLoseTheProbabilities) {
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  for (const proto::ProgramDesc* program : {&m.train, &m.forward}) {
    proto::ProgramDesc p = *program;
    ASSERT_TRUE(Fuse(&p, Keep({m.features, m.labels, m.loss})));
    EXPECT_EQ(CountOps(p, "fused_attention"), 1);
    EXPECT_EQ(CountOps(p, "softmax") + CountOps(p, "softmax_grad"), 0);
    EXPECT_EQ(CountOps(p, "fused_attention_grad"), program == &m.train ? 1 : 0);
    EXPECT_EQ(FindVarDesc(p.blocks(0), "softmax_0"), nullptr);
    EXPECT_NO_THROW(ValidateProgram(p));
  }
}

TEST(AttentionFusionPass, RegistryAndPipeline) {
  AttentionFusionReport report;
  PassConfig config;
  config.attention_fusion_report = &report;
  auto pass = PassRegistry::Global().Create("attention_fusion_pass", config);
  EXPECT_EQ(pass->name(), "attention_fusion_pass");
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  Graph graph = Graph::FromBlock(m.train.blocks(0));
  EXPECT_TRUE(RunPasses(graph, {pass.get()}));
  EXPECT_EQ(report.fused.size(), 1u);

  // First in the pipeline, and only with the JIT.
  test::TestJit jit;
  PipelineOptions o = jit.Pipeline(BuildJitPassOptions{});
  o.fuse_attention = o.recompute = true;
  std::vector<std::string> names;
  for (const auto& p : BuildPipeline(o)) names.emplace_back(p->name());
  EXPECT_EQ(names, (std::vector<std::string>{"attention_fusion_pass", "recompute_pass", "build_jit_pass"}));
  o.build_jit = false;
  names.clear();
  for (const auto& p : BuildPipeline(o)) names.emplace_back(p->name());
  EXPECT_EQ(names, (std::vector<std::string>{"recompute_pass"}));
}

// ---- Training ----------------------------------------------------------------------

struct TrainSetup {
  Model model;
  Dataset train, test;
};

TrainSetup Transformer(int64_t seq_len) {
  TransformerConfig c;
  c.seq_len = seq_len;
  TrainConfig tc;
  tc.lr = 0.1f;
  TrainSetup s;
  s.model = BuildTransformer(c, tc);
  auto [train, test] = SplitDataset(MakeSyntheticSequences(256, seq_len, c.d_model, 10, 3), 0.8);
  s.train = train;
  s.test = test;
  return s;
}

TrainOptions ShortTraining() {
  TrainOptions o;
  o.epochs = 100;
  o.batch_size = 16;
  o.max_steps = 12;
  return o;
}

// The pipeline as kiln train runs it with `jit`: fusion on or off.
TrainOptions WithJit(test::TestJit& jit, bool fuse) {
  TrainOptions o = ShortTraining();
  o.registry = &jit.registry();
  o.program_transform = [&jit, fuse](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    PipelineOptions po = jit.Pipeline(BuildJitPassOptions{});
    po.fuse_attention = fuse;
    po.keep_vars = keep;
    return RunPipeline(p, po, jit.registry());
  };
  return o;
}

void ExpectSameLosses(const TrainResult& a, const TrainResult& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-4 * std::max(1.0f, std::fabs(b.losses[i]))) << what << " step " << i;
  }
}

TEST(AttentionFusionPassTrain, SameLossesOnAndOffWithAndWithoutTheJit) {
  test::TestJit jit;
  const TrainSetup s = Transformer(24);
  const TrainResult off = Train(s.model, s.train, s.test, ShortTraining());
  const TrainResult jit_fused = Train(s.model, s.train, s.test, WithJit(jit, true));
  const TrainResult jit_unfused = Train(s.model, s.train, s.test, WithJit(jit, false));
  EXPECT_GT(jit->stats().compiles, 0);
  ExpectSameLosses(jit_fused, off, "JIT with fusion vs JIT off");
  ExpectSameLosses(jit_fused, jit_unfused, "JIT with fusion vs without");
  // The pass alone: the fused ops on their reference kernels.
  TrainOptions ref = ShortTraining();
  ref.program_transform = [](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    proto::ProgramDesc out = p;
    Fuse(&out, Keep(keep));
    return out;
  };
  ExpectSameLosses(Train(s.model, s.train, s.test, ref), off, "reference fused kernels vs unfused");
}

size_t PeakTensorBytes(const TrainSetup& s, const TrainOptions& o) {
  CachingAllocator& a = CachingAllocator::Global();
  const size_t base = a.stats().in_use_bytes;
  a.ResetPeak();
  Train(s.model, s.train, s.test, o);
  return a.stats().peak_in_use_bytes - base;
}

// seq 96, batch 16: each [16, 4, 96, 96] f32 tensor of the attention is
// 2.25 MiB, the [16, 96, 32] activations 192 KiB.
TEST(AttentionFusionPassTrain, TheProbabilitiesLeaveThePeak) {
  test::TestJit jit;
  const TrainSetup s = Transformer(96);
  TrainOptions fused = WithJit(jit, true), unfused = WithJit(jit, false);
  fused.max_steps = unfused.max_steps = 2;
  const size_t with = PeakTensorBytes(s, fused), without = PeakTensorBytes(s, unfused);
  const size_t probs = size_t{16} * 4 * 96 * 96 * 4;
  EXPECT_LT(with + 2 * probs, without) << "fused " << with << " B, unfused " << without << " B";
}

}  // namespace
}  // namespace kiln
