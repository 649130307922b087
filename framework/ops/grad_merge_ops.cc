// Gradient merge (Paddle's GradientMergeOptimizer) without control flow:
//   grad_merge_step  advances the persistable micro-step counter of one
//                    optimizer and says whether this step updates (Apply);
//   grad_merge       adds a parameter's gradient to its persistable
//                    accumulator and gives the merged gradient (the mean
//                    over the k micro-steps, or their sum), resetting the
//                    accumulator on the step that applies it.
// The updates then read the merged gradient and the flag (apply_gate.h),
// so on the other steps they leave the parameter and its state unchanged.
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

void CheckOneElement(const InferShapeContext& ctx, std::string_view slot) {
  ops_a::CheckFloatInput(ctx, slot);
  for (int64_t d : ctx.InputDims(slot)) {
    if (d != 1 && d != -1) ctx.Fail("input ", slot, ": expected one element ([1]), got ", DimsToString(ctx.InputDims(slot)));
  }
}

template <typename Ctx>
int64_t KSteps(const Ctx& ctx) {
  const int64_t k = ctx.template Attr<int64_t>("k_steps");
  if (k < 1) ctx.Fail("attribute k_steps: expected >= 1, got ", k);
  return k;
}

void InferGradMergeStep(InferShapeContext& ctx) {
  KSteps(ctx);
  CheckOneElement(ctx, "Step");
  ctx.SetOutput("StepOut", ctx.InputDims("Step"), ctx.InputDtype("Step"));
  ctx.SetOutput("Apply", {1}, DataType::kFP32);
}

// The counter holds the micro-steps taken since the last update (0 .. k-1).
// A counter at k or above (a checkpoint of a larger k) applies at once.
void GradMergeStepKernel(ExecContext& ctx) {
  const int64_t k = KSteps(ctx);
  // The step is read before StepOut (usually the same var) is written.
  const double next = ops_a::ReadScalar(ctx, "Step") + 1;
  const DataType dtype = ctx.Input("Step").dtype();
  const bool apply = next >= static_cast<double>(k);
  ops_a::WriteScalar(ctx.Output("StepOut"), dtype, apply ? 0.0 : next);
  ctx.Output("Apply")->mutable_data<float>()[0] = apply ? 1.f : 0.f;
}

void InferGradMerge(InferShapeContext& ctx) {
  KSteps(ctx);
  const DataType dtype = ops_a::CheckFloatInput(ctx, "Grad");
  const Dims dims = ctx.InputDims("Grad");
  ops_a::CheckSameDtype(ctx, "Acc", dtype, "Grad");
  ops_a::CheckSameDims(ctx, "Acc", dims, "Grad");
  CheckOneElement(ctx, "Apply");
  ctx.SetOutput("Out", dims, dtype);
  ctx.SetOutput("AccOut", dims, dtype);
}

void GradMergeKernel(ExecContext& ctx) {
  const int64_t k = KSteps(ctx);
  const bool avg = ctx.Attr<bool>("avg");
  const Tensor& grad = ctx.Input("Grad");
  const Tensor& acc = ctx.Input("Acc");
  if (acc.dims() != grad.dims()) {
    ctx.Fail("input Acc: expected dims ", DimsToString(grad.dims()), " (as Grad), got ", DimsToString(acc.dims()));
  }
  const bool apply = ops_a::ReadScalar(ctx, "Apply") != 0;
  Tensor* out = ctx.Output("Out");
  Tensor* acc_out = ctx.Output("AccOut");
  ops_a::DispatchFloat(ctx, grad.dtype(), "input Grad", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    const T* a = acc.data<T>();
    T* o = out->mutable_data<T>();
    T* ao = acc_out->mutable_data<T>();
    const T k_t = static_cast<T>(k);
    // Element i is read before it is written: AccOut may be Acc, Out Grad.
    for (int64_t i = 0; i < grad.numel(); ++i) {
      const T sum = a[i] + g[i];
      o[i] = avg ? sum / k_t : sum;
      ao[i] = apply ? T(0) : sum;
    }
  });
}

// The same per element; fused by the JIT with the update that reads Out,
// which then stays in registers.
std::vector<EwFragment> EwGradMerge(const EwOpView& v) {
  EwFragment f;
  f.iter = v.DimsOf(v.In("Grad"));
  f.reads = {v.Full(v.In("Grad")), v.Full(v.In("Acc")), EwOpView::Scalar(v.In("Apply"), f.iter.size())};
  f.writes = {v.Full(v.Out("Out")), v.Full(v.Out("AccOut"))};
  const float k = static_cast<float>(v.Attr<int64_t>("k_steps"));
  const bool avg = v.Attr<bool>("avg");
  f.emit = [k, avg](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue sum = p.Add(in[1], in[0]);
    const EwValue out = avg ? p.Div(sum, p.Const(k)) : sum;
    return std::vector<EwValue>{out, p.Select(in[2], p.Const(0.f), sum)};
  };
  return {f};
}

}  // namespace

void RegisterGradMergeOps(OpRegistry& r) {
  {
    OpInfo op;
    op.type = "grad_merge_step";
    op.doc = "Apply = 1 when Step + 1 reaches k_steps, else 0; StepOut = 0 when it does, else Step + 1 (the "
             "micro-step counter of gradient merge)";
    op.inputs = {ops_a::Required("Step")};
    op.outputs = {ops_a::Required("StepOut"), ops_a::Required("Apply")};
    op.attrs = {{"k_steps", AttrKind::kInt, Attribute(int64_t{1})}};
    op.inplace = {{"Step", "StepOut"}};
    op.no_grad_inputs = {"Step"};
    op.infer_shape = InferGradMergeStep;
    op.reference_kernel = GradMergeStepKernel;
    // Clustered with the updates it gates, running this kernel there (one
    // scalar; it reads Step before writing StepOut, so in place is safe).
    op.jit = JitLowering::kFramework;
    r.Add(std::move(op));
  }
  {
    OpInfo op;
    op.type = "grad_merge";
    op.doc = "S = Acc + Grad; Out = S / k_steps (avg) or S; AccOut = 0 where Apply is nonzero, else S";
    op.inputs = {ops_a::Required("Grad"), ops_a::Required("Acc"), ops_a::Required("Apply")};
    op.outputs = {ops_a::Required("Out"), ops_a::Required("AccOut")};
    op.attrs = {{"k_steps", AttrKind::kInt, Attribute(int64_t{1})}, {"avg", AttrKind::kBool, Attribute(true)}};
    op.inplace = {{"Acc", "AccOut"}};
    op.no_grad_inputs = {"Grad", "Acc", "Apply"};
    op.infer_shape = InferGradMerge;
    op.reference_kernel = GradMergeKernel;
    op.jit = JitLowering::kElementwise;
    op.elementwise = EwGradMerge;
    r.Add(std::move(op));
  }
}

}  // namespace kiln
