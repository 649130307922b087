// Lowering step fused_attention (compiler/lowering/fused_attention.h):
// fused_attention and its grad become kiln's tiled kernels, on both ISAs,
// and agree with the reference kernels; a grad without Out@GRAD is left to
// the framework fallback. Under --amp bf16 the kernels run in bf16 exactly
// where that is faster (AMX tiles, compiler/kernels/attention/attention_kernels.h).
#include <gtest/gtest.h>

#include "compiler/kernels/attention/attention_kernels.h"
#include "tests/attention_case.h"
#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

// Forward and backward in one cluster: LSE stays inside as a temp.
LoweringCase Attention(const std::string& name, Dims q, int64_t sk, int64_t dv, bool causal, bool with_dout = true) {
  const AttentionCase a{Dims(q.begin(), q.end() - 2), q[q.size() - 2], sk, q.back(), dv, causal};
  LoweringCase c;
  c.name = name;
  c.ops = AttentionOps(/*scale=*/0.3f, causal, with_dout, {"dq", kEmptyVarName, "dv"});
  c.inputs = {{"q", a.Q()}, {"k", a.K()}, {"v", a.V()}};
  if (with_dout) c.inputs.push_back({"do", a.Out()});
  c.outputs = {"o", "dq", "dv"};
  return c;
}

TEST(FusedAttentionLoweringTest, ForwardAndBackwardBecomeTheTiledKernels) {
  const LoweringCase c = Attention("fused_attention", {2, 3, 9, 5}, 9, 4, true);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 2e-5, 2e-4);
  EXPECT_TRUE(StepMatched(*obj, "fused_attention")) << obj->lowering;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (!IsaSupported(isa)) continue;
    LoweringCase odd = Attention("odd", {3, 70, 17}, 131, 16, false);
    odd.options.isa = isa;
    const auto o = CheckLoweringNumerics(odd, 2e-5, 2e-4);
    EXPECT_TRUE(StepMatched(*o, "fused_attention")) << IsaName(isa) << "\n" << o->lowering;
  }
}

TEST(FusedAttentionLoweringTest, AmpBf16RunsBf16AttentionWhereItPays) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (!IsaSupported(isa)) continue;
    LoweringCase c = Attention("amp_attention", {2, 131, 33}, 131, 20, true);
    c.options.isa = isa;
    c.options.amp_compute = ComputeType::kBF16;
    // Inputs in [-2, 2): bf16 probabilities and dS are off by 2^-8
    // relative, each output a sum of at most 131 such terms.
    const auto obj = CheckLoweringNumerics(c, 0.05, 0.02);
    const std::string listing = obj->Listing();
    const bool bf16 = listing.find("attention forward (causal) in bf16 (f32 accumulation)") != std::string::npos;
    EXPECT_EQ(bf16, jit::Bf16AttentionPays(isa)) << IsaName(isa) << "\n" << listing;
    EXPECT_EQ(bf16, listing.find("with amx (tdpbf16ps)") != std::string::npos) << listing;
  }
}

TEST(FusedAttentionLoweringTest, GradWithoutOutGradIsNotFired) {
  LoweringCase c = Attention("fused_attention_not_fired", {1, 2, 6, 4}, 6, 4, false, /*with_dout=*/false);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  // The forward still lowers; the grad runs its reference kernel (zeros).
  EXPECT_NE(obj->lowering.find("#1 fused_attention_grad -> framework_op"), std::string::npos) << obj->lowering;
}

// Dynamic shapes: forward and backward compiled for one batch and sequence
// length, resized to others (1, tails of the tiles, beyond one tile).
TEST(FusedAttentionLoweringTest, KernelsResizeToOtherBatchesAndSequenceLengths) {
  for (bool causal : {false, true}) {
    std::vector<LoweringCase> others;
    for (const auto& [b, s] : std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {2, 17}, {1, 144}, {3, 1}, {1, 192}}) {
      others.push_back(Attention("attention_resize", {b, 2, s, 8}, s, 4, causal));
    }
    CheckResizedPrograms(Attention("attention_resize", {2, 2, 64, 8}, 64, 4, causal), others, {"attention"}, 1e-5,
                         1e-4);
  }
}

}  // namespace
}  // namespace kiln::test
