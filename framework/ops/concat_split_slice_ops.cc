// concat, split and slice with their grads. They only move elements, so every
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

// "X[2]": an arg of a duplicable slot, for messages.
std::string ArgLabel(const std::string& slot, size_t k) { return slot + "[" + std::to_string(k) + "]"; }

// Fails unless input `slot`[k] has dtype `want` (the dtype of `want_slot`):
// the grads copy bytes, so an out-grad of another dtype would be misread.
void CheckDtype(const InferShapeContext& ctx, const std::string& slot, size_t k, DataType want, const char* want_slot) {
  const DataType got = ctx.InputDtype(slot, k);
  if (got != want) {
    ctx.Fail("input ", ctx.InputCount(slot) > 1 ? ArgLabel(slot, k) : slot, ": expected dtype ", DataTypeName(want),
             " (as ", want_slot, "), got ", DataTypeName(got));
  }
}

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

// ---- slice ---------------------------------------------------------------------------

// Where slice reads: the box of Input at `offset` with dims `box`, and Out's
// dims (the box without the decrease_axis dims; [1] when none is left).
struct SliceGeometry {
  Dims box, offset, out;
};

// numpy's rule for one bound: negative counts from the end, then clamped to [0, dim].
int64_t ClampBound(int64_t v, int64_t dim) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); }

// Normalises entry k of an axis list attribute against `in` (negatives count
// from the end) and checks that it is in range and not repeated.
template <typename Ctx>
size_t AxisEntry(const Ctx& ctx, const char* attr, const std::vector<int64_t>& list, size_t k, const Dims& in,
                 std::vector<bool>* seen) {
  const auto r = static_cast<int64_t>(in.size());
  const int64_t a = list[k] < 0 ? list[k] + r : list[k];
  if (a < 0 || a >= r) {
    ctx.Fail("attribute '", attr, "' ", DimsToString(list), ": entry ", list[k], " is out of range for Input ",
             DimsToString(in));
  }
  if ((*seen)[a]) ctx.Fail("attribute '", attr, "' ", DimsToString(list), " names axis ", a, " twice");
  (*seen)[a] = true;
  return static_cast<size_t>(a);
}

template <typename Ctx>
SliceGeometry SliceOf(const Ctx& ctx, const Dims& in) {
  const auto& axes = ctx.template Attr<std::vector<int64_t>>("axes");
  const auto& starts = ctx.template Attr<std::vector<int64_t>>("starts");
  const auto& ends = ctx.template Attr<std::vector<int64_t>>("ends");
  if (starts.size() != axes.size() || ends.size() != axes.size()) {
    ctx.Fail("attributes 'axes' ", DimsToString(axes), ", 'starts' ", DimsToString(starts), " and 'ends' ",
             DimsToString(ends), " must have the same length");
  }
  SliceGeometry g{in, Dims(in.size(), 0), {}};
  std::vector<bool> seen(in.size(), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t a = AxisEntry(ctx, "axes", axes, k, in, &seen);
    if (in[a] < 0) continue;  // unknown until run time: the size stays -1
    g.offset[a] = ClampBound(starts[k], in[a]);
    g.box[a] = std::max<int64_t>(ClampBound(ends[k], in[a]) - g.offset[a], 0);
  }
  const auto& decrease = ctx.template Attr<std::vector<int64_t>>("decrease_axis");
  std::vector<bool> dropped(in.size(), false);
  for (size_t k = 0; k < decrease.size(); ++k) {
    const size_t a = AxisEntry(ctx, "decrease_axis", decrease, k, in, &dropped);
    if (g.box[a] >= 0 && g.box[a] != 1) {
      ctx.Fail("attribute 'decrease_axis' ", DimsToString(decrease), ": dim ", a, " has size ", g.box[a],
               " after slicing Input ", DimsToString(in), ", expected 1");
    }
  }
  for (size_t a = 0; a < in.size(); ++a) {
    if (!dropped[a]) g.out.push_back(g.box[a]);
  }
  if (g.out.empty()) g.out = {1};
  return g;
}

void SliceInferShape(InferShapeContext& ctx) {
  const Dims in = ctx.InputDims("Input");
  if (in.empty()) ctx.Fail("input Input: expected rank >= 1, got ", DimsToString(in));
  ctx.SetOutput("Out", SliceOf(ctx, in).out, ctx.InputDtype("Input"));
}

void SliceGradInferShape(InferShapeContext& ctx) {
  const Dims in = ctx.InputDims("Input");
  if (in.empty()) ctx.Fail("input Input: expected rank >= 1, got ", DimsToString(in));
  const SliceGeometry g = SliceOf(ctx, in);
  if (ctx.HasInput(kOutGrad)) CheckDtype(ctx, kOutGrad, 0, ctx.InputDtype("Input"), "Input");
  if (ctx.HasInput(kOutGrad) && !DimsCompatible(ctx.InputDims(kOutGrad), g.out)) {
    ctx.Fail("input ", kOutGrad, ": expected dims ", DimsToString(g.out), " (the slice of Input ", DimsToString(in),
             "), got ", DimsToString(ctx.InputDims(kOutGrad)));
  }
  ops_b::SetLike(ctx, GradVarName("Input"), "Input");
}

void SliceKernel(ExecContext& ctx) {
  const Tensor& in = ctx.Input("Input");
  const SliceGeometry g = SliceOf(ctx, in.dims());
  ops::CopyFromBox(in.dims(), g.box, g.offset, SizeOf(in.dtype()), in.raw_data(),
                   ctx.Output("Out")->raw_mutable_data(in.dtype()));
}

// Input@GRAD is zeros with Out@GRAD placed in the slice.
void SliceGradKernel(ExecContext& ctx) {
  Tensor* din = ctx.OutputOrNull(GradVarName("Input"));
  if (din == nullptr) return;
  void* d = ops::ZeroBytes(din);
  const Tensor* dout = ctx.InputOrNull(kOutGrad);
  if (dout == nullptr) return;
  const SliceGeometry g = SliceOf(ctx, din->dims());
  ops::CopyIntoBox(din->dims(), g.box, g.offset, SizeOf(din->dtype()), dout->raw_data(), d);
}

std::vector<AttrDef> SplitAttrs() {
  return {{"axis", AttrKind::kInt, Attribute(int64_t{0})},
          {"num", AttrKind::kInt, Attribute(int64_t{0})},
          {"sections", AttrKind::kInts, Attribute(std::vector<int64_t>{})}};
}

std::vector<AttrDef> SliceAttrs() {
  return {{"axes", AttrKind::kInts, std::nullopt},
          {"starts", AttrKind::kInts, std::nullopt},
          {"ends", AttrKind::kInts, std::nullopt},
          {"decrease_axis", AttrKind::kInts, Attribute(std::vector<int64_t>{})}};
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

  OpInfo slice;
  slice.type = "slice";
  slice.doc =
      "Out = Input[starts:ends] on each of axes (step 1; numpy bounds: negative counts from the end, "
      "clamped to the dim, empty when end <= start); the decrease_axis dims (size 1 after slicing) are dropped, "
      "[1] when none is left; any dtype";
  slice.inputs = {{"Input"}};
  slice.outputs = {{"Out"}};
  slice.attrs = SliceAttrs();
  slice.infer_shape = SliceInferShape;
  slice.reference_kernel = SliceKernel;
  slice.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"Input"}, {}, {"Out"}, {"Input"})};
  };
  slice.jit = JitLowering::kLayout;
  r.Add(std::move(slice));

  OpInfo slice_grad;
  slice_grad.type = "slice_grad";
  slice_grad.doc = "Gradient of slice: zeros of Input's dims with Out@GRAD in the slice";
  slice_grad.inputs = {{"Input"}, {kOutGrad, false, true}};
  slice_grad.outputs = {{GradVarName("Input"), false, true}};
  slice_grad.attrs = SliceAttrs();
  slice_grad.infer_shape = SliceGradInferShape;
  slice_grad.reference_kernel = SliceGradKernel;
  slice_grad.no_need_buffer = {"Input"};
  slice_grad.jit = JitLowering::kLayout;
  r.Add(std::move(slice_grad));
}

}  // namespace kiln
