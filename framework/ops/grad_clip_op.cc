// clip_by_global_norm: Paddle's ClipGradByGlobalNorm as one op. It reads every
// gradient once (one reduction over all of them) and writes only the [1]
// factor Scale = clip_norm / max(global_norm, clip_norm); the update ops take
// it as their GradScale input and multiply g by it inside their kernels, so
// clipping adds no pass that writes gradients and none over the weights.
//
// The JIT runs it as a framework kernel inside the cluster (kFramework): its
// result is one number from gradients of many shapes, which no elementwise
// group can produce, and keeping it in the cluster keeps the backward pass and
// the updates in one compiled object.
#include <algorithm>
#include <cmath>
#include <string>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

void InferClipByGlobalNorm(InferShapeContext& ctx) {
  const float clip = ctx.Attr<float>("clip_norm");
  if (!(std::isfinite(clip) && clip > 0)) ctx.Fail("attribute clip_norm: expected finite and > 0, got ", clip);
  if (ctx.InputCount("X") == 0) ctx.Fail("input X: expected at least one gradient");
  for (size_t i = 0; i < ctx.InputCount("X"); ++i) {
    if (!ctx.HasInput("X", i)) ctx.Fail("input X: argument ", i, " is empty (@EMPTY@); pass only gradients that exist");
    ops_a::CheckFloatInput(ctx, "X", i);
  }
  ctx.SetOutput("Scale", {1}, DataType::kFP32);
}

// Sum of x^2 in double. Eight independent partial sums: the compiler turns
// them into vector lanes (a single running sum is a serial dependency chain
// it may not reorder), and the summation error grows more slowly too.
template <typename T>
double SumOfSquares(const T* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  double total = 0;
  for (; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  for (double a : acc) total += a;
  return total;
}

void ClipByGlobalNormKernel(ExecContext& ctx) {
  const double clip = ctx.Attr<float>("clip_norm");
  double sum = 0;
  for (size_t i = 0; i < ctx.InputCount("X"); ++i) {
    const Tensor& x = ctx.Input("X", i);
    ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
      using T = decltype(tag);
      sum += SumOfSquares(x.data<T>(), x.numel());
    });
  }
  // A NaN or Inf gradient makes the norm NaN or Inf and the scale NaN or 0:
  // the step then shows the problem (NaN parameters, --check_nan_inf) rather
  // than hiding it. std::max keeps a NaN norm (its first argument).
  const double norm = std::sqrt(sum);
  ctx.Output("Scale")->mutable_data<float>()[0] = static_cast<float>(clip / std::max(norm, clip));
}

}  // namespace

void RegisterGradClipOps(OpRegistry& r) {
  OpInfo op;
  op.type = "clip_by_global_norm";
  op.doc = "Scale = clip_norm / max(sqrt(sum over all X of sum(X^2)), clip_norm) (Paddle's ClipGradByGlobalNorm; "
           "f32 [1], summed in double); the update ops multiply their Grad by it (their GradScale input). JIT: "
           "framework";
  op.inputs = {{"X", /*duplicable=*/true}};
  op.outputs = {{"Scale"}};
  op.attrs = {{"clip_norm", AttrKind::kFloat, Attribute(1.0f)}};
  op.no_grad_inputs = {"X"};
  op.infer_shape = InferClipByGlobalNorm;
  op.reference_kernel = ClipByGlobalNormKernel;
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));
}

}  // namespace kiln
