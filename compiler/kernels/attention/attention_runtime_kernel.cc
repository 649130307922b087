#include "compiler/kernels/attention/attention_runtime_kernel.h"

#include <utility>

#include "framework/error.h"

namespace kiln::jit {
namespace {

// The shape of Q, K and V of `dims` (arguments 0, 1, 2) for a kernel made as
// `p`: "" and the shape in `shape`, else what is wrong.
std::string ShapeOf(const AttentionParams& p, const std::vector<Dims>& dims, AttentionShape* shape) {
  const Dims &q = dims[0], &k = dims[1], &v = dims[2];
  const size_t r = q.size();
  if (r < 2 || k.size() != r || v.size() != r) {
    return StrCat("Q, K and V must be of one rank >= 2, got ", DimsToString(q), ", ", DimsToString(k), ", ",
                  DimsToString(v));
  }
  const Dims lead(q.begin(), q.end() - 2);
  if (Dims(k.begin(), k.end() - 2) != lead || Dims(v.begin(), v.end() - 2) != lead) {
    return StrCat("K ", DimsToString(k), " and V ", DimsToString(v), " must have the leading dims of Q ",
                  DimsToString(q));
  }
  shape->heads = Numel(lead);
  shape->sq = q[r - 2];
  shape->sk = k[r - 2];
  shape->d = q[r - 1];
  shape->dv = v[r - 1];
  if (shape->d != p.shape.d || k[r - 1] != p.shape.d || shape->dv != p.shape.dv) {
    return StrCat("the head dims must stay ", p.shape.d, "/", p.shape.dv, ", got Q ", DimsToString(q), ", K ",
                  DimsToString(k), ", V ", DimsToString(v));
  }
  if (v[r - 2] != shape->sk) return StrCat("V ", DimsToString(v), " must have the keys of K ", DimsToString(k));
  if (shape->heads <= 0 || shape->sq <= 0 || shape->sk <= 0) {
    return StrCat("no zero dim: got Q ", DimsToString(q), ", K ", DimsToString(k));
  }
  if (p.causal && shape->sq != shape->sk) {
    return StrCat("causal attention needs as many queries as keys, got ", shape->sq, " and ", shape->sk);
  }
  return "";
}

// Every argument's dims for Q, K, V of `dims`: "" when they match.
std::string ArgsMismatch(const std::vector<Dims>& dims, const std::vector<bool>& grads) {
  const Dims &q = dims[0], &k = dims[1], &v = dims[2];
  Dims out = q, lse(q.begin(), q.end() - 1);
  out.back() = v.back();
  std::vector<Dims> want = {q, k, v, out, lse};
  if (!grads.empty()) {
    want.push_back(out);
    for (int g = 0; g < 3; ++g) {
      if (grads[g]) want.push_back(dims[g]);
    }
  }
  if (want.size() != dims.size()) return StrCat("expected dims for ", want.size(), " arguments, got ", dims.size());
  for (size_t i = 3; i < want.size(); ++i) {
    if (dims[i] != want[i]) {
      return StrCat("argument ", i, " must be ", DimsToString(want[i]), ", got ", DimsToString(dims[i]));
    }
  }
  return "";
}

class AttentionKernel final : public runtime::Kernel {
 public:
  AttentionKernel(std::string name, AttentionParams params, std::vector<bool> grads)
      : name_(std::move(name)), params_(params), grads_(std::move(grads)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    const bool bf16 = params_.compute == ComputeType::kBF16;
    return DescribeAttention(params_, !grads_.empty()) + ", " + IsaName(params_.isa) +
           (bf16 ? std::string(" with ") + Bf16ProductsName(ResolveBf16Products(params_.bf16_products, params_.isa))
                 : "");
  }
  std::vector<std::string> fused_ops() const override {
    return {grads_.empty() ? "fused_attention" : "fused_attention_grad"};
  }
  void Run(const runtime::BufferView* args) const override {
    auto in = [args](int i) { return static_cast<const float*>(args[i].data); };
    if (grads_.empty()) {
      FusedAttentionForward(params_, in(0), in(1), in(2), static_cast<float*>(args[3].data),
                            static_cast<float*>(args[4].data));
      return;
    }
    AttentionGradArgs a;
    a.q = in(0), a.k = in(1), a.v = in(2), a.out = in(3), a.lse = in(4), a.dout = in(5);
    float** outs[3] = {&a.dq, &a.dk, &a.dv};
    int next = 6;
    for (int g = 0; g < 3; ++g) {
      if (grads_[g]) *outs[g] = static_cast<float*>(args[next++].data);
    }
    FusedAttentionBackward(params_, a);
  }
  // The tile loops take the shape from the parameters: the same kernel
  // with the new shape (the tiles' tails handle any sq and sk).
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    AttentionParams p = params_;
    std::string bad = dims.size() < 3 ? StrCat("expected the dims of Q, K and V, got ", dims.size(), " arguments")
                                      : ShapeOf(params_, dims, &p.shape);
    if (bad.empty()) bad = ArgsMismatch(dims, grads_);
    if (!bad.empty()) {
      if (why != nullptr) *why = name_ + ": " + bad;
      return nullptr;
    }
    return std::make_shared<AttentionKernel>(name_, p, grads_);
  }

 private:
  std::string name_;
  AttentionParams params_;
  std::vector<bool> grads_;
};

}  // namespace

std::string DescribeAttention(const AttentionParams& p, bool backward) {
  const AttentionShape& s = p.shape;
  return StrCat("kiln tiled attention ", backward ? "backward" : "forward", p.causal ? " (causal)" : "",
                p.compute == ComputeType::kBF16 ? " in bf16 (f32 accumulation)" : "", ", ", s.heads, " heads, ", s.sq,
                " queries x ", s.sk, " keys, head dims ", s.d, "/", s.dv);
}

std::shared_ptr<const runtime::Kernel> MakeAttentionKernel(const std::string& name, const AttentionParams& params,
                                                           const std::vector<bool>& grads) {
  return std::make_shared<AttentionKernel>(name, params, grads);
}

}  // namespace kiln::jit
