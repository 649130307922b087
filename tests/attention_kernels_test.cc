// The JIT's fused attention kernels (compiler/kernels/attention/attention_kernels.h) against
// the reference kernels of fused_attention and fused_attention_grad, on the
// AVX-512 and AVX2 paths: sequence lengths and head dims at {1, simd-1,
// simd, simd+1} of both widths and beyond one tile (64 queries, 128 keys),
// causal and not, every subset of wanted gradients, and one head or many.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/kernels/attention/attention_kernels.h"
#include "tests/attention_case.h"
#include "tests/op_test_util.h"

namespace kiln::jit {
namespace {

using test::CompareTensors;
using test::RandomTensor;

using Case = test::AttentionCase;

std::vector<Isa> Isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

struct RefRun {
  std::map<std::string, Tensor> in;
  std::unique_ptr<Scope> ref;  // o, lse, dq, dk, dv from the reference kernels
};

RefRun Reference(const Case& c, std::mt19937& rng) {
  RefRun r;
  r.in = {{"q", RandomTensor(c.Q(), DataType::kFP32, rng, -2, 2)},
          {"k", RandomTensor(c.K(), DataType::kFP32, rng, -2, 2)},
          {"v", RandomTensor(c.V(), DataType::kFP32, rng)},
          {"do", RandomTensor(c.Out(), DataType::kFP32, rng)}};
  r.ref = test::RunOps(test::AttentionOps(c.Scale(), c.causal), r.in, /*use_onednn=*/false);
  return r;
}

AttentionParams Params(const Case& c, Isa isa) {
  AttentionParams p;
  p.shape = {c.Heads(), c.sq, c.sk, c.d, c.dv};
  p.scale = c.Scale();
  p.causal = c.causal;
  p.isa = isa;
  return p;
}

// Runs the kernels and compares every output with the reference; `wanted`
// selects dq, dk, dv (the others are passed as null).
void Check(const Case& c, const RefRun& r, Isa isa, std::vector<bool> wanted = {true, true, true}) {
  const std::string what = c.Name() + " " + IsaName(isa);
  const Tensor& ref_o = r.ref->GetVar("o")->Get();
  Tensor o(DataType::kFP32, ref_o.dims()), lse(DataType::kFP32, r.ref->GetVar("lse")->Get().dims());
  const AttentionParams p = Params(c, isa);
  FusedAttentionForward(p, r.in.at("q").data<float>(), r.in.at("k").data<float>(), r.in.at("v").data<float>(),
                        o.mutable_data<float>(), lse.mutable_data<float>());
  EXPECT_EQ(CompareTensors(o, ref_o, 1e-5, 1e-4), "") << what << " Out";
  EXPECT_EQ(CompareTensors(lse, r.ref->GetVar("lse")->Get(), 1e-5, 1e-5), "") << what << " LSE";

  // The backward reads the reference's Out and LSE, so only its own error counts.
  AttentionGradArgs a;
  a.q = r.in.at("q").data<float>(), a.k = r.in.at("k").data<float>(), a.v = r.in.at("v").data<float>();
  a.out = ref_o.data<float>(), a.lse = r.ref->GetVar("lse")->Get().data<float>(), a.dout = r.in.at("do").data<float>();
  const char* names[3] = {"dq", "dk", "dv"};
  float** slots[3] = {&a.dq, &a.dk, &a.dv};
  std::vector<Tensor> grads(3);
  for (int g = 0; g < 3; ++g) {
    grads[g] = Tensor(DataType::kFP32, r.ref->GetVar(names[g])->Get().dims());
    // NaN where the kernel must write: a skipped element shows.
    float* dst = grads[g].mutable_data<float>();
    for (int64_t i = 0; i < grads[g].numel(); ++i) dst[i] = NAN;
    if (wanted[g]) *slots[g] = dst;
  }
  FusedAttentionBackward(p, a);
  for (int g = 0; g < 3; ++g) {
    if (!wanted[g]) continue;
    EXPECT_EQ(CompareTensors(grads[g], r.ref->GetVar(names[g])->Get(), 2e-5, 2e-4), "") << what << " " << names[g];
  }
}

TEST(AttentionKernelsTest, MatchReferenceAcrossVectorWidthsAndTiles) {
  std::mt19937 rng(1);
  for (int64_t s : {1, 7, 8, 9, 15, 16, 17, 64, 65, 130}) {
    for (bool causal : {false, true}) {
      for (int64_t d : {1, 7, 16, 17, 64}) {
        const Case c{{2}, s, causal ? s : s + 3, d, d == 7 ? 9 : d, causal};
        const RefRun r = Reference(c, rng);
        for (Isa isa : Isas()) Check(c, r, isa);
      }
    }
  }
}

TEST(AttentionKernelsTest, LongRowsAndManyHeads) {
  std::mt19937 rng(2);
  for (const Case& c :
       {Case{{1}, 300, 300, 64, 64, true}, Case{{5}, 33, 260, 32, 16, false}, Case{{12}, 70, 70, 8, 8, true}}) {
    const RefRun r = Reference(c, rng);
    for (Isa isa : Isas()) Check(c, r, isa);
  }
}

// Head dims that need padding (5, 6) and that do not (16: the gradients
// accumulate straight into the outputs).
TEST(AttentionKernelsTest, EverySubsetOfGradients) {
  std::mt19937 rng(3);
  for (const Case& c : {Case{{3}, 21, 21, 5, 6, true}, Case{{2}, 150, 150, 16, 16, false}}) {
    const RefRun r = Reference(c, rng);
    for (int mask = 0; mask < 8; ++mask) {
      for (Isa isa : Isas()) Check(c, r, isa, {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0});
    }
  }
}

TEST(AttentionKernelsTest, NoKeysGivesZeroOutAndMinusInfinityLse) {
  const Case c{{2}, 3, 0, 4, 4, false};
  std::vector<float> q(2 * 3 * 4, 1.f), out(2 * 3 * 4, NAN), lse(2 * 3, NAN);
  for (Isa isa : Isas()) {
    FusedAttentionForward(Params(c, isa), q.data(), nullptr, nullptr, out.data(), lse.data());
    for (float x : out) EXPECT_EQ(x, 0.f);
    for (float x : lse) EXPECT_TRUE(std::isinf(x) && x < 0);
  }
}

}  // namespace
}  // namespace kiln::jit
