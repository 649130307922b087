// reshape2 and transpose2 with their grads. Both work on any dtype: they only
// move elements.
#include <cstring>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// ---- reshape2 -----------------------------------------------------------------------

// Out's dims for X's dims and the shape attribute. A 0 entry copies X's dim at
// that position and a -1 entry is inferred. Copied dims cancel on both sides,
// so at build time (-1 dims in X) the inferred entry is still known when only
// copied dims of X are unknown; otherwise it stays -1.
Dims ReshapeDims(const InferShapeContext& ctx, const Dims& x, const std::vector<int64_t>& shape) {
  auto fail = [&](const auto&... why) {
    ctx.Fail("cannot reshape X ", DimsToString(x), " into shape ", DimsToString(shape), ": ", why...);
  };
  Dims out(shape.size());
  int64_t infer = -1;
  std::vector<bool> copied(x.size(), false);
  int64_t out_rest = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t s = shape[i];
    if (s == 0) {
      if (i >= x.size()) fail("entry ", i, " is 0 (copy X's dim) but X has rank ", x.size());
      out[i] = x[i];
      copied[i] = true;
    } else if (s == -1) {
      if (infer >= 0) fail("more than one -1 entry");
      infer = static_cast<int64_t>(i);
    } else if (s < 0) {
      fail("entry ", i, " is ", s, " (entries are positive, 0 or -1)");
    } else {
      out[i] = s;
      out_rest *= s;
    }
  }
  bool x_known = true;
  int64_t x_rest = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (copied[i]) continue;
    if (x[i] < 0) x_known = false;
    x_rest *= x[i];
  }
  if (infer >= 0) {
    if (!x_known) {
      out[infer] = -1;
    } else if (x_rest % out_rest != 0) {
      fail(x_rest, " elements do not divide into the ", out_rest, " given by the other entries");
    } else {
      out[infer] = x_rest / out_rest;
    }
  } else if (x_known && x_rest != out_rest) {
    const int64_t x_numel = ops_b::ProdOrUnknown(x, 0, x.size());
    const int64_t out_numel = ops_b::ProdOrUnknown(out, 0, out.size());
    if (x_numel >= 0 && out_numel >= 0) {
      fail("X has ", x_numel, " elements, the shape gives ", out_numel);
    }
    fail("the dims not copied from X hold ", x_rest, " elements, the shape gives ", out_rest);
  }
  return out;
}

void Reshape2InferShape(InferShapeContext& ctx) {
  const Dims x = ctx.InputDims("X");
  ctx.SetOutput("Out", ReshapeDims(ctx, x, ctx.Attr<std::vector<int64_t>>("shape")), ctx.InputDtype("X"));
}

void Reshape2GradInferShape(InferShapeContext& ctx) {
  const Dims x = ctx.InputDims("X");
  if (ctx.HasInput("Out@GRAD")) {
    const int64_t x_numel = ops_b::ProdOrUnknown(x, 0, x.size());
    const Dims g = ctx.InputDims("Out@GRAD");
    const int64_t g_numel = ops_b::ProdOrUnknown(g, 0, g.size());
    if (x_numel >= 0 && g_numel >= 0 && x_numel != g_numel) {
      ctx.Fail("input Out@GRAD ", DimsToString(g), " does not have the ", x_numel, " elements of X ",
               DimsToString(x));
    }
  }
  if (ctx.HasOutput("X@GRAD")) {
    const DataType dtype = ctx.HasInput("Out@GRAD") ? ctx.InputDtype("Out@GRAD") : ctx.InputDtype("X");
    ctx.SetOutput("X@GRAD", x, dtype);
  }
}

// Copies src's elements into dst (dims already set); a no-op when both share
// one buffer (in-place reshape).
void CopyElements(const Tensor& src, Tensor* dst) {
  void* d = dst->raw_mutable_data(src.dtype());
  if (d != src.raw_data()) std::memcpy(d, src.raw_data(), src.bytes());
}

void Reshape2Kernel(ExecContext& ctx) { CopyElements(ctx.Input("X"), ctx.Output("Out")); }

void Reshape2GradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (dx == nullptr) return;
  const Tensor* dout = ctx.InputOrNull("Out@GRAD");
  if (dout != nullptr) {
    CopyElements(*dout, dx);
    return;
  }
  // All-zero bytes are 0 in every dtype.
  std::memset(dx->raw_mutable_data(dx->dtype()), 0, dx->bytes());
}

// ---- transpose2 -------------------------------------------------------------------------

const std::vector<int64_t>& CheckedPerm(const InferShapeContext& ctx, const Dims& x, const char* x_name) {
  const auto& perm = ctx.Attr<std::vector<int64_t>>("axis");
  std::vector<bool> seen(x.size(), false);
  bool ok = perm.size() == x.size();
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(x.size()) && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    ctx.Fail("attribute 'axis' ", DimsToString(perm), " is not a permutation of [0, ", x.size(), ") for ", x_name,
             " ", DimsToString(x));
  }
  return perm;
}

void Transpose2InferShape(InferShapeContext& ctx) {
  const Dims x = ctx.InputDims("X");
  const auto& perm = CheckedPerm(ctx, x, "X");
  Dims out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[perm[i]];
  ctx.SetOutput("Out", out, ctx.InputDtype("X"));
}

void Transpose2GradInferShape(InferShapeContext& ctx) {
  const Dims g = ctx.InputDims("Out@GRAD");
  const auto& perm = CheckedPerm(ctx, g, "Out@GRAD");
  Dims x(g.size());
  for (size_t i = 0; i < g.size(); ++i) x[perm[i]] = g[i];
  if (ctx.HasOutput("X@GRAD")) ctx.SetOutput("X@GRAD", x, ctx.InputDtype("Out@GRAD"));
}

// dst = src with dims permuted: dst dim i is src dim perm[i]. Walks dst in
// order; the innermost dst dim is a strided run over src.
template <typename E>
void TransposeElements(const E* src, E* dst, const Dims& src_dims, const std::vector<int64_t>& perm) {
  const size_t r = src_dims.size();
  const int64_t n = Numel(src_dims);
  if (r == 0) {
    if (n == 1) dst[0] = src[0];
    return;
  }
  const std::vector<int64_t> src_strides = Strides(src_dims);
  Dims od(r);
  std::vector<int64_t> st(r);  // src stride of each dst dim
  for (size_t i = 0; i < r; ++i) {
    od[i] = src_dims[perm[i]];
    st[i] = src_strides[perm[i]];
  }
  const int64_t inner = od[r - 1], step = st[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < n; o += inner) {
    for (int64_t j = 0; j < inner; ++j) dst[o + j] = src[off + j * step];
    for (int64_t d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < od[d]) break;
      off -= st[d] * od[d];
      idx[d] = 0;
    }
  }
}

void Transpose(const ExecContext& ctx, const Tensor& src, Tensor* dst, const std::vector<int64_t>& perm) {
  const DataType dtype = src.dtype();
  void* d = dst->raw_mutable_data(dtype);
  const void* s = src.raw_data();
  switch (SizeOf(dtype)) {
    case 1: return TransposeElements(static_cast<const uint8_t*>(s), static_cast<uint8_t*>(d), src.dims(), perm);
    case 4: return TransposeElements(static_cast<const uint32_t*>(s), static_cast<uint32_t*>(d), src.dims(), perm);
    case 8: return TransposeElements(static_cast<const uint64_t*>(s), static_cast<uint64_t*>(d), src.dims(), perm);
    default: ctx.Fail("unsupported dtype ", DataTypeName(dtype));
  }
}

void Transpose2Kernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  if (out == &x || out->IsSharedBufferWith(x)) ctx.Fail("cannot run in place: Out shares X's buffer");
  Transpose(ctx, x, out, ctx.Attr<std::vector<int64_t>>("axis"));
}

void Transpose2GradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (dx == nullptr) return;
  const auto& perm = ctx.Attr<std::vector<int64_t>>("axis");
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  Transpose(ctx, ctx.Input("Out@GRAD"), dx, inverse);
}

}  // namespace

void RegisterShapeOps(OpRegistry& r) {
  OpInfo reshape;
  reshape.type = "reshape2";
  reshape.doc = "Out = X with new dims from 'shape' (0 copies X's dim, one -1 is inferred); elements unchanged";
  reshape.inputs = {{"X"}};
  reshape.outputs = {{"Out"}};
  reshape.attrs = {{"shape", AttrKind::kInts, std::nullopt}};
  reshape.infer_shape = Reshape2InferShape;
  reshape.reference_kernel = Reshape2Kernel;
  reshape.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {}, {"Out"}, {"X"})};
  };
  reshape.inplace = {{"X", "Out"}};
  reshape.jit = JitLowering::kLayout;
  r.Add(std::move(reshape));

  OpInfo reshape_grad;
  reshape_grad.type = "reshape2_grad";
  reshape_grad.doc = "Gradient of reshape2: Out@GRAD with X's dims";
  reshape_grad.inputs = {{"X"}, {"Out@GRAD", false, true}};
  reshape_grad.outputs = {{"X@GRAD", false, true}};
  reshape_grad.attrs = {{"shape", AttrKind::kInts, std::nullopt}};
  reshape_grad.infer_shape = Reshape2GradInferShape;
  reshape_grad.reference_kernel = Reshape2GradKernel;
  reshape_grad.inplace = {{"Out@GRAD", "X@GRAD"}};
  reshape_grad.no_need_buffer = {"X"};
  reshape_grad.jit = JitLowering::kLayout;
  r.Add(std::move(reshape_grad));

  OpInfo transpose;
  transpose.type = "transpose2";
  transpose.doc = "Out = X with dims permuted: Out dim i is X dim axis[i]";
  transpose.inputs = {{"X"}};
  transpose.outputs = {{"Out"}};
  transpose.attrs = {{"axis", AttrKind::kInts, std::nullopt}};
  transpose.infer_shape = Transpose2InferShape;
  transpose.reference_kernel = Transpose2Kernel;
  transpose.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {}, {}, {"Out"}, {"X"})};
  };
  transpose.jit = JitLowering::kLayout;
  r.Add(std::move(transpose));

  // Out@GRAD is required here: X's dims are only known through it.
  OpInfo transpose_grad;
  transpose_grad.type = "transpose2_grad";
  transpose_grad.doc = "Gradient of transpose2: Out@GRAD transposed by the inverse permutation";
  transpose_grad.inputs = {{"Out@GRAD"}};
  transpose_grad.outputs = {{"X@GRAD", false, true}};
  transpose_grad.attrs = {{"axis", AttrKind::kInts, std::nullopt}};
  transpose_grad.infer_shape = Transpose2GradInferShape;
  transpose_grad.reference_kernel = Transpose2GradKernel;
  transpose_grad.jit = JitLowering::kLayout;
  r.Add(std::move(transpose_grad));
}

}  // namespace kiln
