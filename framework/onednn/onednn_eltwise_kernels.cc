#include "framework/onednn/onednn_eltwise_kernels.h"

#include "framework/onednn/handlers.h"
#include "framework/shape_util.h"

namespace kiln {
namespace {

using onednn::AllFp32;
using onednn::PrimitiveCache;
using dnnl::algorithm;

PrimitiveCache& Cache() { return PrimitiveCache::Global(); }

const std::string kOutGrad = "Out@GRAD";
const std::string kXGrad = "X@GRAD";

// ---- eltwise ---------------------------------------------------------------------------------------

// The algorithms of an activation: forward, and backward reading the slot the
// reference grad op reads (Out for the *_use_dst_for_bwd ones).
struct EltwiseAlgs {
  algorithm fwd;
  algorithm bwd;
  const char* grad_reads;
};

EltwiseAlgs ActivationAlgs(const std::string& type, const AttrMap& attrs) {
  // relu as elu with alpha 0 (x > 0 ? x : 0 * (exp(x) - 1)): oneDNN's
  // eltwise_relu turns NaN into 0, elu keeps NaN as PyTorch's relu does
  // (x <= 0 gives -0, equal to the reference's +0). The grads agree.
  if (type == "relu") return {algorithm::eltwise_elu, algorithm::eltwise_relu_use_dst_for_bwd, "Out"};
  if (type == "tanh") return {algorithm::eltwise_tanh, algorithm::eltwise_tanh_use_dst_for_bwd, "Out"};
  if (type == "sigmoid") return {algorithm::eltwise_logistic, algorithm::eltwise_logistic_use_dst_for_bwd, "Out"};
  if (type == "exp") return {algorithm::eltwise_exp, algorithm::eltwise_exp_use_dst_for_bwd, "Out"};
  KILN_CHECK(type == "gelu", "no eltwise algorithm for ", type);
  const bool approximate = std::get<bool>(LookupAttr(attrs, "approximate", type));
  const algorithm alg = approximate ? algorithm::eltwise_gelu_tanh : algorithm::eltwise_gelu_erf;
  return {alg, alg, "X"};
}

OneDnnKernelFn ActivationKernel(const std::string& type) {
  return [type](ExecContext& ctx) {
    const Tensor& x = ctx.Input("X");
    if (!AllFp32({&x})) return false;
    onednn::EltwiseHandler h(Cache(), ctx.onednn(), x.numel(), ActivationAlgs(type, ctx.attrs()).fwd);
    return h.RunForward(x, ctx.Output("Out"));
  };
}

OneDnnKernelFn ActivationGradKernel(const std::string& type) {
  return [type](ExecContext& ctx) {
    const EltwiseAlgs algs = ActivationAlgs(type, ctx.attrs());
    const Tensor& data = ctx.Input(algs.grad_reads);
    const Tensor* dout = ctx.InputOrNull(kOutGrad);
    Tensor* dx = ctx.OutputOrNull(kXGrad);
    if (dout == nullptr || dx == nullptr || !AllFp32({&data, dout}) || dout->numel() != data.numel()) return false;
    onednn::EltwiseHandler h(Cache(), ctx.onednn(), data.numel(), algs.bwd);
    return h.RunBackward(data, *dout, dx);
  };
}

// scale: eltwise_linear computes alpha * x + beta.
bool ScaleKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  if (!AllFp32({&x})) return false;
  const float scale = ctx.Attr<float>("scale");
  const float bias = ctx.Attr<float>("bias");
  // scale * (x + bias) = scale * x + scale * bias (one rounding more than the
  // reference's order: within float tolerance).
  const float beta = ctx.Attr<bool>("bias_after_scale") ? bias : scale * bias;
  onednn::EltwiseHandler h(Cache(), ctx.onednn(), x.numel(), algorithm::eltwise_linear, scale, beta);
  return h.RunForward(x, ctx.Output("Out"));
}

// dX = scale * dOut.
bool ScaleGradKernel(ExecContext& ctx) {
  const Tensor* dout = ctx.InputOrNull(kOutGrad);
  Tensor* dx = ctx.OutputOrNull(kXGrad);
  if (dout == nullptr || dx == nullptr || !AllFp32({dout})) return false;
  onednn::EltwiseHandler h(Cache(), ctx.onednn(), dout->numel(), algorithm::eltwise_linear, ctx.Attr<float>("scale"),
                           0.0f);
  return h.RunForward(*dout, dx);
}

// ---- binary and sum -------------------------------------------------------------------------------------

OneDnnKernelFn BinaryKernel(algorithm alg) {
  return [alg](ExecContext& ctx) {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    Tensor* out = ctx.Output("Out");
    if (!AllFp32({&x, &y}) || out->dims() != x.dims()) return false;
    // oneDNN runs in place only over the first source.
    if (out->IsSharedBufferWith(y) && !out->IsSharedBufferWith(x)) return false;
    const Dims ypad = BroadcastYDims(x.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
    onednn::BinaryHandler h(Cache(), ctx.onednn(), x.dims(), ypad, alg);
    return h.Run(x, y, out);
  };
}

bool SumKernel(ExecContext& ctx) {
  std::vector<const Tensor*> xs = ctx.MultiInput("X");
  Tensor* out = ctx.Output("Out");
  if (xs.empty()) return false;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] == nullptr || !AllFp32({xs[i]}) || xs[i]->numel() != xs[0]->numel()) return false;
    // oneDNN runs in place only over the first source.
    if (i > 0 && out->IsSharedBufferWith(*xs[i]) && !out->IsSharedBufferWith(*xs[0])) return false;
  }
  if (out->numel() != xs[0]->numel()) return false;
  onednn::SumHandler h(Cache(), ctx.onednn(), xs[0]->numel(), xs.size());
  return h.Run(xs, out);
}

}  // namespace

std::vector<std::pair<std::string, OneDnnKernelFn>> EltwiseOneDnnKernels() {
  std::vector<std::pair<std::string, OneDnnKernelFn>> t = {
      {"scale", ScaleKernel},
      {"scale_grad", ScaleGradKernel},
      {"elementwise_add", BinaryKernel(algorithm::binary_add)},
      {"elementwise_sub", BinaryKernel(algorithm::binary_sub)},
      {"elementwise_mul", BinaryKernel(algorithm::binary_mul)},
      {"elementwise_div", BinaryKernel(algorithm::binary_div)},
      {"sum", SumKernel},
  };
  for (const char* act : {"relu", "tanh", "sigmoid", "exp", "gelu"}) {
    t.emplace_back(act, ActivationKernel(act));
    t.emplace_back(std::string(act) + "_grad", ActivationGradKernel(act));
  }
  return t;
}

}  // namespace kiln
