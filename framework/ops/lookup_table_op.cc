// lookup_table (embedding) and lookup_table_grad: rows of W picked by int64
// ids, and the dense gradient that sums the rows of repeated ids.
#include <algorithm>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;

constexpr int64_t kNoPadding = -1;

// Checks W [V, D], Ids int64 [..., 1] and padding_idx; returns Out's dims
// (Ids' dims with the trailing 1 replaced by D).
Dims CheckTableAndIds(const InferShapeContext& ctx, std::string_view w_slot, DataType* dtype) {
  *dtype = ops_b::CheckFloatInput(ctx, w_slot);
  const Dims w = ctx.InputDims(w_slot);
  if (w.size() != 2) {
    ctx.Fail("input ", w_slot, ": expected rank 2 [V, D], got ", DataTypeName(*dtype), DimsToString(w));
  }
  if (ctx.InputDtype("Ids") != DataType::kINT64) {
    ctx.Fail("input Ids: expected dtype i64, got ", DataTypeName(ctx.InputDtype("Ids")));
  }
  const Dims ids = ctx.InputDims("Ids");
  if (ids.empty() || !DimCompatible(ids.back(), 1)) {
    ctx.Fail("input Ids: expected dims [..., 1] (one id per row), got ", DimsToString(ids));
  }
  const int64_t pad = ctx.Attr<int64_t>("padding_idx");
  if (pad != kNoPadding && (pad < 0 || (w[0] >= 0 && pad >= w[0]))) {
    ctx.Fail("attribute padding_idx: expected -1 (none) or a row of ", w_slot, " in [0, ", w[0], "), got ", pad);
  }
  Dims out(ids.begin(), ids.end() - 1);
  out.push_back(w[1]);
  return out;
}

void LookupTableInferShape(InferShapeContext& ctx) {
  DataType dtype;
  const Dims out = CheckTableAndIds(ctx, "W", &dtype);
  ctx.SetOutput("Out", out, dtype);
}

void LookupTableGradInferShape(InferShapeContext& ctx) {
  DataType dtype;
  const Dims out = CheckTableAndIds(ctx, "W", &dtype);
  if (ctx.HasInput("Out@GRAD")) {
    ops_b::CheckSameDtype(ctx, "Out@GRAD", dtype, "W");
    if (!DimsCompatible(ctx.InputDims("Out@GRAD"), out)) {
      ctx.Fail("input Out@GRAD: expected dims ", DimsToString(out), " (as Out), got ",
               DimsToString(ctx.InputDims("Out@GRAD")));
    }
  }
  if (ctx.HasOutput("W@GRAD")) ctx.SetOutput("W@GRAD", ctx.InputDims("W"), dtype);
}

// Id number `i` of `ids`, checked against [0, rows).
int64_t CheckedId(const ExecContext& ctx, const Tensor& ids, int64_t i, int64_t rows) {
  const int64_t id = ids.data<int64_t>()[i];
  if (id < 0 || id >= rows) {
    ctx.Fail("input Ids: id ", id, " at position ", i, " (flat index into Ids ", ids.ShapeString(), ") is outside [0, ",
             rows, ") (the rows of W)");
  }
  return id;
}

template <typename T>
void LookupTableKernel(ExecContext& ctx) {
  const Tensor& wt = ctx.Input("W");
  const Tensor& ids = ctx.Input("Ids");
  const int64_t rows = wt.dim(0), width = wt.dim(1);
  const int64_t pad = ctx.Attr<int64_t>("padding_idx");
  const T* w = wt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t id = CheckedId(ctx, ids, i, rows);
    T* dst = out + i * width;
    if (id == pad) {
      std::fill(dst, dst + width, T(0));
    } else {
      std::copy(w + id * width, w + (id + 1) * width, dst);
    }
  }
}

template <typename T>
void LookupTableGradKernel(ExecContext& ctx) {
  Tensor* dwt = ctx.OutputOrNull("W@GRAD");
  if (dwt == nullptr) return;
  // W is read only for its dims (no-need-buffer).
  const Tensor& wt = ctx.InputMeta("W");
  const Tensor& ids = ctx.Input("Ids");
  const int64_t rows = wt.dim(0), width = wt.dim(1);
  const int64_t pad = ctx.Attr<int64_t>("padding_idx");
  T* dw = ops_b::ZeroFill<T>(dwt);
  const Tensor* dout_t = ctx.InputOrNull("Out@GRAD");
  // Ids are checked even without a gradient: a bad id is an error either way.
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t id = CheckedId(ctx, ids, i, rows);
    if (dout_t == nullptr || id == pad) continue;
    const T* src = dout_t->data<T>() + i * width;
    T* dst = dw + id * width;
    for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
  }
}

std::vector<AttrDef> LookupTableAttrs() { return {{"padding_idx", AttrKind::kInt, Attribute(kNoPadding)}}; }

}  // namespace

void RegisterLookupTableOps(OpRegistry& r) {
  OpInfo op;
  op.type = "lookup_table";
  op.doc =
      "Embedding: Out[..., :] = W[Ids[..., 0], :] for W [V, D] and Ids int64 [..., 1], so Out is [..., D]. "
      "Rows whose id is padding_idx (-1: none) are zeros and get no gradient. An id outside [0, V) is an error "
      "naming the id and its position";
  op.inputs = {{"W"}, {"Ids"}};
  op.outputs = {{"Out"}};
  op.attrs = LookupTableAttrs();
  op.infer_shape = LookupTableInferShape;
  op.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "W", [&](auto tag) { LookupTableKernel<decltype(tag)>(ctx); });
  };
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"W", "Ids"}, {}, {"Out"}, {"W"})};
  };
  op.no_grad_inputs = {"Ids"};
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "lookup_table_grad";
  grad.doc =
      "Gradient of lookup_table: W@GRAD is dense [V, D], row v the sum of the Out@GRAD rows of every position "
      "whose id is v (zero for padding_idx and unused ids)";
  grad.inputs = {{"W"}, {"Ids"}, {"Out@GRAD", false, true}};
  grad.outputs = {{"W@GRAD", false, true}};
  grad.attrs = LookupTableAttrs();
  grad.infer_shape = LookupTableGradInferShape;
  grad.reference_kernel = [](ExecContext& ctx) {
    // W may be shape-only here: dispatch on its dtype without reading it.
    const DataType dtype = ctx.InputMeta("W").dtype();
    if (dtype == DataType::kFP32) {
      LookupTableGradKernel<float>(ctx);
    } else if (dtype == DataType::kFP64) {
      LookupTableGradKernel<double>(ctx);
    } else {
      ctx.Fail("input W: expected dtype f32 or f64, got ", DataTypeName(dtype));
    }
  };
  grad.no_need_buffer = {"W"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
