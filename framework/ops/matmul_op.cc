// matmul and matmul_grad: alpha * op(X) @ op(Y) with numpy-style broadcast of
// the leading batch dims.
#include <algorithm>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;

struct MatmulShape {
  Dims x_batch, y_batch;  // padded with leading 1s to the rank of `batch`
  Dims batch;             // broadcast batch dims of Out
  int64_t m = 0, k = 0, n = 0;
  Dims out;
};

// Works on build-time dims too: -1 matches anything and stays -1 unless the
// other side pins it.
// Errors are prefixed with `who` (the op's label).
MatmulShape InferMatmulShape(const std::string& who, const Dims& x, const Dims& y, bool tx, bool ty) {
  if (x.size() < 2) ThrowInvalidArgument(who, ": ","input X: expected rank >= 2, got ", DimsToString(x));
  if (y.size() < 2) ThrowInvalidArgument(who, ": ","input Y: expected rank >= 2, got ", DimsToString(y));
  const size_t xr = x.size(), yr = y.size();
  MatmulShape s;
  s.m = tx ? x[xr - 1] : x[xr - 2];
  const int64_t kx = tx ? x[xr - 2] : x[xr - 1];
  const int64_t ky = ty ? y[yr - 1] : y[yr - 2];
  s.n = ty ? y[yr - 2] : y[yr - 1];
  if (!DimCompatible(kx, ky)) {
    ThrowInvalidArgument(who, ": inner dimensions do not match: X ", DimsToString(x), " (transpose_X=", tx ? "true" : "false",
             ") has K=", kx, " but Y ", DimsToString(y), " (transpose_Y=", ty ? "true" : "false", ") has K=", ky);
  }
  s.k = kx >= 0 ? kx : ky;
  const size_t br = std::max(xr, yr) - 2;
  s.x_batch.assign(br, 1);
  s.y_batch.assign(br, 1);
  std::copy(x.begin(), x.end() - 2, s.x_batch.begin() + (br - (xr - 2)));
  std::copy(y.begin(), y.end() - 2, s.y_batch.begin() + (br - (yr - 2)));
  s.batch.resize(br);
  for (size_t d = 0; d < br; ++d) {
    const int64_t a = s.x_batch[d], b = s.y_batch[d];
    if (a == b || b == 1) {
      s.batch[d] = a;
    } else if (a == 1) {
      s.batch[d] = b;
    } else if (a < 0 || b < 0) {
      s.batch[d] = a < 0 ? b : a;  // the unknown side must be 1 or equal
    } else {
      ThrowInvalidArgument(who, ": batch dims of X ", DimsToString(x), " and Y ", DimsToString(y), " do not broadcast (", a, " vs ",
               b, ")");
    }
  }
  s.out = s.batch;
  s.out.push_back(s.m);
  s.out.push_back(s.n);
  return s;
}

void MatmulInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  ops_b::CheckSameDtype(ctx, "Y", dtype, "X");
  const MatmulShape s = InferMatmulShape(ctx.OpName(), ctx.InputDims("X"), ctx.InputDims("Y"),
                                           ctx.Attr<bool>("transpose_X"), ctx.Attr<bool>("transpose_Y"));
  ctx.SetOutput("Out", s.out, dtype);
}

void MatmulGradInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  ops_b::CheckSameDtype(ctx, "Y", dtype, "X");
  const MatmulShape s = InferMatmulShape(ctx.OpName(), ctx.InputDims("X"), ctx.InputDims("Y"),
                                           ctx.Attr<bool>("transpose_X"), ctx.Attr<bool>("transpose_Y"));
  if (ctx.HasInput("Out@GRAD") && !DimsCompatible(ctx.InputDims("Out@GRAD"), s.out)) {
    ctx.Fail("input Out@GRAD: expected dims ", DimsToString(s.out), ", got ", DimsToString(ctx.InputDims("Out@GRAD")));
  }
  ops_b::SetLike(ctx, "X@GRAD", "X");
  ops_b::SetLike(ctx, "Y@GRAD", "Y");
}

// For every Out batch, the batch index of X and of Y it reads.
struct BatchMap {
  std::vector<int64_t> x, y;
};
BatchMap MapBatches(const MatmulShape& s) {
  const int64_t count = Numel(s.batch);
  const std::vector<int64_t> xs = Strides(s.x_batch), ys = Strides(s.y_batch);
  BatchMap map;
  map.x.resize(count);
  map.y.resize(count);
  for (int64_t b = 0; b < count; ++b) {
    int64_t rest = b, xi = 0, yi = 0;
    for (int64_t d = static_cast<int64_t>(s.batch.size()) - 1; d >= 0; --d) {
      const int64_t idx = rest % s.batch[d];
      rest /= s.batch[d];
      if (s.x_batch[d] != 1) xi += idx * xs[d];
      if (s.y_batch[d] != 1) yi += idx * ys[d];
    }
    map.x[b] = xi;
    map.y[b] = yi;
  }
  return map;
}

// A strided operand: element (r, c) is at p[r * rs + c * cs].
template <typename T>
struct View {
  const T* p;
  int64_t rs, cs;
};

// C[m,n] (+)= alpha * A[m,k] @ B[k,n], C dense row-major. i-k-j order so the
// inner loop runs over contiguous rows of B and C; B is packed first when its
// rows are not contiguous.
template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, T alpha, View<T> a, View<T> b, T* c, bool accumulate,
          std::vector<T>* pack) {
  const T* bp = b.p;
  int64_t b_rs = b.rs;
  if (b.cs != 1 && n > 1) {
    pack->resize(static_cast<size_t>(k * n));
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < n; ++j) (*pack)[kk * n + j] = b.p[kk * b.rs + j * b.cs];
    }
    bp = pack->data();
    b_rs = n;
  }
  for (int64_t i = 0; i < m; ++i) {
    T* crow = c + i * n;
    if (!accumulate) std::fill(crow, crow + n, T(0));
    for (int64_t kk = 0; kk < k; ++kk) {
      const T av = alpha * a.p[i * a.rs + kk * a.cs];
      const T* brow = bp + kk * b_rs;
      for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
}

struct MatmulLayout {
  MatmulShape s;
  BatchMap map;
  bool tx, ty;
  // Strides of op(X) (m x k) and op(Y) (k x n) inside one batch.
  int64_t x_rs, x_cs, y_rs, y_cs;
};

MatmulLayout MakeLayout(const ExecContext& ctx, const Tensor& x, const Tensor& y) {
  MatmulLayout l;
  l.tx = ctx.Attr<bool>("transpose_X");
  l.ty = ctx.Attr<bool>("transpose_Y");
  l.s = InferMatmulShape(ctx.OpName(), x.dims(), y.dims(), l.tx, l.ty);
  l.map = MapBatches(l.s);
  const int64_t m = l.s.m, k = l.s.k, n = l.s.n;
  l.x_rs = l.tx ? 1 : k;
  l.x_cs = l.tx ? m : 1;
  l.y_rs = l.ty ? 1 : n;
  l.y_cs = l.ty ? k : 1;
  return l;
}

template <typename T>
void MatmulKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const MatmulLayout l = MakeLayout(ctx, x, y);
  const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  const int64_t m = l.s.m, k = l.s.k, n = l.s.n;
  const T* xp = x.data<T>();
  const T* yp = y.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>();
  std::vector<T> pack;
  for (size_t b = 0; b < l.map.x.size(); ++b) {
    Gemm<T>(m, n, k, alpha, {xp + l.map.x[b] * m * k, l.x_rs, l.x_cs}, {yp + l.map.y[b] * k * n, l.y_rs, l.y_cs},
            out + b * m * n, /*accumulate=*/false, &pack);
  }
}

template <typename T>
void MatmulGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  Tensor* dy = ctx.OutputOrNull("Y@GRAD");
  // Broadcast batches accumulate into the same gradient slice, so start at 0.
  T* dxp = dx ? ops_b::ZeroFill<T>(dx) : nullptr;
  T* dyp = dy ? ops_b::ZeroFill<T>(dy) : nullptr;
  const Tensor* dout = ctx.InputOrNull("Out@GRAD");
  if (dout == nullptr) return;  // no gradient flows in: both stay zero
  const MatmulLayout l = MakeLayout(ctx, x, y);
  const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  const int64_t m = l.s.m, k = l.s.k, n = l.s.n;
  const T* xp = x.data<T>();
  const T* yp = y.data<T>();
  const T* dop = dout->data<T>();
  std::vector<T> pack;
  for (size_t b = 0; b < l.map.x.size(); ++b) {
    const View<T> ox{xp + l.map.x[b] * m * k, l.x_rs, l.x_cs};  // op(X): m x k
    const View<T> oy{yp + l.map.y[b] * k * n, l.y_rs, l.y_cs};  // op(Y): k x n
    const T* g = dop + b * m * n;                               // dOut: m x n
    if (dxp != nullptr) {
      T* dst = dxp + l.map.x[b] * m * k;
      if (!l.tx) {  // dX[m,k] = dOut @ op(Y)^T
        Gemm<T>(m, k, n, alpha, {g, n, 1}, {oy.p, oy.cs, oy.rs}, dst, true, &pack);
      } else {  // dX[k,m] = op(Y) @ dOut^T
        Gemm<T>(k, m, n, alpha, oy, {g, 1, n}, dst, true, &pack);
      }
    }
    if (dyp != nullptr) {
      T* dst = dyp + l.map.y[b] * k * n;
      if (!l.ty) {  // dY[k,n] = op(X)^T @ dOut
        Gemm<T>(k, n, m, alpha, {ox.p, ox.cs, ox.rs}, {g, n, 1}, dst, true, &pack);
      } else {  // dY[n,k] = dOut^T @ op(X)
        Gemm<T>(n, k, m, alpha, {g, 1, n}, ox, dst, true, &pack);
      }
    }
  }
}

std::vector<AttrDef> MatmulAttrs() {
  return {{"transpose_X", AttrKind::kBool, Attribute(false)},
          {"transpose_Y", AttrKind::kBool, Attribute(false)},
          {"alpha", AttrKind::kFloat, Attribute(1.0f)}};
}

}  // namespace

void RegisterMatmulOps(OpRegistry& r) {
  OpInfo fwd;
  fwd.type = "matmul";
  fwd.doc = "Out = alpha * op(X) @ op(Y) (op: optional transpose of the last two dims); batch dims broadcast";
  fwd.inputs = {{"X"}, {"Y"}};
  fwd.outputs = {{"Out"}};
  fwd.attrs = MatmulAttrs();
  fwd.infer_shape = MatmulInferShape;
  fwd.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { MatmulKernel<decltype(tag)>(ctx); });
  };
  fwd.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X", "Y"}, {}, {"Out"}, {"X", "Y"})};
  };
  fwd.jit = JitLowering::kOneDnn;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = "matmul_grad";
  grad.doc = "Gradients of matmul w.r.t. X and Y, summed over broadcast batch dims";
  grad.inputs = {{"X"}, {"Y"}, {"Out@GRAD", false, true}};
  grad.outputs = {{"X@GRAD", false, true}, {"Y@GRAD", false, true}};
  grad.attrs = MatmulAttrs();
  grad.infer_shape = MatmulGradInferShape;
  grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { MatmulGradKernel<decltype(tag)>(ctx); });
  };
  grad.jit = JitLowering::kOneDnn;
  r.Add(std::move(grad));
}

}  // namespace kiln
