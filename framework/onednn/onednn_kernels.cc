#include "framework/onednn/onednn_kernels.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>

#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_concat_log_softmax_kernels.h"
#include "framework/onednn/onednn_batch_norm_kernels.h"
#include "framework/onednn/onednn_eltwise_kernels.h"
#include "framework/op_registry.h"
#include "framework/shape_util.h"

namespace kiln {
namespace {

using onednn::AllFp32;
using onednn::PrimitiveCache;
using dnnl::algorithm;

PrimitiveCache& Cache() { return PrimitiveCache::Global(); }

const std::string kOutGrad = "Out@GRAD";
const std::string kXGrad = "X@GRAD";

// Compares dims ignoring leading 1s ([1,M,K] is [M,K]).
bool SameDimsUpToLeadingOnes(const Dims& a, const Dims& b) {
  auto strip = [](const Dims& d) {
    size_t i = 0;
    while (i + 1 < d.size() && d[i] == 1) ++i;
    return Dims(d.begin() + i, d.end());
  };
  return strip(a) == strip(b);
}

// [d0, ..., dn-2, dn-1] -> [d0*...*dn-2, dn-1]
Dims FoldRows(const Dims& d) { return {Numel(Dims(d.begin(), d.end() - 1)), d.back()}; }

// ---- matmul --------------------------------------------------------------------------------

bool MatmulKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  Tensor* out = ctx.Output("Out");
  if (!AllFp32({&x, &y}) || out->numel() == 0) return false;
  onednn::MatmulHandler h(Cache(), ctx.onednn(), x.dims(), ctx.Attr<bool>("transpose_X"), y.dims(),
                          ctx.Attr<bool>("transpose_Y"), ctx.Attr<float>("alpha"), {}, ctx.onednn().amp_compute);
  if (!h.valid() || h.dst_dims() != out->dims()) return false;
  return h.Run(x, y, out);
}

// Each gradient is one matmul of the (possibly transposed) stored tensors:
//   Out = X Y      dX = dO Y^T     dY = X^T dO
//   Out = X Y^T    dX = dO Y       dY = dO^T X
//   Out = X^T Y    dX = Y dO^T     dY = X dO
//   Out = X^T Y^T  dX = Y^T dO^T   dY = dO^T X^T
// A gradient of an input that was broadcast over batch dims needs a sum over
// those dims. The one such case handled here is a Y without batch dims and an
// untransposed X (a fully connected layer on [B..., M, K]): folding the batch
// into the rows turns the sum into the contraction of one 2-D product.
// Under --amp bf16 each product multiplies bf16 copies of its operands.
bool MatmulGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor* dout = ctx.InputOrNull(kOutGrad);
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  Tensor* dy = ctx.OutputOrNull("Y@GRAD");
  if (dout == nullptr || (dx == nullptr && dy == nullptr) || !AllFp32({&x, &y, dout})) return false;
  const bool tx = ctx.Attr<bool>("transpose_X");
  const bool ty = ctx.Attr<bool>("transpose_Y");
  const float alpha = ctx.Attr<float>("alpha");

  struct Product {
    std::unique_ptr<onednn::MatmulHandler> handler;
    const Tensor* a;
    const Tensor* b;
    Tensor* out;
  };
  std::vector<Product> products;
  // Plans out = op(a) @ op(b); false when the result is not exactly out's shape.
  auto plan = [&](const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor* o, bool fold) {
    const Dims ad = fold ? FoldRows(a.dims()) : a.dims();
    const Dims bd = fold ? FoldRows(b.dims()) : b.dims();
    auto h = std::make_unique<onednn::MatmulHandler>(Cache(), ctx.onednn(), ad, ta, bd, tb, alpha, onednn::FusedOps{},
                                                     ctx.onednn().amp_compute);
    if (!h->valid() || !SameDimsUpToLeadingOnes(h->dst_dims(), o->dims())) return false;
    products.push_back({std::move(h), &a, &b, o});
    return true;
  };
  // Plan everything first: nothing is written when a case falls back.
  if (dx != nullptr) {
    const bool ok = !tx ? plan(*dout, false, y, !ty, dx, false) : plan(y, ty, *dout, true, dx, false);
    if (!ok) return false;
  }
  if (dy != nullptr) {
    const bool ok = !ty ? plan(x, !tx, *dout, false, dy, false) : plan(*dout, true, x, tx, dy, false);
    if (!ok) {
      const Dims& yd = y.dims();
      const bool y_has_batch = std::any_of(yd.begin(), yd.end() - 2, [](int64_t d) { return d != 1; });
      const Dims x_batch(x.dims().begin(), x.dims().end() - 2);
      const Dims g_batch(dout->dims().begin(), dout->dims().end() - 2);
      if (y_has_batch || tx || !SameDimsUpToLeadingOnes(x_batch, g_batch)) return false;
      const bool folded = !ty ? plan(x, true, *dout, false, dy, true) : plan(*dout, true, x, false, dy, true);
      if (!folded) return false;
    }
  }
  for (Product& p : products) {
    if (!p.handler->Run(*p.a, *p.b, p.out)) return false;
  }
  return true;
}

// ---- conv2d ------------------------------------------------------------------------------------

std::unique_ptr<onednn::ConvHandler> MakeConvHandler(const ExecContext& ctx, const Tensor& input,
                                                     const Tensor& filter) {
  return std::make_unique<onednn::ConvHandler>(
      Cache(), ctx.onednn(), input.dims(), filter.dims(), ctx.Attr<std::vector<int64_t>>("strides"),
      ctx.Attr<std::vector<int64_t>>("paddings"), ctx.Attr<std::vector<int64_t>>("dilations"),
      ctx.Attr<int64_t>("groups"), onednn::FusedOps{}, ctx.onednn().amp_compute);
}

bool Conv2dKernel(ExecContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  Tensor* output = ctx.Output("Output");
  if (!AllFp32({&input, &filter})) return false;
  auto h = MakeConvHandler(ctx, input, filter);
  if (!h->valid() || h->output_dims() != output->dims()) return false;
  return h->RunForward(input, filter, output);
}

// Under --amp bf16 both gradients multiply bf16 copies of their operands
// (the handler's reorders) and are written in f32.
bool Conv2dGradKernel(ExecContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const Tensor* dout = ctx.InputOrNull("Output@GRAD");
  Tensor* d_input = ctx.OutputOrNull("Input@GRAD");
  Tensor* d_filter = ctx.OutputOrNull("Filter@GRAD");
  if (dout == nullptr || (d_input == nullptr && d_filter == nullptr) || !AllFp32({&input, &filter, dout})) {
    return false;
  }
  auto h = MakeConvHandler(ctx, input, filter);
  if (!h->valid() || h->output_dims() != dout->dims()) return false;
  if (d_input != nullptr && !h->RunBackwardData(filter, *dout, d_input)) return false;
  if (d_filter != nullptr && !h->RunBackwardWeights(input, *dout, d_filter)) return false;
  return true;
}

// ---- pool2d --------------------------------------------------------------------------------------

std::unique_ptr<onednn::PoolHandler> MakePoolHandler(const ExecContext& ctx, const Tensor& x) {
  const std::string& type = ctx.Attr<std::string>("pooling_type");
  if ((type != "max" && type != "avg") || x.rank() != 4) return nullptr;
  Dims kernel = ctx.Attr<std::vector<int64_t>>("ksize");
  Dims strides = ctx.Attr<std::vector<int64_t>>("strides");
  Dims paddings = ctx.Attr<std::vector<int64_t>>("paddings");
  if (ctx.Attr<bool>("global_pooling")) {
    // One window over the whole plane; ksize, strides and paddings are ignored.
    kernel = {x.dim(2), x.dim(3)};
    strides = {1, 1};
    paddings = {0, 0};
  }
  auto h = std::make_unique<onednn::PoolHandler>(Cache(), ctx.onednn(), x.dims(), type == "max",
                                                 ctx.Attr<bool>("exclusive"), kernel, strides, paddings);
  return h->valid() ? std::move(h) : nullptr;
}

bool Pool2dKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  if (!AllFp32({&x})) return false;
  auto h = MakePoolHandler(ctx, x);
  if (h == nullptr || h->out_dims() != out->dims()) return false;
  return h->RunForward(x, out);
}

bool Pool2dGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor* dout = ctx.InputOrNull(kOutGrad);
  Tensor* dx = ctx.OutputOrNull(kXGrad);
  if (dout == nullptr || dx == nullptr || !AllFp32({&x, dout})) return false;
  auto h = MakePoolHandler(ctx, x);
  if (h == nullptr || h->out_dims() != dout->dims()) return false;
  return h->RunBackward(x, *dout, dx);
}

// ---- softmax ---------------------------------------------------------------------------------------

bool SoftmaxKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  if (!AllFp32({&x})) return false;
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), x.rank(), ctx.OpName());
  onednn::SoftmaxHandler h(Cache(), ctx.onednn(), x.dims(), axis);
  return h.RunForward(x, ctx.Output("Out"));
}

bool SoftmaxGradKernel(ExecContext& ctx) {
  const Tensor& out = ctx.Input("Out");
  const Tensor* dout = ctx.InputOrNull(kOutGrad);
  Tensor* dx = ctx.OutputOrNull(kXGrad);
  if (dout == nullptr || dx == nullptr || !AllFp32({&out, dout}) || dout->dims() != out.dims()) return false;
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), out.rank(), ctx.OpName());
  onednn::SoftmaxHandler h(Cache(), ctx.onednn(), out.dims(), axis);
  return h.RunBackward(out, *dout, dx);
}

// ---- reductions ------------------------------------------------------------------------------------

// reduce_sum / reduce_mean / mean through oneDNN's reduction primitive; the
// reduced dims stay as 1s in the primitive's dst (Out may drop them).
OneDnnKernelFn ReductionKernel(bool mean, bool all) {
  return [mean, all](ExecContext& ctx) {
    const Tensor& x = ctx.Input("X");
    if (!AllFp32({&x})) return false;
    Dims dst = x.dims();
    const bool reduce_all = all || ctx.Attr<bool>("reduce_all");
    if (reduce_all) {
      std::fill(dst.begin(), dst.end(), 1);
    } else {
      const auto& dims = ctx.Attr<std::vector<int64_t>>("dim");
      if (dims.empty()) std::fill(dst.begin(), dst.end(), 1);
      for (int64_t d : dims) dst[NormalizeAxis(d, x.rank(), ctx.OpName())] = 1;
    }
    if (dst == x.dims()) return false;  // nothing reduced: oneDNN has no such reduction
    onednn::ReductionHandler h(Cache(), ctx.onednn(), x.dims(), dst, mean);
    return h.RunForward(x, ctx.Output("Out"));
  };
}

// ---- layer_norm ------------------------------------------------------------------------------------

// Rows and row length of X for begin_norm_axis; {0, 0} when out of range.
std::pair<int64_t, int64_t> NormSplit(const ExecContext& ctx, const Tensor& x) {
  const int64_t b = ctx.Attr<int64_t>("begin_norm_axis");
  if (b < 1 || b >= static_cast<int64_t>(x.rank())) return {0, 0};
  return {Numel(Dims(x.dims().begin(), x.dims().begin() + b)), Numel(Dims(x.dims().begin() + b, x.dims().end()))};
}

bool LayerNormKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor* scale = ctx.InputOrNull("Scale");
  const Tensor* bias = ctx.InputOrNull("Bias");
  if (!AllFp32({&x}) || (scale && !AllFp32({scale})) || (bias && !AllFp32({bias}))) return false;
  const auto [rows, cols] = NormSplit(ctx, x);
  if (rows == 0) return false;
  onednn::LayerNormHandler h(Cache(), ctx.onednn(), rows, cols, ctx.Attr<float>("epsilon"), scale != nullptr,
                             bias != nullptr);
  return h.RunForward(x, scale, bias, ctx.Output("Y"), ctx.OutputOrNull("Mean"), ctx.OutputOrNull("Variance"));
}

bool LayerNormGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor* scale = ctx.InputOrNull("Scale");
  const Tensor* dy = ctx.InputOrNull("Y@GRAD");
  Tensor* dx = ctx.OutputOrNull(kXGrad);
  Tensor* dscale = ctx.OutputOrNull("Scale@GRAD");
  Tensor* dbias = ctx.OutputOrNull("Bias@GRAD");
  if (dy == nullptr || (dx == nullptr && dscale == nullptr && dbias == nullptr)) return false;
  if (!AllFp32({&x, dy}) || (scale && !AllFp32({scale})) || (dscale != nullptr && scale == nullptr)) return false;
  const auto [rows, cols] = NormSplit(ctx, x);
  if (rows == 0) return false;
  const float eps = ctx.Attr<float>("epsilon");
  const Tensor* mean = ctx.InputOrNull("Mean");
  const Tensor* var = ctx.InputOrNull("Variance");
  Tensor own_mean, own_var;
  if (mean == nullptr || var == nullptr) {
    // The forward did not keep its statistics: recompute them (Y is not needed).
    own_mean = Tensor(DataType::kFP32, {rows});
    own_var = Tensor(DataType::kFP32, {rows});
    Tensor scratch_y(DataType::kFP32, x.dims());
    onednn::LayerNormHandler stats(Cache(), ctx.onednn(), rows, cols, eps, false, false);
    if (!stats.RunForward(x, nullptr, nullptr, &scratch_y, &own_mean, &own_var)) return false;
    mean = &own_mean;
    var = &own_var;
  }
  if (!AllFp32({mean, var}) || mean->numel() != rows || var->numel() != rows) return false;
  onednn::LayerNormHandler h(Cache(), ctx.onednn(), rows, cols, eps, scale != nullptr, dbias != nullptr);
  return h.RunBackward(x, scale, *mean, *var, *dy, dx, dscale, dbias);
}

// ---- table ------------------------------------------------------------------------------------------------

std::vector<std::pair<std::string, OneDnnKernelFn>> KernelTable() {
  std::vector<std::pair<std::string, OneDnnKernelFn>> t = {
      {"matmul", MatmulKernel},
      {"matmul_grad", MatmulGradKernel},
      {"conv2d", Conv2dKernel},
      {"conv2d_grad", Conv2dGradKernel},
      {"pool2d", Pool2dKernel},
      {"pool2d_grad", Pool2dGradKernel},
      {"softmax", SoftmaxKernel},
      {"softmax_grad", SoftmaxGradKernel},
      {"layer_norm", LayerNormKernel},
      {"layer_norm_grad", LayerNormGradKernel},
      {"reduce_sum", ReductionKernel(/*mean=*/false, /*all=*/false)},
      {"reduce_mean", ReductionKernel(/*mean=*/true, /*all=*/false)},
      {"mean", ReductionKernel(/*mean=*/true, /*all=*/true)},
  };
  for (auto& kernel : EltwiseOneDnnKernels()) t.push_back(std::move(kernel));
  for (auto& kernel : ConcatLogSoftmaxOneDnnKernels()) t.push_back(std::move(kernel));
  for (auto& kernel : BatchNormOneDnnKernels()) t.push_back(std::move(kernel));
  std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return t;
}

// One counter per op type; the map is built once and never changes shape, so
// kernels touch only their atomic.
std::map<std::string, std::atomic<int64_t>, std::less<>>& RunCounters() {
  static auto* counters = [] {
    auto* m = new std::map<std::string, std::atomic<int64_t>, std::less<>>();
    for (const auto& [type, fn] : KernelTable()) (*m)[type].store(0);
    return m;
  }();
  return *counters;
}

}  // namespace

void AttachOneDnnKernels(OpRegistry& r) {
  auto& counters = RunCounters();
  for (auto& [type, fn] : KernelTable()) {
    OpInfo* info = r.FindMutable(type);
    if (info == nullptr) continue;
    std::atomic<int64_t>* runs = &counters.find(type)->second;
    info->onednn_kernel = [fn = std::move(fn), runs](ExecContext& ctx) {
      if (!fn(ctx)) return false;
      // A dry run (kiln dump's reorder list) computed nothing.
      if (ctx.onednn().dry_run == nullptr) runs->fetch_add(1, std::memory_order_relaxed);
      return true;
    };
  }
}

std::vector<std::string> OneDnnKernelOps() {
  std::vector<std::string> types;
  for (const auto& [type, counter] : RunCounters()) types.push_back(type);
  return types;
}

const std::vector<std::string>& OneDnnInplaceOps() {
  static const std::vector<std::string> types = {"elementwise_add", "exp",  "gelu", "relu", "scale",
                                                 "sigmoid",         "softmax", "sum", "tanh"};
  return types;
}

int64_t OneDnnKernelRuns(std::string_view op_type) {
  const auto& counters = RunCounters();
  auto it = counters.find(op_type);
  return it == counters.end() ? 0 : it->second.load(std::memory_order_relaxed);
}

}  // namespace kiln
