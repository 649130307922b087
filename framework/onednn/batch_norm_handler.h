// oneDNN batch normalisation (forward training, forward inference with the
// running statistics, backward) through the Acquire-style handler base.
#pragma once

#include "framework/onednn/onednn_handler.h"

namespace kiln::onednn {

// Per-channel batch normalisation of x [n, c, ...] viewed as [n, c, s, 1]
// (s: the product of the spatial dims; the same memory as NC, NCHW, NCDHW in
// plain layout), always with scale and shift ([c] each). Key dims:
// {[n, c, s, 1]}; epsilon; flags = use_scale | use_shift, plus
// use_global_stats when `global_stats` (normalise with given statistics,
// which the backward treats as constants). Statistics are [c]; the variance
// is the biased one. oneDNN does not update running statistics: the caller
// does.
class BatchNormHandler : public OneDnnHandler {
 public:
  BatchNormHandler(PrimitiveCache& cache, const Settings& settings, int64_t n, int64_t c, int64_t s, float epsilon,
                   bool global_stats);
  // For compiled code (compiler/kernels/onednn/batch_norm_kernels.h), before
  // the primitives are acquired: src, dst and their gradients in `layout`
  // (PrimitiveKey::kept_layout; [n, c, s, 1] viewing [N, C, H, W]), and
  // with `fuse_relu` a relu after the normalisation (oneDNN's
  // fuse_norm_relu: the forward writes a workspace the backward reads
  // instead of the relu's output). The Run* methods bind plain tensors and
  // must not be used after it.
  void KeepLayout(ActLayout layout, bool fuse_relu);
  // The descriptor of x, y and their gradients.
  dnnl::memory::desc DataDesc() const;
  // Training (global_stats false): normalises with the batch statistics and
  // writes them to `mean` and `variance`.
  bool RunTraining(const Tensor& x, const Tensor& scale, const Tensor& shift, Tensor* y, Tensor* mean,
                   Tensor* variance);
  // global_stats: normalises with the given `mean` and `variance`.
  bool RunInference(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                    const Tensor& variance, Tensor* y);
  // `mean`/`variance`: the statistics the forward normalised with. Outputs
  // may be null (not wanted).
  bool RunBackward(const Tensor& x, const Tensor& scale, const Tensor& mean, const Tensor& variance, const Tensor& d_y,
                   Tensor* d_x, Tensor* d_scale, Tensor* d_shift);

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;

 private:
  dnnl::batch_normalization_forward::primitive_desc ForwardPd(dnnl::prop_kind prop) const;
  bool Valid() const;

  int64_t n_, c_, s_;
  bool global_stats_;
};

}  // namespace kiln::onednn
