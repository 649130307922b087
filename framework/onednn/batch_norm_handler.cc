#include "framework/onednn/batch_norm_handler.h"

#include <cstring>

#include "framework/onednn/handler_util.h"

namespace kiln::onednn {

using detail::MakeEntry;
using dnnl::normalization_flags;
using dnnl::prop_kind;

BatchNormHandler::BatchNormHandler(PrimitiveCache& cache, const Settings& settings, int64_t n, int64_t c, int64_t s,
                                   float epsilon, bool global_stats)
    : OneDnnHandler(cache, settings), n_(n), c_(c), s_(s), global_stats_(global_stats) {
  normalization_flags flags = normalization_flags::use_scale | normalization_flags::use_shift;
  if (global_stats) flags = flags | normalization_flags::use_global_stats;
  fwd_key_.kind = PrimitiveKind::kBatchNormForward;
  fwd_key_.dims = {{n, c, s, 1}};
  fwd_key_.epsilon = epsilon;
  fwd_key_.flags = static_cast<uint32_t>(flags);
  bwd_key_ = fwd_key_;
  bwd_key_.kind = PrimitiveKind::kBatchNormBackward;
}

void BatchNormHandler::KeepLayout(ActLayout layout, bool fuse_relu) {
  fwd_key_.kept_layout = layout;
  if (fuse_relu) fwd_key_.flags |= static_cast<uint32_t>(normalization_flags::fuse_norm_relu);
  const PrimitiveKind kind = bwd_key_.kind;
  bwd_key_ = fwd_key_;
  bwd_key_.kind = kind;
}

dnnl::memory::desc BatchNormHandler::DataDesc() const {
  return detail::KeptDesc(fwd_key_.dims[0], fwd_key_.kept_layout, dnnl::memory::data_type::f32);
}

bool BatchNormHandler::Valid() const { return n_ > 0 && c_ > 0 && s_ > 0; }

dnnl::batch_normalization_forward::primitive_desc BatchNormHandler::ForwardPd(prop_kind prop) const {
  dnnl::batch_normalization_forward::desc desc(prop, DataDesc(), fwd_key_.epsilon,
                                               static_cast<normalization_flags>(fwd_key_.flags));
  return dnnl::batch_normalization_forward::primitive_desc(desc, DefaultAttr(), Engine());
}

PrimitiveEntry BatchNormHandler::CreateForward() const {
  // With global statistics nothing is computed for the backward to reuse.
  auto pd = ForwardPd(global_stats_ ? prop_kind::forward_inference : prop_kind::forward_training);
  return MakeEntry(pd, dnnl::batch_normalization_forward(pd));
}

PrimitiveEntry BatchNormHandler::CreateBackward() const {
  const dnnl::memory::desc md = DataDesc();
  // prop_kind::backward: diff_src and the scale/shift gradients.
  dnnl::batch_normalization_backward::desc desc(prop_kind::backward, md, md, bwd_key_.epsilon,
                                                static_cast<normalization_flags>(bwd_key_.flags));
  dnnl::batch_normalization_backward::primitive_desc pd(desc, DefaultAttr(), Engine(),
                                                        ForwardPd(prop_kind::forward_training));
  return MakeEntry(pd, dnnl::batch_normalization_backward(pd));
}

bool BatchNormHandler::RunTraining(const Tensor& x, const Tensor& scale, const Tensor& shift, Tensor* y, Tensor* mean,
                                   Tensor* variance) {
  if (global_stats_ || !Valid() || !AcquireForwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(fwd_key_.dims[0]);
  const dnnl::memory::desc channel = PlainDesc({c_});
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireMemory(md, x);
  args[DNNL_ARG_DST] = AcquireMemory(md, y);
  args[DNNL_ARG_SCALE] = AcquireMemory(channel, scale);
  args[DNNL_ARG_SHIFT] = AcquireMemory(channel, shift);
  args[DNNL_ARG_MEAN] = AcquireMemory(channel, mean);
  args[DNNL_ARG_VARIANCE] = AcquireMemory(channel, variance);
  Execute(std::move(args));
  return true;
}

bool BatchNormHandler::RunInference(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                    const Tensor& variance, Tensor* y) {
  if (!global_stats_ || !Valid() || !AcquireForwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(fwd_key_.dims[0]);
  const dnnl::memory::desc channel = PlainDesc({c_});
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireMemory(md, x);
  args[DNNL_ARG_DST] = AcquireMemory(md, y);
  args[DNNL_ARG_SCALE] = AcquireMemory(channel, scale);
  args[DNNL_ARG_SHIFT] = AcquireMemory(channel, shift);
  args[DNNL_ARG_MEAN] = AcquireMemory(channel, mean);
  args[DNNL_ARG_VARIANCE] = AcquireMemory(channel, variance);
  Execute(std::move(args));
  return true;
}

bool BatchNormHandler::RunBackward(const Tensor& x, const Tensor& scale, const Tensor& mean, const Tensor& variance,
                                   const Tensor& d_y, Tensor* d_x, Tensor* d_scale, Tensor* d_shift) {
  if (!Valid() || !AcquireBackwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  const dnnl::memory::desc channel = PlainDesc({c_});
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireMemory(md, x);
  args[DNNL_ARG_DIFF_DST] = AcquireMemory(md, d_y);
  args[DNNL_ARG_MEAN] = AcquireMemory(channel, mean);
  args[DNNL_ARG_VARIANCE] = AcquireMemory(channel, variance);
  args[DNNL_ARG_SCALE] = AcquireMemory(channel, scale);
  // oneDNN writes every output of the primitive; unwanted ones go to scratch.
  args[DNNL_ARG_DIFF_SRC] = d_x ? AcquireMemory(md, d_x) : AcquireMemory(md);
  args[DNNL_ARG_DIFF_SCALE] = d_scale ? AcquireMemory(channel, d_scale) : AcquireMemory(channel);
  args[DNNL_ARG_DIFF_SHIFT] = d_shift ? AcquireMemory(channel, d_shift) : AcquireMemory(channel);
  // As for layer_norm (handlers.cc), oneDNN 2.6 wants a shift bound to run
  // a use_shift backward though no gradient depends on it; zeros keep it
  // deterministic.
  dnnl::memory shift = AcquireMemory(channel);
  std::memset(shift.get_data_handle(), 0, channel.get_size());
  args[DNNL_ARG_SHIFT] = shift;
  Execute(std::move(args));
  return true;
}

}  // namespace kiln::onednn
