// The handlers of the op families without fused variants (pooling, softmax,
// reduction, layer_norm, eltwise, binary, sum); matmul is in
// handlers_matmul_conv.cc, conv in handlers_conv.cc.
#include "framework/onednn/handlers.h"

#include <algorithm>
#include <cstring>

#include "framework/onednn/handler_util.h"
#include "framework/shape_util.h"

namespace kiln::onednn {

using detail::AllPositive;
using detail::D;
using detail::MakeEntry;
using detail::RankOk;
using dnnl::algorithm;
using dnnl::prop_kind;

// ---- PoolHandler ----------------------------------------------------------------------------

PoolHandler::PoolHandler(PrimitiveCache& cache, const Settings& settings, const Dims& x, bool is_max, bool exclusive,
                         const Dims& kernel, const Dims& strides, const Dims& paddings)
    : OneDnnHandler(cache, settings), is_max_(is_max) {
  if (x.size() != 4 || kernel.size() != 2 || strides.size() != 2 || paddings.size() != 2 || !AllPositive(x)) {
    return;
  }
  Dims out = {x[0], x[1], 0, 0};
  Dims pad_r(2);
  for (int i = 0; i < 2; ++i) {
    // Padding at least the window would make windows that see no input.
    if (kernel[i] < 1 || strides[i] < 1 || paddings[i] < 0 || paddings[i] >= kernel[i]) return;
    const int64_t room = x[2 + i] + 2 * paddings[i] - kernel[i];
    if (room < 0) return;
    out[2 + i] = room / strides[i] + 1;
    pad_r[i] = detail::PaddingRight(x[2 + i], out[2 + i], kernel[i], strides[i], paddings[i]);
  }
  out_dims_ = out;
  const algorithm alg = is_max ? algorithm::pooling_max
                               : (exclusive ? algorithm::pooling_avg_exclude_padding
                                            : algorithm::pooling_avg_include_padding);
  fwd_key_.kind = PrimitiveKind::kPoolForward;
  fwd_key_.dims = {x};
  fwd_key_.algorithm = static_cast<int>(alg);
  fwd_key_.kernel = kernel;
  fwd_key_.strides = strides;
  fwd_key_.padding_l = paddings;
  fwd_key_.padding_r = pad_r;
  bwd_key_ = fwd_key_;
  bwd_key_.kind = PrimitiveKind::kPoolBackward;
  valid_ = true;
}

dnnl::pooling_forward::primitive_desc PoolHandler::ForwardPd(prop_kind prop) const {
  const PrimitiveKey& k = fwd_key_;
  dnnl::pooling_forward::desc desc(prop, static_cast<algorithm>(k.algorithm), PlainDesc(k.dims[0]),
                                   PlainDesc(out_dims_), D(k.strides), D(k.kernel), D(k.padding_l),
                                   D(k.padding_r));
  return dnnl::pooling_forward::primitive_desc(desc, DefaultAttr(), Engine());
}

PrimitiveEntry PoolHandler::CreateForward() const {
  auto pd = ForwardPd(prop_kind::forward_inference);
  return MakeEntry(pd, dnnl::pooling_forward(pd));
}

PrimitiveEntry PoolHandler::CreateBackward() const {
  const PrimitiveKey& k = bwd_key_;
  auto fwd = ForwardPd(prop_kind::forward_training);
  dnnl::pooling_backward::desc desc(static_cast<algorithm>(k.algorithm), PlainDesc(k.dims[0]), PlainDesc(out_dims_),
                                    D(k.strides), D(k.kernel), D(k.padding_l), D(k.padding_r));
  dnnl::pooling_backward::primitive_desc pd(desc, DefaultAttr(), Engine(), fwd);
  PrimitiveEntry e = MakeEntry(pd, dnnl::pooling_backward(pd));
  if (is_max_) {
    e.aux_pds.push_back(fwd);
    e.aux.push_back(dnnl::pooling_forward(fwd));
  }
  return e;
}

bool PoolHandler::RunForward(const Tensor& x, Tensor* out) {
  if (!valid_ || !AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(x);
  args[DNNL_ARG_DST] = AcquireDstMemory(out);
  Execute(std::move(args));
  return true;
}

bool PoolHandler::RunBackward(const Tensor& x, const Tensor& d_out, Tensor* d_x) {
  if (!valid_ || !AcquireBackwardPrimitive()) return false;
  ExecArgs args;
  if (is_max_) {
    // The forward pass only to record which input each window's max came
    // from; its dst is thrown away.
    const dnnl::primitive_desc_base& fwd = entry().aux_pds[0];
    dnnl::memory workspace = AcquireMemory(fwd.workspace_desc());
    ExecuteAux(0, {{DNNL_ARG_SRC, AcquireMemory(fwd.src_desc(), x)},
                   {DNNL_ARG_DST, AcquireMemory(fwd.dst_desc())},
                   {DNNL_ARG_WORKSPACE, workspace}});
    args[DNNL_ARG_WORKSPACE] = workspace;
  }
  args[DNNL_ARG_DIFF_DST] = AcquireDiffDstMemory(d_out);
  args[DNNL_ARG_DIFF_SRC] = AcquireDiffSrcMemory(d_x);
  Execute(std::move(args));
  return true;
}

// ---- SoftmaxHandler --------------------------------------------------------------------------

SoftmaxHandler::SoftmaxHandler(PrimitiveCache& cache, const Settings& settings, const Dims& dims, int64_t axis)
    : OneDnnHandler(cache, settings) {
  fwd_key_.kind = PrimitiveKind::kSoftmaxForward;
  fwd_key_.dims = {dims};
  fwd_key_.axis = axis;
  bwd_key_ = fwd_key_;
  bwd_key_.kind = PrimitiveKind::kSoftmaxBackward;
}

dnnl::softmax_forward::primitive_desc SoftmaxHandler::ForwardPd() const {
  dnnl::softmax_forward::desc desc(prop_kind::forward_training, PlainDesc(fwd_key_.dims[0]),
                                   static_cast<int>(fwd_key_.axis));
  return dnnl::softmax_forward::primitive_desc(desc, DefaultAttr(), Engine());
}

PrimitiveEntry SoftmaxHandler::CreateForward() const {
  auto pd = ForwardPd();
  return MakeEntry(pd, dnnl::softmax_forward(pd));
}

PrimitiveEntry SoftmaxHandler::CreateBackward() const {
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  dnnl::softmax_backward::desc desc(md, md, static_cast<int>(bwd_key_.axis));
  dnnl::softmax_backward::primitive_desc pd(desc, DefaultAttr(), Engine(), ForwardPd());
  return MakeEntry(pd, dnnl::softmax_backward(pd));
}

bool SoftmaxHandler::RunForward(const Tensor& x, Tensor* out) {
  if (!RankOk(x.dims()) || !AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(x);
  args[DNNL_ARG_DST] = AcquireDstMemory(out);
  Execute(std::move(args));
  return true;
}

bool SoftmaxHandler::RunBackward(const Tensor& out, const Tensor& d_out, Tensor* d_x) {
  if (!RankOk(out.dims()) || !AcquireBackwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  ExecArgs args;
  args[DNNL_ARG_DST] = AcquireMemory(md, out);
  args[DNNL_ARG_DIFF_DST] = AcquireMemory(md, d_out);
  args[DNNL_ARG_DIFF_SRC] = AcquireMemory(md, d_x);
  Execute(std::move(args));
  return true;
}

// ---- ReductionHandler ------------------------------------------------------------------------

ReductionHandler::ReductionHandler(PrimitiveCache& cache, const Settings& settings, const Dims& x_dims,
                                   const Dims& dst_dims, bool mean)
    : OneDnnHandler(cache, settings) {
  fwd_key_.kind = PrimitiveKind::kReduction;
  fwd_key_.dims = {x_dims, dst_dims};
  fwd_key_.algorithm = static_cast<int>(mean ? algorithm::reduction_mean : algorithm::reduction_sum);
}

PrimitiveEntry ReductionHandler::CreateForward() const {
  dnnl::reduction::desc desc(static_cast<algorithm>(fwd_key_.algorithm), PlainDesc(fwd_key_.dims[0]),
                             PlainDesc(fwd_key_.dims[1]), 0.f, 0.f);
  dnnl::reduction::primitive_desc pd(desc, DefaultAttr(), Engine());
  return MakeEntry(pd, dnnl::reduction(pd));
}

bool ReductionHandler::RunForward(const Tensor& x, Tensor* out) {
  if (!RankOk(x.dims()) || !AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(x);
  args[DNNL_ARG_DST] = AcquireMemory(PlainDesc(fwd_key_.dims[1]), out);
  Execute(std::move(args));
  return true;
}

// ---- LayerNormHandler ------------------------------------------------------------------------

LayerNormHandler::LayerNormHandler(PrimitiveCache& cache, const Settings& settings, int64_t rows, int64_t cols,
                                   float epsilon, bool use_scale, bool use_bias)
    : OneDnnHandler(cache, settings), rows_(rows), cols_(cols), use_scale_(use_scale), use_bias_(use_bias) {
  dnnl::normalization_flags flags = dnnl::normalization_flags::none;
  if (use_scale) flags = flags | dnnl::normalization_flags::use_scale;
  if (use_bias) flags = flags | dnnl::normalization_flags::use_shift;
  fwd_key_.kind = PrimitiveKind::kLayerNormForward;
  fwd_key_.dims = {{rows, cols}};
  fwd_key_.epsilon = epsilon;
  fwd_key_.flags = static_cast<uint32_t>(flags);
  bwd_key_ = fwd_key_;
  bwd_key_.kind = PrimitiveKind::kLayerNormBackward;
}

dnnl::memory::desc LayerNormHandler::StatDesc() const { return PlainDesc({rows_}); }

dnnl::layer_normalization_forward::primitive_desc LayerNormHandler::ForwardPd() const {
  dnnl::layer_normalization_forward::desc desc(prop_kind::forward_training, PlainDesc({rows_, cols_}), StatDesc(),
                                               fwd_key_.epsilon,
                                               static_cast<dnnl::normalization_flags>(fwd_key_.flags));
  return dnnl::layer_normalization_forward::primitive_desc(desc, DefaultAttr(), Engine());
}

PrimitiveEntry LayerNormHandler::CreateForward() const {
  auto pd = ForwardPd();
  return MakeEntry(pd, dnnl::layer_normalization_forward(pd));
}

PrimitiveEntry LayerNormHandler::CreateBackward() const {
  const dnnl::memory::desc md = PlainDesc({rows_, cols_});
  // prop_kind::backward also computes diff scale/shift; without them only
  // diff_src is computed.
  const prop_kind prop = (use_scale_ || use_bias_) ? prop_kind::backward : prop_kind::backward_data;
  dnnl::layer_normalization_backward::desc desc(prop, md, md, StatDesc(), bwd_key_.epsilon,
                                                static_cast<dnnl::normalization_flags>(bwd_key_.flags));
  dnnl::layer_normalization_backward::primitive_desc pd(desc, DefaultAttr(), Engine(), ForwardPd());
  return MakeEntry(pd, dnnl::layer_normalization_backward(pd));
}

bool LayerNormHandler::RunForward(const Tensor& x, const Tensor* scale, const Tensor* bias, Tensor* y,
                                  Tensor* mean, Tensor* variance) {
  if (rows_ < 1 || cols_ < 1 || !AcquireForwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc({rows_, cols_});
  const dnnl::memory::desc stat = StatDesc();
  const dnnl::memory::desc param = PlainDesc({cols_});
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireMemory(md, x);
  args[DNNL_ARG_DST] = AcquireMemory(md, y);
  args[DNNL_ARG_MEAN] = mean ? AcquireMemory(stat, mean) : AcquireMemory(stat);
  args[DNNL_ARG_VARIANCE] = variance ? AcquireMemory(stat, variance) : AcquireMemory(stat);
  if (use_scale_) args[DNNL_ARG_SCALE] = AcquireMemory(param, *scale);
  if (use_bias_) args[DNNL_ARG_SHIFT] = AcquireMemory(param, *bias);
  Execute(std::move(args));
  return true;
}

bool LayerNormHandler::RunBackward(const Tensor& x, const Tensor* scale, const Tensor& mean,
                                   const Tensor& variance, const Tensor& d_y, Tensor* d_x, Tensor* d_scale,
                                   Tensor* d_bias) {
  if (rows_ < 1 || cols_ < 1 || !AcquireBackwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc({rows_, cols_});
  const dnnl::memory::desc stat = StatDesc();
  const dnnl::memory::desc param = PlainDesc({cols_});
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireMemory(md, x);
  args[DNNL_ARG_MEAN] = AcquireMemory(stat, mean);
  args[DNNL_ARG_VARIANCE] = AcquireMemory(stat, variance);
  args[DNNL_ARG_DIFF_DST] = AcquireMemory(md, d_y);
  // oneDNN writes every output of the primitive; unwanted ones go to scratch.
  args[DNNL_ARG_DIFF_SRC] = d_x ? AcquireMemory(md, d_x) : AcquireMemory(md);
  if (use_scale_) {
    args[DNNL_ARG_SCALE] = AcquireMemory(param, *scale);
    args[DNNL_ARG_DIFF_SCALE] = d_scale ? AcquireMemory(param, d_scale) : AcquireMemory(param);
  }
  if (use_bias_) {
    args[DNNL_ARG_DIFF_SHIFT] = d_bias ? AcquireMemory(param, d_bias) : AcquireMemory(param);
    // oneDNN 2.6 refuses to run the backward with use_shift unless a shift
    // memory is bound, though the gradients do not depend on it. Zeros keep
    // it deterministic should that ever change.
    dnnl::memory shift = AcquireMemory(param);
    std::memset(shift.get_data_handle(), 0, param.get_size());
    args[DNNL_ARG_SHIFT] = shift;
  }
  Execute(std::move(args));
  return true;
}

// ---- EltwiseHandler ----------------------------------------------------------------------------

namespace {

bool UsesDst(algorithm alg) {
  switch (alg) {
    case algorithm::eltwise_relu_use_dst_for_bwd:
    case algorithm::eltwise_tanh_use_dst_for_bwd:
    case algorithm::eltwise_elu_use_dst_for_bwd:
    case algorithm::eltwise_sqrt_use_dst_for_bwd:
    case algorithm::eltwise_logistic_use_dst_for_bwd:
    case algorithm::eltwise_exp_use_dst_for_bwd:
    case algorithm::eltwise_clip_v2_use_dst_for_bwd:
      return true;
    default:
      return false;
  }
}

}  // namespace

EltwiseHandler::EltwiseHandler(PrimitiveCache& cache, const Settings& settings, int64_t numel, algorithm alg,
                               float alpha, float beta)
    : OneDnnHandler(cache, settings) {
  fwd_key_.kind = PrimitiveKind::kEltwiseForward;
  fwd_key_.dims = {{numel}};
  fwd_key_.algorithm = static_cast<int>(alg);
  fwd_key_.alpha = alpha;
  fwd_key_.beta = beta;
  bwd_key_ = fwd_key_;
  bwd_key_.kind = PrimitiveKind::kEltwiseBackward;
}

dnnl::eltwise_forward::primitive_desc EltwiseHandler::ForwardPd() const {
  dnnl::eltwise_forward::desc desc(prop_kind::forward_training, static_cast<algorithm>(fwd_key_.algorithm),
                                   PlainDesc(fwd_key_.dims[0]), fwd_key_.alpha, fwd_key_.beta);
  return dnnl::eltwise_forward::primitive_desc(desc, DefaultAttr(), Engine());
}

PrimitiveEntry EltwiseHandler::CreateForward() const {
  auto pd = ForwardPd();
  return MakeEntry(pd, dnnl::eltwise_forward(pd));
}

PrimitiveEntry EltwiseHandler::CreateBackward() const {
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  dnnl::eltwise_backward::desc desc(static_cast<algorithm>(bwd_key_.algorithm), md, md, bwd_key_.alpha,
                                    bwd_key_.beta);
  dnnl::eltwise_backward::primitive_desc pd(desc, DefaultAttr(), Engine(), ForwardPd());
  return MakeEntry(pd, dnnl::eltwise_backward(pd));
}

bool EltwiseHandler::RunForward(const Tensor& x, Tensor* out) {
  if (fwd_key_.dims[0][0] < 1 || !AcquireForwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(fwd_key_.dims[0]);
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireMemory(md, x);
  args[DNNL_ARG_DST] = AcquireMemory(md, out);
  Execute(std::move(args));
  return true;
}

bool EltwiseHandler::RunBackward(const Tensor& data, const Tensor& d_out, Tensor* d_x) {
  if (bwd_key_.dims[0][0] < 1 || !AcquireBackwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(bwd_key_.dims[0]);
  ExecArgs args;
  args[UsesDst(static_cast<algorithm>(bwd_key_.algorithm)) ? DNNL_ARG_DST : DNNL_ARG_SRC] = AcquireMemory(md, data);
  args[DNNL_ARG_DIFF_DST] = AcquireMemory(md, d_out);
  args[DNNL_ARG_DIFF_SRC] = AcquireMemory(md, d_x);
  Execute(std::move(args));
  return true;
}

// ---- BinaryHandler -------------------------------------------------------------------------------

namespace {

// Merges neighbouring dims along which y behaves alike (both follow x, or
// both are broadcast) and drops dims where x is 1: [2,3,7,5] + [1,3,7,1]
// becomes [2,21,5] + [1,21,1], a per-channel pattern oneDNN's jit binary
// handles, where the 4-D form takes its reference implementation. Leaves
// the dims alone when y does not broadcast into x.
std::pair<Dims, Dims> CoalesceBroadcast(const Dims& x, const Dims& y) {
  if (x.size() != y.size()) return {x, y};
  Dims cx, cy;
  int last = -1;  // 0: y broadcast along the previous kept dim, 1: y follows x
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] != x[i] && y[i] != 1) return {x, y};
    if (x[i] == 1) continue;
    const int kind = y[i] == x[i] ? 1 : 0;
    if (kind == last) {
      cx.back() *= x[i];
      cy.back() *= y[i];
    } else {
      cx.push_back(x[i]);
      cy.push_back(y[i]);
      last = kind;
    }
  }
  if (cx.empty()) return {Dims{1}, Dims{1}};
  return {cx, cy};
}

}  // namespace

BinaryHandler::BinaryHandler(PrimitiveCache& cache, const Settings& settings, const Dims& x_dims, const Dims& y_dims,
                             algorithm alg)
    : OneDnnHandler(cache, settings) {
  auto [x, y] = CoalesceBroadcast(x_dims, y_dims);
  fwd_key_.kind = PrimitiveKind::kBinary;
  fwd_key_.dims = {std::move(x), std::move(y)};
  fwd_key_.algorithm = static_cast<int>(alg);
}

PrimitiveEntry BinaryHandler::CreateForward() const {
  const dnnl::memory::desc x = PlainDesc(fwd_key_.dims[0]);
  dnnl::binary::desc desc(static_cast<algorithm>(fwd_key_.algorithm), x, PlainDesc(fwd_key_.dims[1]), x);
  dnnl::binary::primitive_desc pd(desc, DefaultAttr(), Engine());
  return MakeEntry(pd, dnnl::binary(pd));
}

bool BinaryHandler::Run(const Tensor& x, const Tensor& y, Tensor* out) {
  const Dims& xd = fwd_key_.dims[0];
  const Dims& yd = fwd_key_.dims[1];
  if (!RankOk(xd) || xd.size() != yd.size() || !AllPositive(xd) || !AllPositive(yd)) return false;
  for (size_t i = 0; i < xd.size(); ++i) {
    if (yd[i] != xd[i] && yd[i] != 1) return false;
  }
  if (!AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC_0] = AcquireSrcMemory(x);
  args[DNNL_ARG_SRC_1] = AcquireSrc1Memory(y);
  args[DNNL_ARG_DST] = AcquireDstMemory(out);
  Execute(std::move(args));
  return true;
}

// ---- SumHandler ------------------------------------------------------------------------------------

SumHandler::SumHandler(PrimitiveCache& cache, const Settings& settings, int64_t numel, size_t count)
    : OneDnnHandler(cache, settings) {
  fwd_key_.kind = PrimitiveKind::kSum;
  fwd_key_.dims.assign(count, Dims{numel});
}

PrimitiveEntry SumHandler::CreateForward() const {
  const dnnl::memory::desc md = PlainDesc(fwd_key_.dims[0]);
  const size_t count = fwd_key_.dims.size();
  const std::vector<float> scales(count, 1.0f);
  const std::vector<dnnl::memory::desc> srcs(count, md);
  dnnl::sum::primitive_desc pd(md, scales, srcs, Engine(), DefaultAttr());
  return MakeEntry(pd, dnnl::sum(pd));
}

bool SumHandler::Run(const std::vector<const Tensor*>& xs, Tensor* out) {
  if (xs.empty() || xs.size() != fwd_key_.dims.size() || fwd_key_.dims[0][0] < 1) return false;
  if (!AcquireForwardPrimitive()) return false;
  const dnnl::memory::desc md = PlainDesc(fwd_key_.dims[0]);
  ExecArgs args;
  for (size_t i = 0; i < xs.size(); ++i) args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = AcquireMemory(md, *xs[i]);
  args[DNNL_ARG_DST] = AcquireMemory(md, out);
  Execute(std::move(args));
  return true;
}

}  // namespace kiln::onednn
