#include "framework/onednn/handlers_concat_log_softmax.h"

#include "framework/onednn/handler_util.h"

namespace kiln::onednn {

using detail::AllPositive;
using detail::MakeEntry;
using detail::RankOk;
using dnnl::prop_kind;

// ---- ConcatHandler ---------------------------------------------------------------------

ConcatHandler::ConcatHandler(PrimitiveCache& cache, const Settings& settings, const std::vector<Dims>& src_dims,
                             int64_t axis)
    : OneDnnHandler(cache, settings) {
  fwd_key_.kind = PrimitiveKind::kConcat;
  fwd_key_.dims = src_dims;
  fwd_key_.axis = axis;
  if (src_dims.empty() || !RankOk(src_dims[0]) || axis < 0 || axis >= static_cast<int64_t>(src_dims[0].size())) {
    return;
  }
  dst_dims_ = src_dims[0];
  for (size_t k = 0; k < src_dims.size(); ++k) {
    const Dims& d = src_dims[k];
    if (d.size() != dst_dims_.size() || !AllPositive(d)) return;
    for (size_t a = 0; a < d.size(); ++a) {
      if (static_cast<int64_t>(a) != axis && d[a] != dst_dims_[a]) return;
    }
    if (k > 0) dst_dims_[axis] += d[axis];
  }
  valid_ = true;
}

PrimitiveEntry ConcatHandler::CreateForward() const {
  std::vector<dnnl::memory::desc> srcs;
  for (const Dims& d : fwd_key_.dims) srcs.push_back(PlainDesc(d));
  dnnl::concat::primitive_desc pd(PlainDesc(dst_dims_), static_cast<int>(fwd_key_.axis), srcs, Engine(), DefaultAttr());
  return MakeEntry(pd, dnnl::concat(pd));
}

bool ConcatHandler::Run(const std::vector<const Tensor*>& srcs, Tensor* dst) {
  if (!valid_ || srcs.size() != fwd_key_.dims.size() || dst->dims() != dst_dims_) return false;
  if (!AcquireForwardPrimitive()) return false;
  ExecArgs args;
  for (size_t k = 0; k < srcs.size(); ++k) {
    args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k)] = AcquireMemory(PlainDesc(fwd_key_.dims[k]), *srcs[k]);
  }
  args[DNNL_ARG_DST] = AcquireMemory(PlainDesc(dst_dims_), dst);
  Execute(std::move(args));
  return true;
}

// ---- LogSoftmaxHandler -----------------------------------------------------------------

LogSoftmaxHandler::LogSoftmaxHandler(PrimitiveCache& cache, const Settings& settings, const Dims& dims, int64_t axis)
    : OneDnnHandler(cache, settings) {
  fwd_key_.kind = PrimitiveKind::kLogSoftmaxForward;
  fwd_key_.dims = {dims};
  fwd_key_.axis = axis;
  bwd_key_ = fwd_key_;
  bwd_key_.kind = PrimitiveKind::kLogSoftmaxBackward;
}

dnnl::logsoftmax_forward::primitive_desc LogSoftmaxHandler::ForwardPd() const {
  dnnl::logsoftmax_forward::desc desc(prop_kind::forward_training, PlainDesc(fwd_key_.dims[0]),
                                      static_cast<int>(fwd_key_.axis));
  return dnnl::logsoftmax_forward::primitive_desc(desc, DefaultAttr(), Engine());
}

PrimitiveEntry LogSoftmaxHandler::CreateForward() const {
  auto pd = ForwardPd();
  return MakeEntry(pd, dnnl::logsoftmax_forward(pd));
}

PrimitiveEntry LogSoftmaxHandler::CreateBackward() const {
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  dnnl::logsoftmax_backward::desc desc(md, md, static_cast<int>(bwd_key_.axis));
  dnnl::logsoftmax_backward::primitive_desc pd(desc, DefaultAttr(), Engine(), ForwardPd());
  return MakeEntry(pd, dnnl::logsoftmax_backward(pd));
}

bool LogSoftmaxHandler::RunForward(const Tensor& x, Tensor* out) {
  if (!RankOk(x.dims()) || !AllPositive(x.dims()) || !AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(x);
  args[DNNL_ARG_DST] = AcquireDstMemory(out);
  Execute(std::move(args));
  return true;
}

bool LogSoftmaxHandler::RunBackward(const Tensor& out, const Tensor& d_out, Tensor* d_x) {
  if (!RankOk(out.dims()) || !AllPositive(out.dims()) || !AcquireBackwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  ExecArgs args;
  args[DNNL_ARG_DST] = AcquireMemory(md, out);
  args[DNNL_ARG_DIFF_DST] = AcquireMemory(md, d_out);
  args[DNNL_ARG_DIFF_SRC] = AcquireMemory(md, d_x);
  Execute(std::move(args));
  return true;
}

}  // namespace kiln::onednn
