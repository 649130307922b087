// concat and split with their grads (slice: slice_op.cc). They only move elements, so every
// kernel works on any dtype: runs of contiguous bytes copied between a tensor
// and a box of another (box_copy.h). The grads read their forward input only
// for its dims (no-need-buffer).
#include <algorithm>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/box_copy.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"
#include "framework/shape_util.h"

namespace kiln {
namespace {

const std::string kOutGrad = GradVarName("Out");

using ops_b::ArgLabel;
using ops_b::CheckDtype;

// ---- concat --------------------------------------------------------------------------

// Checks X's args (present, one dtype, one rank, equal dims except on the
// axis) and returns Out's dims; Out's axis dim is -1 when any input's is
// unknown.
Dims ConcatDims(const InferShapeContext& ctx) {
  const size_t n = ctx.InputCount("X");
  if (n == 0) ctx.Fail("input X: expected at least one arg, got none");
  for (size_t k = 0; k < n; ++k) {
    if (!ctx.HasInput("X", k)) ctx.Fail("input ", ArgLabel("X", k), " is @EMPTY@; every arg of X is needed");
  }
  const DataType dtype = ctx.InputDtype("X", 0);
  Dims out = ctx.InputDims("X", 0);
  if (out.empty()) ctx.Fail("input X[0]: expected rank >= 1, got ", DimsToString(out));
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), out.size(), ctx.OpName());
  for (size_t k = 1; k < n; ++k) {
    if (ctx.InputDtype("X", k) != dtype) {
      ctx.Fail("input ", ArgLabel("X", k), ": expected dtype ", DataTypeName(dtype), " (as X[0]), got ",
               DataTypeName(ctx.InputDtype("X", k)));
    }
    const Dims x = ctx.InputDims("X", k);
    bool ok = x.size() == out.size();
    for (size_t d = 0; ok && d < x.size(); ++d) ok = d == static_cast<size_t>(axis) || DimCompatible(x[d], out[d]);
    if (!ok) {
      ctx.Fail("input ", ArgLabel("X", k), ": expected dims ", DimsToString(ctx.InputDims("X", 0)),
               " (those of X[0]) except on axis ", axis, ", got ", DimsToString(x));
    }
    out[axis] = out[axis] < 0 || x[axis] < 0 ? -1 : out[axis] + x[axis];
  }
  return out;
}

void ConcatInferShape(InferShapeContext& ctx) { ctx.SetOutput("Out", ConcatDims(ctx), ctx.InputDtype("X", 0)); }

void ConcatGradInferShape(InferShapeContext& ctx) {
  const Dims out = ConcatDims(ctx);
  if (ctx.HasInput(kOutGrad)) CheckDtype(ctx, kOutGrad, 0, ctx.InputDtype("X", 0), "X");
  if (ctx.HasInput(kOutGrad) && !DimsCompatible(ctx.InputDims(kOutGrad), out)) {
    ctx.Fail("input ", kOutGrad, ": expected dims ", DimsToString(out), " (X concatenated), got ",
             DimsToString(ctx.InputDims(kOutGrad)));
  }
  const std::string dx = GradVarName("X");
  const size_t n = ctx.InputCount("X");
  if (ctx.OutputCount(dx) != n) {
    ctx.Fail("output ", dx, ": expected ", n, " args (one per X), got ", ctx.OutputCount(dx));
  }
  for (size_t k = 0; k < n; ++k) {
    if (!ctx.HasOutput(dx, k)) continue;
    ctx.SetOutputDims(dx, k, ctx.InputDims("X", k));
    ctx.SetOutputDtype(dx, k, ctx.InputDtype("X", k));
  }
}

int64_t RuntimeAxis(const ExecContext& ctx, size_t rank) {
  return NormalizeAxis(ctx.Attr<int64_t>("axis"), rank, ctx.OpName());
}

void ConcatKernel(ExecContext& ctx) {
  Tensor* out = ctx.Output("Out");
  const DataType dtype = ctx.Input("X", 0).dtype();
  void* o = out->raw_mutable_data(dtype);
  const int64_t axis = RuntimeAxis(ctx, out->rank());
  Dims offset(out->rank(), 0);
  for (size_t k = 0; k < ctx.InputCount("X"); ++k) {
    const Tensor& x = ctx.Input("X", k);
    ops::CopyIntoBox(out->dims(), x.dims(), offset, SizeOf(dtype), x.raw_data(), o);
    offset[axis] += x.dim(axis);
  }
}

// X@GRAD[k] is the slice of Out@GRAD that X[k] filled (zeros without Out@GRAD).
void ConcatGradKernel(ExecContext& ctx) {
  const Tensor* dout = ctx.InputOrNull(kOutGrad);
  const std::string dx_slot = GradVarName("X");
  Dims offset;
  int64_t axis = 0;
  for (size_t k = 0; k < ctx.InputCount("X"); ++k) {
    const Tensor& x = ctx.InputMeta("X", k);
    if (k == 0) {
      axis = RuntimeAxis(ctx, x.rank());
      offset.assign(x.rank(), 0);
    }
    Tensor* dx = ctx.OutputOrNull(dx_slot, k);
    if (dx != nullptr && dout == nullptr) ops::ZeroBytes(dx);
    if (dx != nullptr && dout != nullptr) {
      ops::CopyFromBox(dout->dims(), x.dims(), offset, SizeOf(dout->dtype()), dout->raw_data(),
                       dx->raw_mutable_data(dout->dtype()));
    }
    offset[axis] += x.dim(axis);
  }
}

// ---- split ---------------------------------------------------------------------------

// The sizes of split's parts of X (dims `x`) along `axis`, from num (equal
// parts) or sections (one -1 inferred); `outs` is the arg count of `slot`
// (Out, or split_grad's Out@GRAD), one per part. A size that depends on an
// unknown (-1) dim is -1.
template <typename Ctx>
std::vector<int64_t> SplitSizes(const Ctx& ctx, const Dims& x, int64_t axis, const std::string& slot, size_t outs) {
  const int64_t num = ctx.template Attr<int64_t>("num");
  const auto& sections = ctx.template Attr<std::vector<int64_t>>("sections");
  const int64_t d = x[axis];
  if (num < 0) ctx.Fail("attribute 'num' must be >= 0, got ", num);
  if (num > 0 && !sections.empty()) {
    ctx.Fail("attributes 'num' (", num, ") and 'sections' ", DimsToString(sections), " are both set; set one");
  }
  if (num == 0 && sections.empty()) ctx.Fail("set attribute 'num' (equal parts) or 'sections' (their sizes)");
  const size_t parts = num > 0 ? static_cast<size_t>(num) : sections.size();
  if (outs != parts) {
    ctx.Fail("slot ", slot, ": expected ", parts, " args (", num > 0 ? "num" : "sections' entries", "), got ", outs);
  }
  if (num > 0) {
    if (d >= 0 && d % num != 0) {
      ctx.Fail("input X ", DimsToString(x), ": dim ", d, " on axis ", axis, " does not split into ", num,
               " equal parts");
    }
    return std::vector<int64_t>(parts, d < 0 ? -1 : d / num);
  }
  std::vector<int64_t> sizes = sections;
  int64_t inferred = -1, known = 0;
  for (size_t k = 0; k < sections.size(); ++k) {
    if (sections[k] == -1 && inferred >= 0) {
      ctx.Fail("attribute 'sections' ", DimsToString(sections), " has more than one -1");
    }
    if (sections[k] < -1) ctx.Fail("attribute 'sections' ", DimsToString(sections), ": entry ", k, " is ", sections[k]);
    if (sections[k] == -1) inferred = static_cast<int64_t>(k);
    if (sections[k] >= 0) known += sections[k];
  }
  if (d >= 0 && (inferred >= 0 ? known > d : known != d)) {
    ctx.Fail("attribute 'sections' ", DimsToString(sections), " sums to ", known,
             inferred >= 0 ? " (without the -1)" : "", ", input X ", DimsToString(x), " has ", d, " on axis ", axis);
  }
  if (inferred >= 0) sizes[inferred] = d < 0 ? -1 : d - known;
  return sizes;
}

template <typename Ctx>
int64_t SplitAxis(const Ctx& ctx, const Dims& x) {
  if (x.empty()) ctx.Fail("input X: expected rank >= 1, got ", DimsToString(x));
  return NormalizeAxis(ctx.template Attr<int64_t>("axis"), x.size(), ctx.OpName());
}

void SplitInferShape(InferShapeContext& ctx) {
  const Dims x = ctx.InputDims("X");
  const int64_t axis = SplitAxis(ctx, x);
  const std::vector<int64_t> sizes = SplitSizes(ctx, x, axis, "Out", ctx.OutputCount("Out"));
  for (size_t k = 0; k < sizes.size(); ++k) {
    Dims part = x;
    part[axis] = sizes[k];
    ctx.SetOutputDims("Out", k, part);
    ctx.SetOutputDtype("Out", k, ctx.InputDtype("X"));
  }
}

void SplitGradInferShape(InferShapeContext& ctx) {
  const Dims x = ctx.InputDims("X");
  const int64_t axis = SplitAxis(ctx, x);
  const size_t n = ctx.InputCount(kOutGrad);
  // Without any out-grad the slot may be absent (X@GRAD is zeros); else it
  // has one arg per part.
  const std::vector<int64_t> sizes = n == 0 ? std::vector<int64_t>{} : SplitSizes(ctx, x, axis, kOutGrad, n);
  for (size_t k = 0; k < n; ++k) {
    if (!ctx.HasInput(kOutGrad, k)) continue;
    CheckDtype(ctx, kOutGrad, k, ctx.InputDtype("X"), "X");
    Dims part = x;
    part[axis] = sizes[k];
    if (!DimsCompatible(ctx.InputDims(kOutGrad, k), part)) {
      ctx.Fail("input ", ArgLabel(kOutGrad, k), ": expected dims ", DimsToString(part), ", got ",
               DimsToString(ctx.InputDims(kOutGrad, k)));
    }
  }
  ops_b::SetLike(ctx, GradVarName("X"), "X");
}

void SplitKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t axis = SplitAxis(ctx, x.dims());
  const std::vector<int64_t> sizes = SplitSizes(ctx, x.dims(), axis, "Out", ctx.OutputCount("Out"));
  Dims offset(x.rank(), 0);
  for (size_t k = 0; k < sizes.size(); ++k) {
    Dims part = x.dims();
    part[axis] = sizes[k];
    if (Tensor* out = ctx.OutputOrNull("Out", k)) {
      ops::CopyFromBox(x.dims(), part, offset, SizeOf(x.dtype()), x.raw_data(), out->raw_mutable_data(x.dtype()));
    }
    offset[axis] += sizes[k];
  }
}

// X@GRAD is the out-grads concatenated, zeros for the absent ones.
void SplitGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Dims& x = ctx.InputMeta("X").dims();
  const int64_t axis = SplitAxis(ctx, x);
  const size_t n = ctx.InputCount(kOutGrad);
  if (n == 0) {
    ops::ZeroBytes(dx);
    return;
  }
  const std::vector<int64_t> sizes = SplitSizes(ctx, x, axis, kOutGrad, n);
  bool all_present = true;
  for (size_t k = 0; k < n; ++k) all_present = all_present && ctx.InputOrNull(kOutGrad, k) != nullptr;
  void* d = all_present ? dx->raw_mutable_data(dx->dtype()) : ops::ZeroBytes(dx);
  Dims offset(x.size(), 0);
  for (size_t k = 0; k < n; ++k) {
    if (const Tensor* g = ctx.InputOrNull(kOutGrad, k)) {
      Dims part = x;
      part[axis] = sizes[k];
      ops::CopyIntoBox(x, part, offset, SizeOf(dx->dtype()), g->raw_data(), d);
    }
    offset[axis] += sizes[k];
  }
}

std::vector<AttrDef> SplitAttrs() {
  return {{"axis", AttrKind::kInt, Attribute(int64_t{0})},
          {"num", AttrKind::kInt, Attribute(int64_t{0})},
          {"sections", AttrKind::kInts, Attribute(std::vector<int64_t>{})}};
}

void RegisterConcatSplit(OpRegistry& r) {
  const SlotDef several{"X", /*duplicable=*/true, /*dispensable=*/false};
  const std::vector<AttrDef> axis = {{"axis", AttrKind::kInt, Attribute(int64_t{0})}};
  OpInfo concat;
  concat.type = "concat";
  concat.doc =
      "Out = the X args joined along axis (negative counts from the end); every other dim must agree; any dtype "
      "(one for all args)";
  concat.inputs = {several};
  concat.outputs = {{"Out"}};
  concat.attrs = axis;
  concat.infer_shape = ConcatInferShape;
  concat.reference_kernel = ConcatKernel;
  concat.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {}, {"Out"}, {"X"})};
  };
  concat.jit = JitLowering::kLayout;
  r.Add(std::move(concat));

  OpInfo concat_grad;
  concat_grad.type = "concat_grad";
  concat_grad.doc = "Gradient of concat: each X@GRAD is the slice of Out@GRAD its X filled (X read for its dims only)";
  concat_grad.inputs = {several, {kOutGrad, false, true}};
  concat_grad.outputs = {{GradVarName("X"), true, true}};
  concat_grad.attrs = axis;
  concat_grad.infer_shape = ConcatGradInferShape;
  concat_grad.reference_kernel = ConcatGradKernel;
  concat_grad.no_need_buffer = {"X"};
  concat_grad.jit = JitLowering::kLayout;
  r.Add(std::move(concat_grad));

  OpInfo split;
  split.type = "split";
  split.doc =
      "Out = X cut along axis into num equal parts (num must divide the dim), or into parts of the sizes in sections "
      "(one -1 is inferred; they must sum to the dim); one Out arg per part; any dtype";
  split.inputs = {{"X"}};
  split.outputs = {{"Out", true, false}};
  split.attrs = SplitAttrs();
  split.infer_shape = SplitInferShape;
  split.reference_kernel = SplitKernel;
  split.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {}, {"Out"}, {"X"})};
  };
  split.jit = JitLowering::kLayout;
  r.Add(std::move(split));

  OpInfo split_grad;
  split_grad.type = "split_grad";
  split_grad.doc = "Gradient of split: the Out@GRAD args concatenated along axis, zeros for absent ones";
  split_grad.inputs = {{"X"}, {kOutGrad, true, true}};
  split_grad.outputs = {{GradVarName("X"), false, true}};
  split_grad.attrs = SplitAttrs();
  split_grad.infer_shape = SplitGradInferShape;
  split_grad.reference_kernel = SplitGradKernel;
  split_grad.no_need_buffer = {"X"};
  split_grad.jit = JitLowering::kLayout;
  r.Add(std::move(split_grad));
}

}  // namespace

void RegisterConcatSplitSliceOps(OpRegistry& r) {
  RegisterConcatSplit(r);
  RegisterSliceOps(r);
}

}  // namespace kiln
