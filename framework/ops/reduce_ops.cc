// mean, reduce_sum, reduce_mean, sum and their grads. Reductions accumulate in
// double whatever the dtype, so the reference result does not depend on the
// summation order more than rounding the final value does.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "framework/shape_util.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/reduce_dims.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops::KeptDims;
using ops::ReducedDims;
using ops::ReduceOutDims;
using ops_a::ForEachBroadcast;
using ops_a::MakeBroadcastLoops;

// ---- mean ------------------------------------------------------------------------

void InferMean(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  ctx.SetOutput("Out", {1}, dtype);
}

void MeanKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < x.numel(); ++i) acc += p[i];
    out->mutable_data<T>()[0] = static_cast<T>(acc / static_cast<double>(x.numel()));
  });
}

void InferMeanGrad(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  const std::string dout = GradVarName("Out");
  // Out@GRAD is read as a scalar of either float dtype: the loss-gradient seed
  // (fill_constant) has the loss's declared dtype, which may differ from the
  // dtype X has at run time (FP64 gradient checks of FP32 programs).
  if (ctx.HasInput(dout)) {
    ops_a::CheckFloatInput(ctx, dout);
    ops_a::CheckSameDims(ctx, dout, {1}, "Out");
  }
  ctx.SetOutput(GradVarName("X"), ctx.InputDims("X"), dtype);
}

void MeanGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& x = ctx.InputMeta("X");
  const bool has_dout = ctx.InputOrNull(GradVarName("Out")) != nullptr;
  const double dout = has_dout ? ops_a::ReadScalar(ctx, GradVarName("Out")) : 0.0;
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(dout / static_cast<double>(x.numel()));
    T* p = dx->mutable_data<T>();
    std::fill(p, p + dx->numel(), v);
  });
}

// ---- reduce_sum / reduce_mean ------------------------------------------------------

void InferReduce(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const std::vector<bool> reduced = ReducedDims(ctx, x.size());
  ctx.SetOutput("Out", ReduceOutDims(x, reduced, ctx.Attr<bool>("keep_dim")), dtype);
}

void ReduceKernel(ExecContext& ctx, bool mean) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const Dims kept = KeptDims(x.dims(), ReducedDims(ctx, x.rank()));
  const auto loops = MakeBroadcastLoops(x.dims(), kept);
  // Elements of X folded into each output element.
  const double count = loops.y_numel > 0 ? static_cast<double>(loops.x_numel) / static_cast<double>(loops.y_numel) : 0;
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    std::vector<double> acc(static_cast<size_t>(loops.y_numel), 0.0);
    ForEachBroadcast(loops, [&](int64_t i, int64_t j) { acc[j] += p[i]; });
    T* o = out->mutable_data<T>();
    for (size_t j = 0; j < acc.size(); ++j) o[j] = static_cast<T>(mean ? acc[j] / count : acc[j]);
  });
}

void InferReduceGrad(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const std::vector<bool> reduced = ReducedDims(ctx, x.size());
  const std::string dout = GradVarName("Out");
  if (ctx.HasInput(dout)) {
    ops_a::CheckSameDtype(ctx, dout, dtype, "X");
    ops_a::CheckSameDims(ctx, dout, ReduceOutDims(x, reduced, ctx.Attr<bool>("keep_dim")), "Out");
  }
  ctx.SetOutput(GradVarName("X"), x, dtype);
}

void ReduceGradKernel(ExecContext& ctx, bool mean) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& x = ctx.InputMeta("X");
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  const Dims kept = KeptDims(x.dims(), ReducedDims(ctx, x.rank()));
  const auto loops = MakeBroadcastLoops(x.dims(), kept);
  const double count = loops.y_numel > 0 ? static_cast<double>(loops.x_numel) / static_cast<double>(loops.y_numel) : 0;
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    if (dout == nullptr) {
      ops_a::ZeroFill<T>(dx);
      return;
    }
    const T* g = dout->data<T>();
    T* p = dx->mutable_data<T>();
    if (mean) {
      ForEachBroadcast(loops, [&](int64_t i, int64_t j) { p[i] = static_cast<T>(static_cast<double>(g[j]) / count); });
    } else {
      ForEachBroadcast(loops, [&](int64_t i, int64_t j) { p[i] = g[j]; });
    }
  });
}

// The JIT's form of reduce_sum / reduce_mean and their grads: one fragment
// over X's dims. The forward writes Out as its dims at X's rank (1 in the
// reduced dims: the generated kernel sums over them); the grad reads Out@GRAD
// the same way (broadcast). The mean scales each element by 1/count, so the
// generated sum runs in float over scaled terms where the reference divides
// its double sum once.
class EwReduceView {
 public:
  explicit EwReduceView(const EwOpView& v) : v_(v) {}
  template <typename T>
  const T& Attr(const std::string& name) const { return v_.Attr<T>(name); }
  std::string OpName() const { return "op '" + v_.op().type() + "'"; }
  template <typename... Args>
  [[noreturn]] void Fail(Args&&... args) const {
    ThrowInvalidArgument(OpName(), ": ", std::forward<Args>(args)...);
  }

 private:
  const EwOpView& v_;
};

std::vector<EwFragment> EwReduce(const EwOpView& v, bool mean, bool grad) {
  const std::string x = v.In("X");
  const std::string small = grad ? v.In(GradVarName("Out")) : v.Out("Out");
  const std::string full = grad ? v.Out(GradVarName("X")) : x;
  if (x.empty() || small.empty() || full.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  const Dims kept = KeptDims(f.iter, ReducedDims(EwReduceView(v), f.iter.size()));
  if (Numel(f.iter) == 0) return {};
  const float scale = mean ? static_cast<float>(static_cast<double>(Numel(kept)) / Numel(f.iter)) : 1.0f;
  if (grad) {
    f.reads = {{small, kept}};
    f.writes = {{full, f.iter}};
  } else {
    f.reads = {{full, f.iter}};
    f.writes = {{small, kept}};
  }
  f.constants_from_dims = mean;
  f.emit = [mean, scale](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{mean ? p.Mul(in[0], p.Const(scale)) : in[0]};
  };
  return {f};
}

// ---- sum -----------------------------------------------------------------------------

void InferSum(InferShapeContext& ctx) {
  const size_t n = ctx.InputCount("X");
  size_t first = n;
  for (size_t k = 0; k < n && first == n; ++k) {
    if (ctx.HasInput("X", k)) first = k;
  }
  if (first == n) ctx.Fail("input X: expected at least one argument");
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X", first);
  const Dims dims = ctx.InputDims("X", first);
  for (size_t k = first + 1; k < n; ++k) {
    if (!ctx.HasInput("X", k)) continue;
    if (ctx.InputDtype("X", k) != dtype) {
      ctx.Fail("input X[", k, "]: expected dtype ", DataTypeName(dtype), " (as X[", first, "]), got ",
               DataTypeName(ctx.InputDtype("X", k)));
    }
    if (!DimsCompatible(ctx.InputDims("X", k), dims)) {
      ctx.Fail("input X[", k, "]: expected dims ", DimsToString(dims), " (as X[", first, "]), got ",
               DimsToString(ctx.InputDims("X", k)));
    }
  }
  ctx.SetOutput("Out", dims, dtype);
}

void SumKernel(ExecContext& ctx) {
  std::vector<const Tensor*> xs;
  for (const Tensor* t : ctx.MultiInput("X")) {
    if (t != nullptr) xs.push_back(t);
  }
  if (xs.empty()) ctx.Fail("input X: expected at least one argument");
  Tensor* out = ctx.Output("Out");
  ops_a::DispatchFloat(ctx, xs[0]->dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> ps;
    for (const Tensor* t : xs) ps.push_back(t->data<T>());
    // Out may share a buffer with any X (in place): element i of every input is
    // read before element i of Out is written.
    T* o = out->mutable_data<T>();
    const int64_t n = xs[0]->numel();
    for (int64_t i = 0; i < n; ++i) {
      T s = ps[0][i];
      for (size_t k = 1; k < ps.size(); ++k) s += ps[k][i];
      o[i] = s;
    }
  });
}

void InferSumGrad(InferShapeContext& ctx) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its dims)");
  const DataType dtype = ops_a::CheckFloatInput(ctx, dout);
  const Dims dims = ctx.InputDims(dout);
  const std::string dx = GradVarName("X");
  for (size_t k = 0; k < ctx.OutputCount(dx); ++k) {
    ctx.SetOutputDims(dx, k, dims);
    ctx.SetOutputDtype(dx, k, dtype);
  }
}

void SumGradKernel(ExecContext& ctx) {
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const std::string dx = GradVarName("X");
  for (size_t k = 0; k < ctx.OutputCount(dx); ++k) {
    Tensor* t = ctx.OutputOrNull(dx, k);
    if (t == nullptr) continue;
    ops_a::DispatchFloat(ctx, dout.dtype(), "input Out@GRAD", [&](auto tag) {
      using T = decltype(tag);
      const T* g = dout.data<T>();
      T* p = t->mutable_data<T>();
      std::copy(g, g + dout.numel(), p);
    });
  }
}

// ---- registration -----------------------------------------------------------------

void AddReduce(OpRegistry& r, const std::string& type, const std::string& doc, bool mean) {
  const std::vector<AttrDef> attrs = {{"dim", AttrKind::kInts, Attribute(std::vector<int64_t>{0})},
                                      {"keep_dim", AttrKind::kBool, Attribute(false)},
                                      {"reduce_all", AttrKind::kBool, Attribute(false)}};
  OpInfo fwd;
  fwd.type = type;
  fwd.doc = doc;
  fwd.inputs = {ops_a::Required("X")};
  fwd.outputs = {ops_a::Required("Out")};
  fwd.attrs = attrs;
  fwd.infer_shape = InferReduce;
  fwd.reference_kernel = [mean](ExecContext& ctx) { ReduceKernel(ctx, mean); };
  fwd.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {}, {"Out"}, {"X"})};
  };
  fwd.jit = JitLowering::kReduction;
  fwd.elementwise = [mean](const EwOpView& v) { return EwReduce(v, mean, /*grad=*/false); };
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = type + "_grad";
  grad.doc = "gradient of " + type + ": Out@GRAD broadcast back over the reduced dims";
  grad.inputs = {ops_a::Required("X"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = attrs;
  grad.infer_shape = InferReduceGrad;
  grad.reference_kernel = [mean](ExecContext& ctx) { ReduceGradKernel(ctx, mean); };
  grad.no_need_buffer = {"X"};
  grad.jit = JitLowering::kReduction;
  grad.elementwise = [mean](const EwOpView& v) { return EwReduce(v, mean, /*grad=*/true); };
  r.Add(std::move(grad));
}

}  // namespace

void RegisterReduceOps(OpRegistry& r) {
  {
    OpInfo fwd;
    fwd.type = "mean";
    fwd.doc = "Out[0] = mean of all elements of X";
    fwd.inputs = {ops_a::Required("X")};
    fwd.outputs = {ops_a::Required("Out")};
    fwd.infer_shape = InferMean;
    fwd.reference_kernel = MeanKernel;
    fwd.grad_maker = [](const proto::OpDesc& op) {
      return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {}, {"Out"}, {"X"})};
    };
    fwd.jit = JitLowering::kReduction;
    r.Add(std::move(fwd));

    OpInfo grad;
    grad.type = "mean_grad";
    grad.doc = "gradient of mean: every X@GRAD element is Out@GRAD / numel(X)";
    grad.inputs = {ops_a::Required("X"), ops_a::Optional(GradVarName("Out"))};
    grad.outputs = {ops_a::Optional(GradVarName("X"))};
    grad.infer_shape = InferMeanGrad;
    grad.reference_kernel = MeanGradKernel;
    grad.no_need_buffer = {"X"};
    grad.jit = JitLowering::kReduction;
    r.Add(std::move(grad));
  }

  AddReduce(r, "reduce_sum", "sum of X over attr dim (all dims when reduce_all)", false);
  AddReduce(r, "reduce_mean", "mean of X over attr dim (all dims when reduce_all)", true);

  {
    OpInfo fwd;
    fwd.type = "sum";
    fwd.doc = "Out = X[0] + X[1] + ... (inputs of one shape)";
    fwd.inputs = {{"X", /*duplicable=*/true, /*dispensable=*/false}};
    fwd.outputs = {ops_a::Required("Out")};
    fwd.infer_shape = InferSum;
    fwd.reference_kernel = SumKernel;
    fwd.grad_maker = [](const proto::OpDesc& op) {
      return std::vector<proto::OpDesc>{MakeGradOp(op, {}, {}, {"Out"}, {"X"})};
    };
    fwd.inplace = {{"X", "Out"}};
    fwd.jit = JitLowering::kReduction;
    r.Add(std::move(fwd));

    OpInfo grad;
    grad.type = "sum_grad";
    grad.doc = "gradient of sum: every X@GRAD is a copy of Out@GRAD";
    grad.inputs = {ops_a::Optional(GradVarName("Out"))};
    grad.outputs = {{GradVarName("X"), /*duplicable=*/true, /*dispensable=*/true}};
    grad.infer_shape = InferSumGrad;
    grad.reference_kernel = SumGradKernel;
    grad.jit = JitLowering::kReduction;
    r.Add(std::move(grad));
  }
}

}  // namespace kiln
