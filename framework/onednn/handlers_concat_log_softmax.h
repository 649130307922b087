// Handlers for oneDNN's concat and logsoftmax primitives (the kernels of
// concat, split_grad, log_softmax and log_softmax_grad). Same contract as
// handlers.h: the constructor builds the typed key, Run* acquires the cached
// primitive and returns false when oneDNN has no (fast) implementation.
// Tensors are FP32, dense row-major; outputs already have their dims.
#pragma once

#include <vector>

#include "framework/onednn/onednn_handler.h"

namespace kiln::onednn {

// dst = the sources joined along `axis`; every source has dst's rank and
// dst's dims except on the axis. Key dims: the sources' dims, in order.
class ConcatHandler : public OneDnnHandler {
 public:
  ConcatHandler(PrimitiveCache& cache, const Settings& settings, const std::vector<Dims>& src_dims, int64_t axis);
  // False when the sources do not make a concat (rank, dims, empty).
  bool valid() const { return valid_; }
  const Dims& dst_dims() const { return dst_dims_; }
  bool Run(const std::vector<const Tensor*>& srcs, Tensor* dst);

 protected:
  PrimitiveEntry CreateForward() const override;

 private:
  bool valid_ = false;
  Dims dst_dims_;
};

// log(softmax(x)) along `axis`, computed by oneDNN as x - max - log(sum(exp(x
// - max))). The backward reads dst: diff_src = diff_dst - exp(dst) *
// sum(diff_dst). Key dims: {x}.
class LogSoftmaxHandler : public OneDnnHandler {
 public:
  LogSoftmaxHandler(PrimitiveCache& cache, const Settings& settings, const Dims& dims, int64_t axis);
  bool RunForward(const Tensor& x, Tensor* out);
  bool RunBackward(const Tensor& out, const Tensor& d_out, Tensor* d_x);

 protected:
  PrimitiveEntry CreateForward() const override;
  PrimitiveEntry CreateBackward() const override;

 private:
  dnnl::logsoftmax_forward::primitive_desc ForwardPd() const;
};

}  // namespace kiln::onednn
