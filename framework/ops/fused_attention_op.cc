// fused_attention and fused_attention_grad: scaled dot-product attention
//   Out = softmax(scale * Q @ K^T [causal mask]) @ V
// in one op that never stores the [..., Sq, Sk] probabilities. The forward
// walks the keys tile by tile with an online softmax (a running row maximum
// and sum; Milakov & Gimelshein 2018, FlashAttention) and saves each row's
// log-sum-exp; the backward recomputes each tile's probabilities from it.
//
// These are the reference kernels: plain C++, f32 and f64, the same tiled
// algorithm as the JIT's kernel (compiler/kernels/attention/attention_kernels.h) with scalar
// arithmetic. passes/attention_fusion_pass.h makes these ops out of the
// matmul/softmax/matmul pattern and its grad ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Tile sizes of the reference kernels: small, so that short sequences in the
// tests already cross tile boundaries.
constexpr int64_t kRows = 16;
constexpr int64_t kCols = 16;

// One call's sizes: the batch dims flattened into `heads`.
struct AttnShape {
  int64_t heads = 0, sq = 0, sk = 0, d = 0, dv = 0;
};

// Keys row `row` sees among [c0, c0 + cols): all, or with the causal mask
// the ones at or before the row (possibly none).
int64_t Visible(int64_t row, int64_t c0, int64_t cols, bool causal) {
  return causal ? std::clamp<int64_t>(row + 1 - c0, 0, cols) : cols;
}

// ---- Shapes ------------------------------------------------------------------

// Checks Q [..., Sq, D], K [..., Sk, D], V [..., Sk, Dv] (same batch dims;
// Sq == Sk when causal) and returns the dims of Out.
Dims CheckAttentionInputs(const InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "Q");
  ops_b::CheckSameDtype(ctx, "K", dtype, "Q");
  ops_b::CheckSameDtype(ctx, "V", dtype, "Q");
  const Dims q = ctx.InputDims("Q"), k = ctx.InputDims("K"), v = ctx.InputDims("V");
  if (q.size() < 2) ctx.Fail("input Q: expected rank >= 2 ([..., Sq, D]), got ", DimsToString(q));
  if (k.size() != q.size() || v.size() != q.size()) {
    ctx.Fail("inputs Q, K, V: expected one rank, got Q ", DimsToString(q), ", K ", DimsToString(k), ", V ",
             DimsToString(v));
  }
  const size_t r = q.size();
  for (size_t i = 0; i + 2 < r; ++i) {
    if (!DimCompatible(q[i], k[i]) || !DimCompatible(q[i], v[i])) {
      ctx.Fail("inputs Q, K, V: batch dims differ (no broadcast): Q ", DimsToString(q), ", K ", DimsToString(k),
               ", V ", DimsToString(v));
    }
  }
  if (!DimCompatible(q[r - 1], k[r - 1])) {
    ctx.Fail("input K: expected head dim ", q[r - 1], " (as Q ", DimsToString(q), "), got ", DimsToString(k));
  }
  if (!DimCompatible(k[r - 2], v[r - 2])) {
    ctx.Fail("input V: expected ", k[r - 2], " keys (as K ", DimsToString(k), "), got ", DimsToString(v));
  }
  if (ctx.Attr<bool>("causal") && !DimCompatible(q[r - 2], k[r - 2])) {
    ctx.Fail("causal attention needs as many queries as keys: Q ", DimsToString(q), ", K ", DimsToString(k));
  }
  Dims out = q;
  out[r - 1] = v[r - 1];
  return out;
}

void FusedAttentionInferShape(InferShapeContext& ctx) {
  const Dims out = CheckAttentionInputs(ctx);
  const DataType dtype = ctx.InputDtype("Q");
  ctx.SetOutput("Out", out, dtype);
  ctx.SetOutput("LSE", Dims(out.begin(), out.end() - 1), dtype);
}

void FusedAttentionGradInferShape(InferShapeContext& ctx) {
  const Dims out = CheckAttentionInputs(ctx);
  const DataType dtype = ctx.InputDtype("Q");
  const Dims lse(out.begin(), out.end() - 1);
  for (const char* slot : {"Out", "LSE", "Out@GRAD"}) {
    if (!ctx.HasInput(slot)) continue;
    ops_b::CheckSameDtype(ctx, slot, dtype, "Q");
    const Dims want = std::string(slot) == "LSE" ? lse : out;
    if (!DimsCompatible(ctx.InputDims(slot), want)) {
      ctx.Fail("input ", slot, ": expected dims ", DimsToString(want), ", got ", DimsToString(ctx.InputDims(slot)));
    }
  }
  ops_b::SetLike(ctx, "Q@GRAD", "Q");
  ops_b::SetLike(ctx, "K@GRAD", "K");
  ops_b::SetLike(ctx, "V@GRAD", "V");
}

AttnShape ShapeOf(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttnShape s;
  const size_t r = q.rank();
  s.sq = q.dims()[r - 2];
  s.d = q.dims()[r - 1];
  s.sk = k.dims()[r - 2];
  s.dv = v.dims()[r - 1];
  s.heads = Numel(Dims(q.dims().begin(), q.dims().end() - 2));
  return s;
}

template <typename T>
T Dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// ---- Forward -------------------------------------------------------------------

// One head: q [sq, d], k [sk, d], v [sk, dv] -> out [sq, dv], lse [sq].
// Per tile of kRows queries, key tiles of kCols: the scores of the tile, the
// new row maximum m', probabilities exp(s - m'), the old sum and output
// rescaled by exp(m - m'). With no keys (sk == 0) a row gets Out = 0 and
// LSE = -inf; with the causal mask every row sees at least key 0.
template <typename T>
void ForwardHead(const T* q, const T* k, const T* v, T* out, T* lse, const AttnShape& s, T scale, bool causal) {
  std::vector<T> p(kCols), acc(kRows * s.dv), m(kRows), l(kRows);
  for (int64_t r0 = 0; r0 < s.sq; r0 += kRows) {
    const int64_t rows = std::min(kRows, s.sq - r0);
    std::fill(acc.begin(), acc.end(), T(0));
    std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
    std::fill(l.begin(), l.end(), T(0));
    const int64_t kend = causal ? std::min(s.sk, r0 + rows) : s.sk;
    for (int64_t c0 = 0; c0 < kend; c0 += kCols) {
      const int64_t cols = std::min(kCols, kend - c0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = Visible(r0 + r, c0, cols, causal);
        if (n == 0) continue;
        T mt = m[r];
        for (int64_t c = 0; c < n; ++c) {
          p[c] = scale * Dot(q + (r0 + r) * s.d, k + (c0 + c) * s.d, s.d);
          mt = std::max(mt, p[c]);
        }
        const T alpha = std::exp(m[r] - mt);  // 0 for the first tile (m = -inf)
        T sum = 0;
        T* a = acc.data() + r * s.dv;
        for (int64_t j = 0; j < s.dv; ++j) a[j] *= alpha;
        for (int64_t c = 0; c < n; ++c) {
          const T e = std::exp(p[c] - mt);
          sum += e;
          const T* vr = v + (c0 + c) * s.dv;
          for (int64_t j = 0; j < s.dv; ++j) a[j] += e * vr[j];
        }
        l[r] = l[r] * alpha + sum;
        m[r] = mt;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T inv = l[r] > 0 ? T(1) / l[r] : T(0);
      for (int64_t j = 0; j < s.dv; ++j) out[(r0 + r) * s.dv + j] = acc[r * s.dv + j] * inv;
      lse[r0 + r] = m[r] + std::log(l[r]);
    }
  }
}

template <typename T>
void FusedAttentionKernel(ExecContext& ctx) {
  const Tensor& qt = ctx.Input("Q");
  const Tensor& kt = ctx.Input("K");
  const Tensor& vt = ctx.Input("V");
  const AttnShape s = ShapeOf(qt, kt, vt);
  const T scale = static_cast<T>(ctx.Attr<float>("scale"));
  const bool causal = ctx.Attr<bool>("causal");
  const T* q = qt.data<T>();
  const T* k = kt.data<T>();
  const T* v = vt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>();
  T* lse = ctx.Output("LSE")->mutable_data<T>();
#pragma omp parallel for schedule(dynamic)
  for (int64_t h = 0; h < s.heads; ++h) {
    ForwardHead(q + h * s.sq * s.d, k + h * s.sk * s.d, v + h * s.sk * s.dv, out + h * s.sq * s.dv, lse + h * s.sq,
                s, scale, causal);
  }
}

// ---- Backward ------------------------------------------------------------------

// The gradients of one head; each pointer at the head's first element, a
// null gradient is not wanted.
template <typename T>
struct GradHead {
  const T *q, *k, *v, *out, *lse, *dout;
  T *dq, *dk, *dv;
};

// With P = exp(s - lse) recomputed per tile and D = rowsum(dOut * Out):
//   dV += P^T dOut,  dP = dOut V^T,  dS = scale * P * (dP - D),
//   dQ += dS K,      dK += dS^T Q.
// Key tiles outside, query tiles inside: the tiles of one key block's dK and
// dV stay hot while the queries stream past (FlashAttention-2's order).
template <typename T>
void BackwardHead(const GradHead<T>& g, const AttnShape& s, T scale, bool causal) {
  std::vector<T> dsum(s.sq);
  for (int64_t r = 0; r < s.sq; ++r) dsum[r] = Dot(g.dout + r * s.dv, g.out + r * s.dv, s.dv);
  for (int64_t c0 = 0; c0 < s.sk; c0 += kCols) {
    const int64_t cols = std::min(kCols, s.sk - c0);
    // Causal: rows before c0 see none of these keys.
    for (int64_t r0 = causal ? c0 : 0; r0 < s.sq; r0 += kRows) {
      const int64_t rows = std::min(kRows, s.sq - r0);
      for (int64_t r = r0; r < r0 + rows; ++r) {
        const int64_t n = Visible(r, c0, cols, causal);
        const T* qr = g.q + r * s.d;
        const T* dor = g.dout + r * s.dv;
        for (int64_t c = c0; c < c0 + n; ++c) {
          const T p = std::exp(scale * Dot(qr, g.k + c * s.d, s.d) - g.lse[r]);
          if (g.dv != nullptr) {
            for (int64_t j = 0; j < s.dv; ++j) g.dv[c * s.dv + j] += p * dor[j];
          }
          if (g.dq == nullptr && g.dk == nullptr) continue;
          const T ds = scale * p * (Dot(dor, g.v + c * s.dv, s.dv) - dsum[r]);
          for (int64_t j = 0; j < s.d && g.dq != nullptr; ++j) g.dq[r * s.d + j] += ds * g.k[c * s.d + j];
          for (int64_t j = 0; j < s.d && g.dk != nullptr; ++j) g.dk[c * s.d + j] += ds * qr[j];
        }
      }
    }
  }
}

template <typename T>
T* ZeroedOrNull(ExecContext& ctx, const char* slot) {
  Tensor* t = ctx.OutputOrNull(slot);
  return t == nullptr ? nullptr : ops_b::ZeroFill<T>(t);
}

template <typename T>
void FusedAttentionGradKernel(ExecContext& ctx) {
  T* dq = ZeroedOrNull<T>(ctx, "Q@GRAD");
  T* dk = ZeroedOrNull<T>(ctx, "K@GRAD");
  T* dv = ZeroedOrNull<T>(ctx, "V@GRAD");
  const Tensor* dout = ctx.InputOrNull("Out@GRAD");
  if (dout == nullptr) return;  // no gradient flows in: all stay zero
  const Tensor& qt = ctx.Input("Q");
  const Tensor& kt = ctx.Input("K");
  const Tensor& vt = ctx.Input("V");
  const AttnShape s = ShapeOf(qt, kt, vt);
  const T scale = static_cast<T>(ctx.Attr<float>("scale"));
  const bool causal = ctx.Attr<bool>("causal");
  const T* q = qt.data<T>();
  const T* k = kt.data<T>();
  const T* v = vt.data<T>();
  const T* out = ctx.Input("Out").data<T>();
  const T* lse = ctx.Input("LSE").data<T>();
  const T* dop = dout->data<T>();
#pragma omp parallel for schedule(dynamic)
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t qo = h * s.sq * s.d, ko = h * s.sk * s.d, vo = h * s.sk * s.dv, oo = h * s.sq * s.dv;
    const GradHead<T> g{q + qo,  k + ko, v + vo, out + oo, lse + h * s.sq, dop + oo,
                        dq ? dq + qo : nullptr, dk ? dk + ko : nullptr, dv ? dv + vo : nullptr};
    BackwardHead(g, s, scale, causal);
  }
}

std::vector<AttrDef> AttentionAttrs() {
  return {{"scale", AttrKind::kFloat, Attribute(1.0f)}, {"causal", AttrKind::kBool, Attribute(false)}};
}

}  // namespace

void RegisterFusedAttentionOps(OpRegistry& r) {
  OpInfo fwd;
  fwd.type = "fused_attention";
  fwd.doc = "Out = softmax(scale * Q @ K^T) @ V over the last two dims of Q [..., Sq, D], K [..., Sk, D], "
            "V [..., Sk, Dv] (same batch dims); causal: query i sees keys j <= i. LSE [..., Sq] is each row's "
            "log-sum-exp of the scores, for the backward. Tiled with an online softmax: the probabilities are "
            "never stored";
  fwd.inputs = {{"Q"}, {"K"}, {"V"}};
  fwd.outputs = {{"Out"}, {"LSE"}};
  fwd.attrs = AttentionAttrs();
  fwd.infer_shape = FusedAttentionInferShape;
  fwd.reference_kernel = [](ExecContext& ctx) {
    ops_b::DispatchFloat(ctx, "Q", [&](auto tag) { FusedAttentionKernel<decltype(tag)>(ctx); });
  };
  fwd.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"Q", "K", "V"}, {"Out", "LSE"}, {"Out"}, {"Q", "K", "V"})};
  };
  fwd.jit = JitLowering::kFramework;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = "fused_attention_grad";
  grad.doc = "Gradients of fused_attention w.r.t. Q, K and V; recomputes each tile's probabilities from LSE";
  grad.inputs = {{"Q"}, {"K"}, {"V"}, {"Out"}, {"LSE"}, {"Out@GRAD", false, true}};
  grad.outputs = {{"Q@GRAD", false, true}, {"K@GRAD", false, true}, {"V@GRAD", false, true}};
  grad.attrs = AttentionAttrs();
  grad.infer_shape = FusedAttentionGradInferShape;
  grad.reference_kernel = [](ExecContext& ctx) {
    ops_b::DispatchFloat(ctx, "Q", [&](auto tag) { FusedAttentionGradKernel<decltype(tag)>(ctx); });
  };
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
