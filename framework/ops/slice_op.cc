// slice with its grad. It only moves elements, so its kernels work on any
// dtype: runs of contiguous bytes copied between a tensor and a box of
// another (box_copy.h). The grad reads the forward input only for its dims
// (no-need-buffer).
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

using ops_b::CheckDtype;

const std::string kOutGrad = GradVarName("Out");

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

std::vector<AttrDef> SliceAttrs() {
  return {{"axes", AttrKind::kInts, std::nullopt},
          {"starts", AttrKind::kInts, std::nullopt},
          {"ends", AttrKind::kInts, std::nullopt},
          {"decrease_axis", AttrKind::kInts, Attribute(std::vector<int64_t>{})}};
}

}  // namespace

void RegisterSliceOps(OpRegistry& r) {
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
