// compiler/kernels/attention/attention_runtime_kernel.h: Resize of the fused
// attention kernels. A kernel made for one shape, resized to other batches,
// heads and sequence lengths (1, tails of the 64-query and 128-key tiles,
// beyond one tile), runs as the reference kernels of fused_attention and its
// grad; shapes it was not made for (other head dims, causal with sq != sk,
// mismatched arguments) are refused with the reason.
#include "compiler/kernels/attention/attention_runtime_kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "tests/op_test_util.h"

namespace kiln::jit {
namespace {

using test::CompareTensors;
using test::RandomTensor;

constexpr int64_t kD = 16, kDv = 8;

// Q [b, h, sq, kD], K [b, h, sk, kD], V [b, h, sk, kDv] and dOut, with the
// reference's Out, LSE, dQ, dK, dV.
struct Case {
  std::map<std::string, Tensor> in;
  std::unique_ptr<Scope> ref;
};

Case Reference(int64_t b, int64_t h, int64_t sq, int64_t sk, bool causal, std::mt19937& rng) {
  Case r;
  r.in = {{"q", RandomTensor({b, h, sq, kD}, DataType::kFP32, rng, -2, 2)},
          {"k", RandomTensor({b, h, sk, kD}, DataType::kFP32, rng, -2, 2)},
          {"v", RandomTensor({b, h, sk, kDv}, DataType::kFP32, rng)},
          {"do", RandomTensor({b, h, sq, kDv}, DataType::kFP32, rng)}};
  const proto::OpDesc fwd = OpBuilder("fused_attention")
                                .In("Q", {"q"})
                                .In("K", {"k"})
                                .In("V", {"v"})
                                .Out("Out", {"o"})
                                .Out("LSE", {"lse"})
                                .Attr("scale", 0.25f)
                                .Attr("causal", causal)
                                .Build();
  const proto::OpDesc grad = OpBuilder("fused_attention_grad")
                                 .In("Q", {"q"})
                                 .In("K", {"k"})
                                 .In("V", {"v"})
                                 .In("Out", {"o"})
                                 .In("LSE", {"lse"})
                                 .In("Out@GRAD", {"do"})
                                 .Out("Q@GRAD", {"dq"})
                                 .Out("K@GRAD", {"dk"})
                                 .Out("V@GRAD", {"dv"})
                                 .Attr("scale", 0.25f)
                                 .Attr("causal", causal)
                                 .Build();
  r.ref = test::RunOps({fwd, grad}, r.in, /*use_onednn=*/false);
  return r;
}

AttentionParams Params(int64_t heads, int64_t sq, int64_t sk, bool causal) {
  AttentionParams p;
  p.shape = {heads, sq, sk, kD, kDv};
  p.scale = 0.25f;
  p.causal = causal;
  p.isa = IsaSupported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2;
  return p;
}

const Tensor& Ref(const Case& r, const char* name) { return r.ref->GetVar(name)->Get(); }

std::vector<Dims> ForwardDims(const Case& r) {
  return {r.in.at("q").dims(), r.in.at("k").dims(), r.in.at("v").dims(), Ref(r, "o").dims(), Ref(r, "lse").dims()};
}

// Runs `kernel` (made for another shape) resized to `r`'s shapes, forward
// and backward, and compares with the reference.
void CheckResized(const runtime::Kernel& fwd, const runtime::Kernel& bwd, const Case& r, const std::string& what) {
  std::string why;
  const std::vector<Dims> fd = ForwardDims(r);
  auto f = fwd.Resize(fd, &why);
  ASSERT_NE(f, nullptr) << what << ": " << why;
  Tensor o(DataType::kFP32, fd[3]), lse(DataType::kFP32, fd[4]);
  std::vector<runtime::BufferView> views;
  auto view = [&views](const Tensor& t) {
    views.push_back({const_cast<void*>(t.raw_data()), DataType::kFP32, &t.dims()});
  };
  o.mutable_data<float>();
  lse.mutable_data<float>();
  for (const Tensor* t : std::vector<const Tensor*>{&r.in.at("q"), &r.in.at("k"), &r.in.at("v"), &o, &lse}) view(*t);
  f->Run(views.data());
  EXPECT_EQ(CompareTensors(o, Ref(r, "o"), 1e-5, 1e-4), "") << what << " Out";
  EXPECT_EQ(CompareTensors(lse, Ref(r, "lse"), 1e-5, 1e-5), "") << what << " LSE";

  std::vector<Dims> bd = fd;
  bd.push_back(r.in.at("do").dims());
  for (const char* g : {"dq", "dk", "dv"}) bd.push_back(Ref(r, g).dims());
  auto b = bwd.Resize(bd, &why);
  ASSERT_NE(b, nullptr) << what << ": " << why;
  std::vector<Tensor> grads;
  for (const char* g : {"dq", "dk", "dv"}) {
    grads.emplace_back(DataType::kFP32, Ref(r, g).dims());
    float* p = grads.back().mutable_data<float>();
    for (int64_t i = 0; i < grads.back().numel(); ++i) p[i] = NAN;  // a skipped element shows
  }
  views.clear();
  for (const Tensor* t : std::vector<const Tensor*>{&r.in.at("q"), &r.in.at("k"), &r.in.at("v"), &Ref(r, "o"),
                                                   &Ref(r, "lse"), &r.in.at("do"), &grads[0], &grads[1], &grads[2]}) {
    view(*t);
  }
  b->Run(views.data());
  const char* names[3] = {"dq", "dk", "dv"};
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(CompareTensors(grads[g], Ref(r, names[g]), 2e-5, 2e-4), "") << what << " " << names[g];
  }
  EXPECT_NE(f->Describe().find(std::to_string(fd[0][0] * fd[0][1]) + " heads"), std::string::npos) << f->Describe();
}

TEST(AttentionResizeTest, ResizedKernelsMatchTheReferenceAtOtherShapes) {
  std::mt19937 rng(3);
  for (bool causal : {false, true}) {
    // Made for batch 2, 3 heads, 64 queries and keys.
    auto fwd = MakeAttentionKernel("attention_0", Params(6, 64, 64, causal), {});
    auto bwd = MakeAttentionKernel("attention_grad_0", Params(6, 64, 64, causal), {true, true, true});
    for (int64_t b : {1, 2, 5}) {
      for (int64_t s : {1, 16, 17, 144, 192}) {
        const int64_t sk = causal ? s : s + 9;
        const Case r = Reference(b, 3, s, sk, causal, rng);
        CheckResized(*fwd, *bwd, r, "b " + std::to_string(b) + " s " + std::to_string(s) + (causal ? " causal" : ""));
      }
    }
    // Other heads too (the leading dims fold into heads).
    CheckResized(*fwd, *bwd, Reference(1, 1, 65, 65, causal, rng), "one head");
  }
}

TEST(AttentionResizeTest, RefusesShapesTheKernelWasNotMadeFor) {
  auto fwd = MakeAttentionKernel("attention_0", Params(6, 64, 64, /*causal=*/true), {});
  auto bwd = MakeAttentionKernel("attention_grad_0", Params(6, 64, 64, true), {true, false, true});
  std::string why;
  auto dims = [](int64_t sq, int64_t sk, int64_t d, int64_t dv) {
    return std::vector<Dims>{{2, 3, sq, d}, {2, 3, sk, d}, {2, 3, sk, dv}, {2, 3, sq, dv}, {2, 3, sq}};
  };
  EXPECT_NE(fwd->Resize(dims(32, 32, kD, kDv), &why), nullptr) << why;
  EXPECT_EQ(fwd->Resize(dims(32, 32, 32, kDv), &why), nullptr);
  EXPECT_EQ(why, "attention_0: the head dims must stay 16/8, got Q [2,3,32,32], K [2,3,32,32], V [2,3,32,8]");
  EXPECT_EQ(fwd->Resize(dims(32, 48, kD, kDv), &why), nullptr);
  EXPECT_EQ(why, "attention_0: causal attention needs as many queries as keys, got 32 and 48");
  std::vector<Dims> d = dims(32, 32, kD, kDv);
  d[1][0] = 4;
  EXPECT_EQ(fwd->Resize(d, &why), nullptr);
  EXPECT_EQ(why, "attention_0: K [4,3,32,16] and V [2,3,32,8] must have the leading dims of Q [2,3,32,16]");
  d = dims(32, 32, kD, kDv);
  d[4] = {2, 3, 31};
  EXPECT_EQ(fwd->Resize(d, &why), nullptr);
  EXPECT_EQ(why, "attention_0: argument 4 must be [2,3,32], got [2,3,31]");
  // The backward: Q, K, V, Out, LSE, dOut -> dQ, dV (dK not wanted).
  d = dims(32, 32, kD, kDv);
  d.push_back({2, 3, 32, kDv});
  d.push_back({2, 3, 32, kD});
  d.push_back({2, 3, 32, kDv});
  EXPECT_NE(bwd->Resize(d, &why), nullptr) << why;
  d.push_back({2, 3, 32, kDv});
  EXPECT_EQ(bwd->Resize(d, &why), nullptr);
  EXPECT_EQ(why, "attention_grad_0: expected dims for 8 arguments, got 9");
}

}  // namespace
}  // namespace kiln::jit
