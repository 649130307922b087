// fused_attention and fused_attention_grad (reference kernels): values,
// row log-sum-exps and gradients against the unfused ops they replace
// (matmul, softmax or its causal variant, matmul, and their grads) at odd
// sequence lengths (1, 7, 33, 100: across the 16-row and 16-key tiles),
// causal and not, several head dims (Dv != D too), f32 and f64; gradients
// against finite differences; gradients not wanted or not flowing in; and
// the error messages of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "tests/attention_case.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOps;
using test::ValueAt;

using Case = test::AttentionCase;

proto::OpDesc Fused(const Case& c) { return test::AttentionForwardOp(c.Scale(), c.causal); }

proto::OpDesc FusedGrad(const Case& c, bool dq = true, bool dk = true, bool dv = true) {
  return test::AttentionGradOp(c.Scale(), c.causal, /*with_dout=*/true,
                               {dq ? "dq" : "", dk ? "dk" : "", dv ? "dv" : ""});
}

// The pattern attention_fusion_pass replaces, forward and backward.
std::vector<proto::OpDesc> Unfused(const Case& c) {
  const std::string sm = c.causal ? "fused_softmax_mask_upper_triangle" : "softmax";
  return {
      OpBuilder("matmul").In("X", {"q"}).In("Y", {"k"}).Out("Out", {"s"}).Attr("transpose_Y", true).Attr("alpha",
                                                                                                          c.Scale())
          .Build(),
      OpBuilder(sm).In("X", {"s"}).Out("Out", {"p"}).Build(),
      OpBuilder("matmul").In("X", {"p"}).In("Y", {"v"}).Out("Out", {"o"}).Build(),
      OpBuilder("matmul_grad")
          .In("X", {"p"})
          .In("Y", {"v"})
          .In("Out@GRAD", {"do"})
          .Out("X@GRAD", {"dp"})
          .Out("Y@GRAD", {"dv"})
          .Build(),
      OpBuilder(sm + "_grad").In("Out", {"p"}).In("Out@GRAD", {"dp"}).Out("X@GRAD", {"ds"}).Build(),
      OpBuilder("matmul_grad")
          .In("X", {"q"})
          .In("Y", {"k"})
          .In("Out@GRAD", {"ds"})
          .Out("X@GRAD", {"dq"})
          .Out("Y@GRAD", {"dk"})
          .Attr("transpose_Y", true)
          .Attr("alpha", c.Scale())
          .Build(),
  };
}

std::map<std::string, Tensor> Inputs(const Case& c, DataType dtype, std::mt19937& rng) {
  return {{"q", RandomTensor(c.Q(), dtype, rng, -2, 2)},
          {"k", RandomTensor(c.K(), dtype, rng, -2, 2)},
          {"v", RandomTensor(c.V(), dtype, rng)},
          {"do", RandomTensor(c.Out(), dtype, rng)}};
}

// Each row's log(sum(exp(s))) over the keys it sees, from the unfused scores.
std::vector<double> RowLse(const Tensor& s, const Case& c) {
  std::vector<double> out;
  for (int64_t row = 0; row < s.numel() / c.sk; ++row) {
    const int64_t n = c.causal ? row % c.sq + 1 : c.sk;
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, ValueAt(s, row * c.sk + j));
    for (int64_t j = 0; j < n; ++j) sum += std::exp(ValueAt(s, row * c.sk + j) - m);
    out.push_back(m + std::log(sum));
  }
  return out;
}

std::vector<Case> OddCases() {
  std::vector<Case> cases;
  for (int64_t s : {1, 7, 33, 100}) {
    for (bool causal : {false, true}) {
      for (auto [d, dv] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {16, 16}, {64, 64}}) {
        if (s == 100 && d == 1) continue;  // the long rows of a one-dim head say little more
        cases.push_back({{2, 3}, s, causal ? s : s + 4, d, dv, causal});
      }
    }
  }
  return cases;
}

TEST(FusedAttentionOpTest, MatchesTheUnfusedOpsForwardAndBackward) {
  std::mt19937 rng(1);
  for (const Case& c : OddCases()) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      const auto in = Inputs(c, dtype, rng);
      const auto unfused = RunOps(Unfused(c), in, /*use_onednn=*/dtype == DataType::kFP32);
      const auto fused = RunOps({Fused(c), FusedGrad(c)}, in, /*use_onednn=*/false);
      const double tol = dtype == DataType::kFP32 ? 2e-5 : 1e-12;
      for (const std::string v : {"o", "dq", "dk", "dv"}) {
        EXPECT_EQ(CompareTensors(fused->GetVar(v)->Get(), unfused->GetVar(v)->Get(), tol, 10 * tol), "")
            << c.Name() << " " << DataTypeName(dtype) << " " << v;
      }
      const Tensor& lse = fused->GetVar("lse")->Get();
      EXPECT_EQ(lse.dims(), c.Lse()) << c.Name();
      const std::vector<double> want = RowLse(unfused->GetVar("s")->Get(), c);
      for (int64_t i = 0; i < lse.numel(); ++i) {
        ASSERT_NEAR(ValueAt(lse, i), want[i], tol * (1 + std::fabs(want[i]))) << c.Name() << " row " << i;
      }
    }
  }
}

TEST(FusedAttentionOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  for (const Case& c : {Case{{1, 2}, 7, 9, 3, 4, false}, Case{{2, 1}, 7, 7, 5, 2, true},
                        Case{{1, 1}, 33, 33, 2, 3, true}, Case{{1, 1}, 20, 17, 4, 4, false},
                        Case{{1, 1}, 1, 1, 3, 2, true}}) {
    const auto in = Inputs(c, DataType::kFP64, rng);
    EXPECT_EQ(test::CheckGrad(Fused(c), {{"q", in.at("q")}, {"k", in.at("k")}, {"v", in.at("v")}}, {"q", "k", "v"},
                              {"o"}),
              "")
        << c.Name();
  }
}

// Scores far apart: the online softmax rescales without overflow, and a
// key tile whose scores are all far below the running maximum adds nothing.
TEST(FusedAttentionOpTest, LargeScoresStayFinite) {
  std::mt19937 rng(3);
  const Case c{{1, 2}, 40, 40, 4, 4, false};
  auto in = Inputs(c, DataType::kFP32, rng);
  float* q = in["q"].mutable_data<float>();
  for (int64_t i = 0; i < in["q"].numel(); ++i) q[i] *= 40;
  const auto unfused = RunOps(Unfused(c), in, false);
  const auto fused = RunOps({Fused(c), FusedGrad(c)}, in, false);
  for (const std::string v : {"o", "dq", "dk", "dv"}) {
    EXPECT_EQ(CompareTensors(fused->GetVar(v)->Get(), unfused->GetVar(v)->Get(), 1e-4, 1e-3), "") << v;
  }
}

TEST(FusedAttentionOpTest, GradientsNotWantedOrNotFlowingIn) {
  std::mt19937 rng(4);
  const Case c{{1, 2}, 9, 9, 3, 3, true};
  const auto in = Inputs(c, DataType::kFP64, rng);
  const auto all = RunOps({Fused(c), FusedGrad(c)}, in, false);
  const auto only_dv = RunOps({Fused(c), FusedGrad(c, false, false, true)}, in, false);
  EXPECT_EQ(CompareTensors(only_dv->GetVar("dv")->Get(), all->GetVar("dv")->Get(), 0, 0), "");
  EXPECT_EQ(only_dv->FindVar("dq"), nullptr);
  const auto only_dk = RunOps({Fused(c), FusedGrad(c, false, true, false)}, in, false);
  EXPECT_EQ(CompareTensors(only_dk->GetVar("dk")->Get(), all->GetVar("dk")->Get(), 0, 0), "");

  proto::OpDesc no_dout = FusedGrad(c);
  no_dout.mutable_inputs()->RemoveLast();  // Out@GRAD
  const auto zero = RunOps({Fused(c), no_dout}, in, false);
  for (const std::string v : {"dq", "dk", "dv"}) {
    const Tensor& t = zero->GetVar(v)->Get();
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(ValueAt(t, i), 0.0) << v;
  }
}

TEST(FusedAttentionOpTest, RankTwoIsOneHead) {
  std::mt19937 rng(5);
  const Case four{{1, 1}, 11, 11, 6, 6, true};
  const auto in4 = Inputs(four, DataType::kFP64, rng);
  std::map<std::string, Tensor> in2;
  for (const auto& [name, t] : in4) {
    Tensor r = t;
    r.Resize({t.dims()[2], t.dims()[3]});
    in2[name] = r;
  }
  const auto a = RunOps({Fused(four), FusedGrad(four)}, in4, false);
  const auto b = RunOps({Fused(four), FusedGrad(four)}, in2, false);
  for (const std::string v : {"o", "dq", "dk", "dv"}) {
    Tensor x = a->GetVar(v)->Get();
    x.Resize(b->GetVar(v)->Get().dims());
    EXPECT_EQ(CompareTensors(b->GetVar(v)->Get(), x, 0, 0), "") << v;
  }
}

TEST(FusedAttentionOpTest, BadInputIsNamed) {
  std::mt19937 rng(6);
  const Case c{{1, 2}, 5, 6, 3, 3, false};
  auto run = [&](const Case& cs, std::map<std::string, Tensor> in) {
    return ErrorOf([&] { RunOps({Fused(cs)}, in, false); });
  };
  auto in = Inputs(c, DataType::kFP32, rng);
  in["k"] = RandomTensor({1, 2, 6, 4}, DataType::kFP32, rng);
  EXPECT_EQ(run(c, in),
            "op #0 'fused_attention': input K: expected head dim 3 (as Q [1,2,5,3]), got [1,2,6,4]");
  in = Inputs(c, DataType::kFP32, rng);
  in["v"] = RandomTensor({1, 2, 5, 3}, DataType::kFP32, rng);
  EXPECT_EQ(run(c, in), "op #0 'fused_attention': input V: expected 6 keys (as K [1,2,6,3]), got [1,2,5,3]");
  in = Inputs(c, DataType::kFP32, rng);
  in["k"] = RandomTensor({1, 3, 6, 3}, DataType::kFP32, rng);
  EXPECT_EQ(run(c, in),
            "op #0 'fused_attention': inputs Q, K, V: batch dims differ (no broadcast): Q [1,2,5,3], K [1,3,6,3], "
            "V [1,2,6,3]");
  in = Inputs(c, DataType::kFP32, rng);
  in["v"] = RandomTensor({2, 6, 3}, DataType::kFP32, rng);
  EXPECT_EQ(run(c, in),
            "op #0 'fused_attention': inputs Q, K, V: expected one rank, got Q [1,2,5,3], K [1,2,6,3], V [2,6,3]");
  in = Inputs(c, DataType::kFP32, rng);
  in["v"] = RandomTensor(c.V(), DataType::kFP64, rng);
  EXPECT_EQ(run(c, in), "op #0 'fused_attention': input V: expected dtype f32 (as Q), got f64");
  Case causal = c;
  causal.causal = true;
  EXPECT_EQ(run(causal, Inputs(c, DataType::kFP32, rng)),
            "op #0 'fused_attention': causal attention needs as many queries as keys: Q [1,2,5,3], K [1,2,6,3]");
  in = Inputs(c, DataType::kFP32, rng);
  in["q"] = RandomTensor({3}, DataType::kFP32, rng);
  EXPECT_EQ(run(c, in), "op #0 'fused_attention': input Q: expected rank >= 2 ([..., Sq, D]), got [3]");
  // The grad checks what it reads from the forward.
  in = Inputs(c, DataType::kFP32, rng);
  in["lse"] = RandomTensor({1, 2, 6}, DataType::kFP32, rng);
  in["o"] = RandomTensor(c.Out(), DataType::kFP32, rng);
  EXPECT_EQ(ErrorOf([&] { RunOps({FusedGrad(c)}, in, false); }),
            "op #0 'fused_attention_grad': input LSE: expected dims [1,2,5], got [1,2,6]");
}

}  // namespace
}  // namespace kiln
