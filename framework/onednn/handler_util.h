// Helpers shared by the handler sources (handlers*.cc).
// Internal to framework/onednn: kernels and the compiler use handlers.h.
#pragma once

#include <algorithm>

#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_handler.h"

namespace kiln::onednn::detail {

// oneDNN tensors have at most DNNL_MAX_NDIMS dims.
inline bool RankOk(const Dims& dims) { return !dims.empty() && dims.size() <= DNNL_MAX_NDIMS; }

inline bool AllPositive(const Dims& dims) {
  return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d > 0; });
}

// Right padding that makes oneDNN's output size formula
// (in + pad_l + pad_r - span) / stride + 1 give `out`. It is clamped at 0: when
// the exact value would be negative, the floor division already drops the
// rows no window reaches.
inline int64_t PaddingRight(int64_t in, int64_t out, int64_t span, int64_t stride, int64_t pad_l) {
  return std::max<int64_t>(0, (out - 1) * stride + span - in - pad_l);
}

inline dnnl::memory::dims D(const Dims& dims) { return ToDnnlDims(dims); }

// Lets the primitive choose the layout (it is reordered to and from plain).
inline dnnl::memory::desc AnyDesc(const Dims& dims, dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc(D(dims), type, dnnl::memory::format_tag::any);
}

// Activations `dims` in a layout a cluster keeps (framework/act_layout.h);
// plain for kPlain. An [n, c, s, 1] view of [N, C, H, W] (s = H * W) has
// the same memory in each of them.
inline dnnl::memory::desc KeptDesc(const Dims& dims, ActLayout layout, dnnl::memory::data_type type) {
  using tag = dnnl::memory::format_tag;
  switch (layout) {
    case ActLayout::kNChw8c: return dnnl::memory::desc(D(dims), type, tag::aBcd8b);
    case ActLayout::kNChw16c: return dnnl::memory::desc(D(dims), type, tag::aBcd16b);
    case ActLayout::kNhwc: return dnnl::memory::desc(D(dims), type, tag::nhwc);
    case ActLayout::kPlain: break;
  }
  return PlainDesc(dims, type);
}

inline PrimitiveEntry MakeEntry(const dnnl::primitive_desc_base& pd, const dnnl::primitive& p) {
  PrimitiveEntry e;
  e.pd = pd;
  e.primitive = p;
  return e;
}

// oneDNN adds a primitive's own bias before the output scale
// (dst = scale * (acc + bias)); a key means scale * acc + bias. With a scale,
// the bias is therefore the first post-op instead (a binary add, bound at
// kBiasPostOpArg) and the primitive is created without one.
inline bool BiasIsPostOp(const PrimitiveKey& key) { return key.bias && key.output_scale != 1.0f; }
constexpr int kBiasPostOpArg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;

// OneDnnHandler::DefaultAttr() plus the key's output scale and post-ops;
// `bias_md` (broadcast over dst) is used when BiasIsPostOp(key).
inline dnnl::primitive_attr FusedAttr(const PrimitiveKey& key, const dnnl::memory::desc& bias_md) {
  dnnl::primitive_attr attr = OneDnnHandler::DefaultAttr();
  if (key.output_scale != 1.0f) attr.set_output_scales(0, {key.output_scale});
  if (key.post_ops.empty() && !BiasIsPostOp(key)) return attr;
  dnnl::post_ops ops;
  if (BiasIsPostOp(key)) ops.append_binary(dnnl::algorithm::binary_add, bias_md);
  for (const PostOp& p : key.post_ops) {
    if (p.kind == PostOp::Kind::kSum) {
      ops.append_sum(p.scale);
    } else {
      ops.append_eltwise(p.scale, static_cast<dnnl::algorithm>(p.algorithm), p.alpha, p.beta);
    }
  }
  attr.set_post_ops(ops);
  return attr;
}

// True when a post-op reads the old contents of dst (a sum).
inline bool ReadsDst(const PrimitiveKey& key) {
  return std::any_of(key.post_ops.begin(), key.post_ops.end(),
                     [](const PostOp& p) { return p.kind == PostOp::Kind::kSum; });
}

// Copies the bias and post-ops of `fused` into `key`.
inline void SetFusion(PrimitiveKey* key, const FusedOps& fused) {
  key->bias = fused.bias;
  key->post_ops = fused.post_ops;
}

// Binds the optional bias to `args` (nothing when the key has none).
inline bool BindBias(OneDnnHandler* h, const Tensor* bias, ExecArgs* args) {
  if (!h->forward_key().bias) return true;
  if (bias == nullptr) return false;
  const int arg = h->entry().bias_arg;
  (*args)[arg] = h->AcquireMemory(h->UserDesc(arg), *bias);
  return true;
}

// The operand type of a compute type (bf16 operands accumulate in f32).
inline dnnl::memory::data_type OperandType(ComputeType compute) {
  return compute == ComputeType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

}  // namespace kiln::onednn::detail
