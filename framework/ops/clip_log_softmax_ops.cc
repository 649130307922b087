// clip, log_softmax and fused_softmax_mask_upper_triangle (causal softmax)
// with their grads. clip is elementwise and gives the JIT its EwProgram
// meaning; the softmax variants are rowwise, computed stably from the row max.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"
#include "framework/shape_util.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;

const std::string kOutGrad = GradVarName("Out");
const std::string kXGrad = GradVarName("X");

// Out (or X@GRAD) has the dims and dtype of input `src`; a present Out@GRAD
// must have them too.
void InferLike(InferShapeContext& ctx, const std::string& src, const std::string& out) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, src);
  const Dims dims = ctx.InputDims(src);
  if (ctx.HasInput(kOutGrad)) {
    ops_b::CheckSameDtype(ctx, kOutGrad, dtype, src);
    if (!DimsCompatible(ctx.InputDims(kOutGrad), dims)) {
      ctx.Fail("input ", kOutGrad, ": expected dims ", DimsToString(dims), " (as ", src, "), got ",
               DimsToString(ctx.InputDims(kOutGrad)));
    }
  }
  if (ctx.HasOutput(out)) ctx.SetOutput(out, dims, dtype);
}

// ---- clip ------------------------------------------------------------------------------

struct ClipBounds {
  float lo, hi;
};

template <typename Ctx>
ClipBounds Bounds(const Ctx& ctx) {
  const float lo = ctx.template Attr<float>("min");
  const float hi = ctx.template Attr<float>("max");
  // Also refuses NaN bounds.
  if (!(lo <= hi)) ctx.Fail("attributes 'min' (", lo, ") and 'max' (", hi, "): expected min <= max");
  return {lo, hi};
}

void ClipInferShape(InferShapeContext& ctx) {
  Bounds(ctx);
  InferLike(ctx, "X", "Out");
}

void ClipGradInferShape(InferShapeContext& ctx) {
  Bounds(ctx);
  InferLike(ctx, "X", kXGrad);
}

// Comparisons with NaN are false, so NaN stays NaN.
template <typename T>
void ClipKernel(ExecContext& ctx) {
  const ClipBounds b = Bounds(ctx);
  const T lo = b.lo, hi = b.hi;
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>();
  for (int64_t i = 0; i < xt.numel(); ++i) out[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

// The gradient passes where min < x < max (strictly; zero at the bounds, as
// Paddle's clip_grad) and is zero for NaN x.
template <typename T>
void ClipGradKernel(ExecContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull(kXGrad);
  if (dxt == nullptr) return;
  const Tensor* dyt = ctx.InputOrNull(kOutGrad);
  if (dyt == nullptr) {
    ops_b::ZeroFill<T>(dxt);
    return;
  }
  const ClipBounds b = Bounds(ctx);
  const T lo = b.lo, hi = b.hi;
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* dy = dyt->data<T>();
  T* dx = dxt->mutable_data<T>();
  for (int64_t i = 0; i < xt.numel(); ++i) dx[i] = x[i] > lo && x[i] < hi ? dy[i] : T(0);
}

// The JIT's form. max/min propagate NaN (ew_program.h) as the reference does.
std::vector<EwFragment> ClipEw(const EwOpView& v) {
  const std::string x = v.In("X"), out = v.Out("Out");
  if (x.empty() || out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x)};
  f.writes = {v.Full(out)};
  const float lo = v.Attr<float>("min"), hi = v.Attr<float>("max");
  f.emit = [lo, hi](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{p.Min(p.Max(in[0], p.Const(lo)), p.Const(hi))};
  };
  return {f};
}

// select_gt0(x - min, select_gt0(max - x, dout)): with IEEE subtraction (no
// flush to zero) x - min > 0 exactly when x > min, and NaN x (or inf - inf
// at an infinite bound) compares false, as in the reference.
std::vector<EwFragment> ClipGradEw(const EwOpView& v) {
  const std::string x = v.In("X"), dout = v.In(kOutGrad), dx = v.Out(kXGrad);
  if (x.empty() || dout.empty() || dx.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(dout);
  f.reads = {v.Full(dout), v.Full(x)};
  f.writes = {v.Full(dx)};
  const float lo = v.Attr<float>("min"), hi = v.Attr<float>("max");
  f.emit = [lo, hi](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue below_max = p.SelectGtZero(p.Sub(p.Const(hi), in[1]), in[0]);
    return std::vector<EwValue>{p.SelectGtZero(p.Sub(in[1], p.Const(lo)), below_max)};
  };
  return {f};
}

// ---- log_softmax ----------------------------------------------------------------------

// A tensor seen as [outer, d, inner] around the axis: row (o, i) has its
// elements at base + a * inner, base = o * d * inner + i.
struct Rows {
  int64_t outer = 1, d = 1, inner = 1;
};

Rows RowsAround(const Dims& dims, int64_t axis) {
  Rows r;
  for (int64_t k = 0; k < axis; ++k) r.outer *= dims[k];
  r.d = dims[axis];
  for (size_t k = axis + 1; k < dims.size(); ++k) r.inner *= dims[k];
  return r;
}

template <typename Ctx>
int64_t Axis(const Ctx& ctx, const Dims& dims, const char* slot) {
  if (dims.empty()) ctx.Fail("input ", slot, ": expected rank >= 1, got ", DimsToString(dims));
  return NormalizeAxis(ctx.template Attr<int64_t>("axis"), dims.size(), ctx.OpName());
}

void LogSoftmaxInferShape(InferShapeContext& ctx) {
  Axis(ctx, ctx.InputDims("X"), "X");
  InferLike(ctx, "X", "Out");
}

void LogSoftmaxGradInferShape(InferShapeContext& ctx) {
  Axis(ctx, ctx.InputDims("Out"), "Out");
  InferLike(ctx, "Out", kXGrad);
}

// out = x - max - log(sum(exp(x - max))) per row: no exp overflows and no
// log of a rounded-to-zero probability. Out may be X's buffer: each element
// is read before it is written.
template <typename T>
void LogSoftmaxKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Rows r = RowsAround(xt.dims(), Axis(ctx, xt.dims(), "X"));
  const T* x = xt.data<T>();
  T* y = ctx.Output("Out")->mutable_data<T>();
  for (int64_t o = 0; o < r.outer; ++o) {
    for (int64_t i = 0; i < r.inner; ++i) {
      const int64_t base = o * r.d * r.inner + i;
      T m = x[base];
      for (int64_t a = 1; a < r.d; ++a) m = std::max(m, x[base + a * r.inner]);
      double sum = 0;
      for (int64_t a = 0; a < r.d; ++a) sum += std::exp(x[base + a * r.inner] - m);
      const double shift = static_cast<double>(m) + std::log(sum);
      for (int64_t a = 0; a < r.d; ++a) y[base + a * r.inner] = static_cast<T>(x[base + a * r.inner] - shift);
    }
  }
}

// dx = dy - exp(out) * sum(dy) per row. dx may be dy's buffer.
template <typename T>
void LogSoftmaxGradKernel(ExecContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull(kXGrad);
  if (dxt == nullptr) return;
  const Tensor* dyt = ctx.InputOrNull(kOutGrad);
  if (dyt == nullptr) {
    ops_b::ZeroFill<T>(dxt);
    return;
  }
  const Tensor& yt = ctx.Input("Out");
  const Rows r = RowsAround(yt.dims(), Axis(ctx, yt.dims(), "Out"));
  const T* y = yt.data<T>();
  const T* dy = dyt->data<T>();
  T* dx = dxt->mutable_data<T>();
  for (int64_t o = 0; o < r.outer; ++o) {
    for (int64_t i = 0; i < r.inner; ++i) {
      const int64_t base = o * r.d * r.inner + i;
      double sum = 0;
      for (int64_t a = 0; a < r.d; ++a) sum += dy[base + a * r.inner];
      const T s = static_cast<T>(sum);
      for (int64_t a = 0; a < r.d; ++a) {
        const int64_t k = base + a * r.inner;
        dx[k] = dy[k] - std::exp(y[k]) * s;
      }
    }
  }
}

// ---- fused_softmax_mask_upper_triangle -----------------------------------------------

// Checks X (or Out) is [..., S, S] and returns S (-1 when unknown).
int64_t CausalSize(const InferShapeContext& ctx, const std::string& slot) {
  const Dims d = ctx.InputDims(slot);
  if (d.size() < 2 || !DimCompatible(d[d.size() - 1], d[d.size() - 2])) {
    ctx.Fail("input ", slot, ": expected dims [..., S, S] (the last two equal), got ", DimsToString(d));
  }
  return d.back();
}

void CausalSoftmaxInferShape(InferShapeContext& ctx) {
  CausalSize(ctx, "X");
  InferLike(ctx, "X", "Out");
}

void CausalSoftmaxGradInferShape(InferShapeContext& ctx) {
  CausalSize(ctx, "Out");
  InferLike(ctx, "Out", kXGrad);
}

// Row i of each [S, S] matrix is a softmax over its first i + 1 entries; the
// rest are 0. Only j <= i is read, so no -inf mask and no exp(-inf - -inf).
template <typename T>
void CausalSoftmaxKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const int64_t s = xt.dims().back();
  const int64_t rows = s == 0 ? 0 : xt.numel() / s;
  const T* x = xt.data<T>();
  T* y = ctx.Output("Out")->mutable_data<T>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r % s + 1;  // entries j <= i
    const T* xr = x + r * s;
    T* yr = y + r * s;
    T m = xr[0];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, xr[j]);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = std::exp(xr[j] - m);
      sum += yr[j];
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
    std::fill(yr + n, yr + s, T(0));
  }
}

// dx = out * (dy - sum(dy * out)) over j <= i; masked entries get 0.
template <typename T>
void CausalSoftmaxGradKernel(ExecContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull(kXGrad);
  if (dxt == nullptr) return;
  const Tensor* dyt = ctx.InputOrNull(kOutGrad);
  if (dyt == nullptr) {
    ops_b::ZeroFill<T>(dxt);
    return;
  }
  const Tensor& yt = ctx.Input("Out");
  const int64_t s = yt.dims().back();
  const int64_t rows = s == 0 ? 0 : yt.numel() / s;
  const T* y = yt.data<T>();
  const T* dy = dyt->data<T>();
  T* dx = dxt->mutable_data<T>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r % s + 1;
    const T* yr = y + r * s;
    const T* dyr = dy + r * s;
    T* dxr = dx + r * s;
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(dyr[j]) * yr[j];
    const T d = static_cast<T>(dot);
    for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - d);
    std::fill(dxr + n, dxr + s, T(0));
  }
}

// ---- registration ----------------------------------------------------------------------

// A forward op X -> Out and its grad (inputs: `grad_reads`, Out@GRAD?;
// output X@GRAD?), both with the same attributes and JIT lowering.
struct Family {
  std::string type, doc, grad_doc, grad_reads;
  std::vector<AttrDef> attrs;
  InferShapeFn infer, grad_infer;
  KernelFn kernel, grad_kernel;
  JitLowering jit;
};

void Register(OpRegistry& r, const Family& f) {
  OpInfo fwd;
  fwd.type = f.type;
  fwd.doc = f.doc;
  fwd.inputs = {{"X"}};
  fwd.outputs = {{"Out"}};
  fwd.attrs = f.attrs;
  fwd.infer_shape = f.infer;
  fwd.reference_kernel = f.kernel;
  const bool reads_x = f.grad_reads == "X";
  fwd.grad_maker = [reads_x](const proto::OpDesc& op) {
    const std::vector<std::string> none, x = {"X"}, out = {"Out"};
    return std::vector<proto::OpDesc>{MakeGradOp(op, reads_x ? x : none, reads_x ? none : out, {"Out"}, {"X"})};
  };
  fwd.inplace = {{"X", "Out"}};
  fwd.jit = f.jit;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = f.type + "_grad";
  grad.doc = f.grad_doc;
  grad.inputs = {{f.grad_reads}, {kOutGrad, false, true}};
  grad.outputs = {{kXGrad, false, true}};
  grad.attrs = f.attrs;
  grad.infer_shape = f.grad_infer;
  grad.reference_kernel = f.grad_kernel;
  grad.inplace = {{kOutGrad, kXGrad}};
  grad.jit = f.jit;
  r.Add(std::move(grad));
}

// The reference kernel: f32 or f64 after the dtype of input `slot`.
KernelFn FloatKernel(const char* slot, void (*f32)(ExecContext&), void (*f64)(ExecContext&)) {
  return [slot, f32, f64](ExecContext& ctx) {
    DispatchFloat(ctx, slot, [&](auto tag) { (std::is_same_v<decltype(tag), float> ? f32 : f64)(ctx); });
  };
}

}  // namespace

void RegisterClipLogSoftmaxOps(OpRegistry& r) {
  const std::vector<AttrDef> bounds = {{"min", AttrKind::kFloat, std::nullopt},
                                       {"max", AttrKind::kFloat, std::nullopt}};
  // Reading Out instead of X would give the same gradient (Out is strictly
  // inside (min, max) exactly when X is), so clip may run in place.
  Register(r, {"clip", "Out = min(max(X, min), max); NaN stays NaN; min > max is an error",
               "Gradient of clip: X@GRAD = Out@GRAD where min < X < max (strictly), else 0 (also for NaN X)", "X",
               bounds, ClipInferShape, ClipGradInferShape, FloatKernel("X", ClipKernel<float>, ClipKernel<double>),
               FloatKernel("X", ClipGradKernel<float>, ClipGradKernel<double>), JitLowering::kElementwise});
  r.FindMutable("clip")->elementwise = ClipEw;
  r.FindMutable("clip_grad")->elementwise = ClipGradEw;

  const std::vector<AttrDef> axis = {{"axis", AttrKind::kInt, Attribute(int64_t{-1})}};
  Register(r, {"log_softmax", "Out = X - max - log(sum(exp(X - max))) along axis: log of softmax, computed stably",
               "Gradient of log_softmax: X@GRAD = Out@GRAD - exp(Out) * sum(Out@GRAD) along axis", "Out", axis,
               LogSoftmaxInferShape, LogSoftmaxGradInferShape,
               FloatKernel("X", LogSoftmaxKernel<float>, LogSoftmaxKernel<double>),
               FloatKernel("Out", LogSoftmaxGradKernel<float>, LogSoftmaxGradKernel<double>), JitLowering::kOneDnn});

  // No oneDNN primitive masks a softmax: inside clusters it runs its
  // reference kernel.
  Register(r, {"fused_softmax_mask_upper_triangle",
               "Causal softmax of X [..., S, S] over the last axis: in row i (second-to-last axis) the entries "
               "j > i get probability 0 and j <= i share 1 (no -inf mask is added, so no NaN)",
               "Gradient of fused_softmax_mask_upper_triangle: X@GRAD = Out * (Out@GRAD - sum(Out@GRAD * Out)) over "
               "j <= i, 0 for j > i",
               "Out",
               {},
               CausalSoftmaxInferShape,
               CausalSoftmaxGradInferShape,
               FloatKernel("X", CausalSoftmaxKernel<float>, CausalSoftmaxKernel<double>),
               FloatKernel("Out", CausalSoftmaxGradKernel<float>, CausalSoftmaxGradKernel<double>),
               JitLowering::kFramework});
}

}  // namespace kiln
