// One attention shape of the fused attention tests, and the fused_attention
// and fused_attention_grad ops they run (framework/ops/fused_attention_op.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "framework/tensor.h"

namespace kiln::test {

struct AttentionCase {
  Dims batch;  // the dims before the last two
  int64_t sq, sk, d, dv;
  bool causal;

  // The number of heads the kernels see: the product of the batch dims.
  int64_t Heads() const {
    int64_t n = 1;
    for (int64_t b : batch) n *= b;
    return n;
  }
  Dims Q() const { return With({sq, d}); }
  Dims K() const { return With({sk, d}); }
  Dims V() const { return With({sk, dv}); }
  Dims Out() const { return With({sq, dv}); }
  Dims Lse() const { return With({sq}); }
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
  std::string Name() const {
    std::string b;
    for (int64_t x : batch) b += (b.empty() ? "" : "x") + std::to_string(x);
    return "batch " + b + ", sq " + std::to_string(sq) + " sk " + std::to_string(sk) + " d " + std::to_string(d) +
           " dv " + std::to_string(dv) + (causal ? " causal" : "");
  }

 private:
  Dims With(const Dims& last) const {
    Dims r = batch;
    r.insert(r.end(), last.begin(), last.end());
    return r;
  }
};

// The vars the grad writes; "" leaves its slot out.
struct AttentionGradNames {
  std::string dq = "dq", dk = "dk", dv = "dv";
};

// fused_attention reading q, k, v and writing o, lse.
inline proto::OpDesc AttentionForwardOp(float scale, bool causal) {
  return OpBuilder("fused_attention")
      .In("Q", {"q"})
      .In("K", {"k"})
      .In("V", {"v"})
      .Out("Out", {"o"})
      .Out("LSE", {"lse"})
      .Attr("scale", scale)
      .Attr("causal", causal)
      .Build();
}

// Its grad, reading q, k, v, o, lse and, when `with_dout`, do.
inline proto::OpDesc AttentionGradOp(float scale, bool causal, bool with_dout = true,
                                     const AttentionGradNames& grads = {}) {
  OpBuilder g("fused_attention_grad");
  g.In("Q", {"q"}).In("K", {"k"}).In("V", {"v"}).In("Out", {"o"}).In("LSE", {"lse"});
  if (with_dout) g.In("Out@GRAD", {"do"});
  if (!grads.dq.empty()) g.Out("Q@GRAD", {grads.dq});
  if (!grads.dk.empty()) g.Out("K@GRAD", {grads.dk});
  if (!grads.dv.empty()) g.Out("V@GRAD", {grads.dv});
  return g.Attr("scale", scale).Attr("causal", causal).Build();
}

// The two, forward first.
inline std::vector<proto::OpDesc> AttentionOps(float scale, bool causal, bool with_dout = true,
                                               const AttentionGradNames& grads = {}) {
  return {AttentionForwardOp(scale, causal), AttentionGradOp(scale, causal, with_dout, grads)};
}

}  // namespace kiln::test
