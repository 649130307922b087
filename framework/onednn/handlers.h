// Derived Acquire-style handlers, one per oneDNN op family. Each constructor
// builds the PrimitiveKey from dims and attributes (OPS.md semantics already
// resolved by the caller); each Run* method acquires the primitive (cached),
// wraps the tensors and executes. Run* returns false when oneDNN has no
// implementation for the case; the caller then falls back to the reference
// kernel. Tensors are FP32, dense row-major; outputs must already have their
// dims (their buffers are allocated here).
//
// Used by the oneDNN kernels (onednn_kernels.cc) and by the compiler, which
// keeps the entries of fused forward primitives and runs them on its own
// buffers (acquired_entry(), ExecuteEntry).
#pragma once

#include <vector>

#include "framework/onednn/onednn_handler.h"

namespace kiln::onednn {

// What a forward primitive fuses after its main computation, in oneDNN's
// order: dst = post_ops(result + bias). Part of the key
// (PrimitiveKey::bias, post_ops). A sum post-op adds dst's old contents.
struct FusedOps {
  bool bias = false;
  std::vector<PostOp> post_ops;
};

// dst = alpha * op(a) @ op(b) [+ bias], then the post-ops. `a_dims`/`b_dims`
// are the stored dims (rank >= 2); with trans_a the stored a is [..., K, M].
// Batch dims are padded with leading 1s to a common rank and broadcast where
// one side is 1. When b has no batch (all 1) and a is not transposed, a's
// batch dims fold into M (one 2-D product). Key dims: {a, b} as the primitive
// sees them; alpha is the key's output_scale. The bias is [N] (a row added to
// every row of dst).
//
// With `compute` kBF16 (--amp bf16) the primitive multiplies bf16 operands
// with f32 accumulation and writes f32: the tensors stay f32 and the entry's
// reorders convert a and b into bf16 copies held for one execution (so the
// bias, the post-ops and a sum into dst work on f32 as before). Key:
// PrimitiveKey::compute. With `b_dtype` (`a_dtype`) kBF16 as well, b (a) is
// stored in bf16 (the JIT's weight copies and lr-scaled operands) and bound
// as it is (PrimitiveKey::b_dtype, a_dtype); `valid()` is false for a bf16
// operand with f32 compute.
class MatmulHandler : public OneDnnHandler {
 public:
  MatmulHandler(PrimitiveCache& cache, const Settings& settings, const Dims& a_dims, bool trans_a, const Dims& b_dims,
                bool trans_b, float alpha, const FusedOps& fused = {}, ComputeType compute = ComputeType::kF32,
                DataType b_dtype = DataType::kFP32, DataType a_dtype = DataType::kFP32);
  // False when the dims do not make a matmul oneDNN can express.
  bool valid() const { return valid_; }
  // Dims of dst (batch dims broadcast, at the common rank).
  const Dims& dst_dims() const { return dst_dims_; }
  bool Run(const Tensor& a, const Tensor& b, Tensor* dst);
  // `bias` is required when the handler fuses one (false otherwise).
  bool Run(const Tensor& a, const Tensor& b, const Tensor* bias, Tensor* dst);

 protected:
  PrimitiveEntry CreateForward() const override;

 private:
  bool valid_ = false;
  Dims dst_dims_;
  Dims prim_dst_dims_;  // the primitive's dst dims (2-D when folded)
};

// 2-D convolution, NCHW input, OIHW filter (O, C/groups, KH, KW). `strides`,
// `dilations` (kiln convention: 1 = dense) and symmetric `paddings` have 2
// entries. Key dims: {input, filter}. Each primitive works blocked or
// channels-last, whichever gets oneDNN's best implementation for its shape
// (ConvLayout); the cached entry holds the reorders from and to the plain
// tensors.
// The forward may fuse a bias [O] and post-ops (e.g. relu); the backward
// passes are always those of the plain convolution.
//
// With `compute` kBF16 (--amp bf16) every pass multiplies bf16 operands with
// f32 accumulation and writes f32: forward src/weights bf16, dst f32 (the
// bias and post-ops on f32); backward-data diff_dst/weights bf16, diff_src
// f32; backward-weights src/diff_dst bf16, diff_weights f32. The entry's
// reorders, which already move the plain tensors into the primitive's
// layouts, convert to bf16 on the way. Key: PrimitiveKey::compute.
// Where a convolution primitive keeps its activations: oneDNN's blocked
// layout of choice (format "any"), NHWC, or the tensors' own NCHW.
enum class ConvLayout { kBlocked, kChannelsLast, kPlain };

class ConvHandler : public OneDnnHandler {
 public:
  ConvHandler(PrimitiveCache& cache, const Settings& settings, const Dims& input_dims, const Dims& filter_dims,
              const Dims& strides, const Dims& paddings, const Dims& dilations, int64_t groups,
              const FusedOps& fused = {}, ComputeType compute = ComputeType::kF32);
  bool valid() const { return valid_; }
  const Dims& output_dims() const { return output_dims_; }
  bool RunForward(const Tensor& input, const Tensor& filter, Tensor* output);
  // `bias` is required when the handler fuses one (false otherwise).
  bool RunForward(const Tensor& input, const Tensor& filter, const Tensor* bias, Tensor* output);
  bool RunBackwardData(const Tensor& filter, const Tensor& d_output, Tensor* d_input);
  bool RunBackwardWeights(const Tensor& input, const Tensor& d_output, Tensor* d_filter);

  // ---- For compiled code (compiler/kernels/onednn/onednn_kernels.cc) ----------------------
  // The layout the forward primitive picks for its f32 dst when it is one a
  // cluster can keep (nChw8c, nChw16c, nhwc); kPlain otherwise.
  ActLayout ForwardDstLayout() const;
  // Likewise for its f32 src (kPlain under bf16 compute).
  ActLayout ForwardSrcLayout() const;
  // Binds the forward's dst (f32) and the backward's diff_dst (`diff_dst`:
  // f32, or bf16 under bf16 compute) in `layout` (PrimitiveKey::kept_layout,
  // kept_dtype); a backward primitive that runs faster in another layout
  // reorders diff_dst itself.
  void BindKept(ActLayout layout, DataType diff_dst = DataType::kFP32);
  // Binds the f32 src (forward, weights' backward) and diff_src (data
  // backward) in `layout` (PrimitiveKey::src_kept_layout): the input a
  // chain keeps blocked. f32 compute only.
  void BindKeptSrc(ActLayout layout);
  // The layout the data backward picks for its f32 diff_src when the src
  // stays plain, if a cluster can keep it (nChw8c, nChw16c, nhwc); kPlain
  // otherwise.
  ActLayout BackwardDataDiffSrcLayout() const;
  // Binds the data backward's diff_src in `layout`
  // (PrimitiveKey::diff_src_kept_layout) while the src stays plain.
  void BindKeptDiffSrc(ActLayout layout);
  // The weights' backward also writes the bias gradient (DNNL_ARG_DIFF_BIAS,
  // [C_out], the sum of diff_dst over N, H and W).
  void WithDiffBias();
  // The backward primitives as the current entry (acquired_entry()); false
  // for a slow implementation, as AcquireBackwardPrimitive.
  bool AcquireBackwardData();
  bool AcquireBackwardWeights();

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;  // bwd_key_.kind picks data or weights

 private:
  PrimitiveEntry CreateBackwardData() const;
  dnnl::convolution_backward_data::primitive_desc BackwardDataPd(const PrimitiveKey& key) const;
  ActLayout ForwardKeepableLayout(bool src) const;
  PrimitiveEntry CreateBackwardWeights() const;
  // The forward of `key` (fwd_key_, or bwd_key_ as the backward's hint) with
  // its activations in `layout` (the filter "any" unless kPlain).
  dnnl::convolution_forward::primitive_desc ForwardPd(const PrimitiveKey& key, ConvLayout layout) const;
  // diff_dst (the forward's dst) as the tensor binds it, and as the
  // primitive in `layout` reads it.
  dnnl::memory::desc DiffDstUserDesc(const PrimitiveKey& key) const;
  dnnl::memory::desc DiffDstDesc(const PrimitiveKey& key, ConvLayout layout, dnnl::memory::data_type type) const;
  // src (and diff_src) as the tensor binds it, and as the primitive in
  // `layout` reads it.
  dnnl::memory::desc SrcUserDesc(const PrimitiveKey& key) const;
  dnnl::memory::desc SrcDesc(const PrimitiveKey& key, ConvLayout layout, dnnl::memory::data_type type) const;
  // diff_src (f32) likewise.
  dnnl::memory::desc DiffSrcUserDesc(const PrimitiveKey& key) const;
  dnnl::memory::desc DiffSrcDesc(const PrimitiveKey& key, ConvLayout layout) const;
  // The filter as `type` (f32: the tensor's own).
  dnnl::memory::desc FilterDesc(bool any, dnnl::memory::data_type type = dnnl::memory::data_type::f32) const;

  bool valid_ = false;
  Dims output_dims_;
};

// 2-D max or average pooling, NCHW. `kernel`, `strides`, `paddings`
// (symmetric) have 2 entries; windows are clipped to the input, so padding
// never wins a max and is not counted by exclusive averaging. Key dims: {x}.
class PoolHandler : public OneDnnHandler {
 public:
  PoolHandler(PrimitiveCache& cache, const Settings& settings, const Dims& x_dims, bool is_max, bool exclusive,
              const Dims& kernel, const Dims& strides, const Dims& paddings);
  bool valid() const { return valid_; }
  const Dims& out_dims() const { return out_dims_; }
  bool RunForward(const Tensor& x, Tensor* out);
  // Max pooling re-runs the forward (training) pass on x for its workspace
  // (the argmax positions), then routes d_out through it.
  bool RunBackward(const Tensor& x, const Tensor& d_out, Tensor* d_x);

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;  // aux[0]: forward training (max only)

 private:
  dnnl::pooling_forward::primitive_desc ForwardPd(dnnl::prop_kind prop) const;

  bool valid_ = false;
  bool is_max_ = false;
  Dims out_dims_;
};

// Softmax along `axis` (normalised). Backward reads Out. Key dims: {x}.
class SoftmaxHandler : public OneDnnHandler {
 public:
  SoftmaxHandler(PrimitiveCache& cache, const Settings& settings, const Dims& dims, int64_t axis);
  bool RunForward(const Tensor& x, Tensor* out);
  bool RunBackward(const Tensor& out, const Tensor& d_out, Tensor* d_x);

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;

 private:
  dnnl::softmax_forward::primitive_desc ForwardPd() const;
};

// Sum or mean of x over the dims where `dst_dims` (same rank as x) is 1.
// Key dims: {x, dst}; algorithm reduction_sum / reduction_mean.
class ReductionHandler : public OneDnnHandler {
 public:
  ReductionHandler(PrimitiveCache& cache, const Settings& settings, const Dims& x_dims, const Dims& dst_dims,
                   bool mean);
  // `out` holds numel(dst_dims) elements (its own dims may drop the 1s).
  bool RunForward(const Tensor& x, Tensor* out);

 protected:
  PrimitiveEntry CreateForward() const override;
};

// Layer normalisation of x viewed as [rows, cols] (cols = product of the dims
// from begin_norm_axis on). Mean/Variance are [rows]; Variance is biased.
// Key dims: {[rows, cols]}; flags say whether scale/bias are used.
class LayerNormHandler : public OneDnnHandler {
 public:
  LayerNormHandler(PrimitiveCache& cache, const Settings& settings, int64_t rows, int64_t cols, float epsilon,
                   bool use_scale, bool use_bias);
  // `scale`/`bias` may be null when not used; `mean`/`variance` may be null
  // (not wanted).
  bool RunForward(const Tensor& x, const Tensor* scale, const Tensor* bias, Tensor* y, Tensor* mean,
                  Tensor* variance);
  // `mean`/`variance` are the forward's statistics. Outputs may be null.
  bool RunBackward(const Tensor& x, const Tensor* scale, const Tensor& mean, const Tensor& variance,
                   const Tensor& d_y, Tensor* d_x, Tensor* d_scale, Tensor* d_bias);

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;

 private:
  dnnl::layer_normalization_forward::primitive_desc ForwardPd() const;
  dnnl::memory::desc StatDesc() const;

  int64_t rows_, cols_;
  bool use_scale_, use_bias_;
};

// Elementwise unary op (dnnl::algorithm eltwise_*), on the flattened tensor.
// The backward reads dst for *_use_dst_for_bwd algorithms and src otherwise.
// Key dims: {[numel]}.
class EltwiseHandler : public OneDnnHandler {
 public:
  EltwiseHandler(PrimitiveCache& cache, const Settings& settings, int64_t numel, dnnl::algorithm algorithm,
                 float alpha = 0.0f, float beta = 0.0f);
  bool RunForward(const Tensor& x, Tensor* out);
  // `data` is Out for use_dst algorithms, X otherwise.
  bool RunBackward(const Tensor& data, const Tensor& d_out, Tensor* d_x);

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;

 private:
  dnnl::eltwise_forward::primitive_desc ForwardPd() const;
};

// dst = x (op) y with y broadcast into x: `y_dims` has x's rank, each dim equal
// to x's or 1 (BroadcastYDims). Key dims: {x, y} with neighbouring dims of
// the same broadcast merged ([2,3,7,5] + [1,3,7,1] is keyed [2,21,5]x[1,21,1]),
// which also lets oneDNN pick its jit implementation for more patterns.
class BinaryHandler : public OneDnnHandler {
 public:
  BinaryHandler(PrimitiveCache& cache, const Settings& settings, const Dims& x_dims, const Dims& y_dims,
                dnnl::algorithm algorithm);
  bool Run(const Tensor& x, const Tensor& y, Tensor* out);

 protected:
  PrimitiveEntry CreateForward() const override;
};

// out = sum of `count` tensors of `numel` elements each. Key dims: count x {[numel]}.
class SumHandler : public OneDnnHandler {
 public:
  SumHandler(PrimitiveCache& cache, const Settings& settings, int64_t numel, size_t count);
  bool Run(const std::vector<const Tensor*>& xs, Tensor* out);

 protected:
  PrimitiveEntry CreateForward() const override;
};

// Whether this CPU has fast bf16 matmuls and convolutions in oneDNN
// (AVX512_CORE at least, natively AVX512_BF16): creates a small one of each.
// When not, *why (if given) says which and what oneDNN offered instead.
bool Bf16KernelsAvailable(std::string* why = nullptr);

}  // namespace kiln::onednn
