// reduce_prod, reduce_l1, reduce_l2, logsumexp and their grads, with the
// attributes of reduce_sum (dim, keep_dim, reduce_all: reduce_dims.h).
// Floats accumulate in double. An empty group gives the reduction's
// identity: 1, 0, 0 and -inf.
//
// JIT: a generated kernel reduces only by summing, so reduce_l1 (a sum of
// |X|) and the grads that read X, Out and Out@GRAD pointwise (those of l1,
// l2 and logsumexp) are elementwise; reduce_prod, reduce_l2 (a sqrt after
// the sum), logsumexp (a maximum first) and reduce_prod_grad (which counts
// zeros per group) run their framework kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"
#include "framework/ops/reduce_dims.h"

namespace kiln {
namespace {

using ops_a::ForEachBroadcast;

// X's dims, the reduced tensor at X's rank (1 in reduced dims) and the loop
// nest pairing each X element with its group.
struct Groups {
  Dims kept;
  ops_a::BroadcastLoops loops;
};

template <typename Ctx>
Groups GroupsOf(const Ctx& ctx, const Dims& x) {
  const Dims kept = ops::KeptDims(x, ops::ReducedDims(ctx, x.size()));
  return {kept, ops_a::MakeBroadcastLoops(x, kept)};
}

const std::vector<DataType> kNumeric = {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32};
const std::vector<DataType> kFloat = {DataType::kFP32, DataType::kFP64};

InferShapeFn InferReduce(std::vector<DataType> dtypes) {
  return [dtypes](InferShapeContext& ctx) {
    const DataType d = ctx.InputDtype("X");
    if (std::find(dtypes.begin(), dtypes.end(), d) == dtypes.end()) {
      ctx.Fail("input X: expected dtype ",
               dtypes.size() == 2 ? ops::DtypeList({kFloat[0], kFloat[1]})
                                  : ops::DtypeList({kNumeric[0], kNumeric[1], kNumeric[2], kNumeric[3]}),
               ", got ", DataTypeName(d));
    }
    const Dims x = ctx.InputDims("X");
    const std::vector<bool> reduced = ops::ReducedDims(ctx, x.size());
    ctx.SetOutput("Out", ops::ReduceOutDims(x, reduced, ctx.Attr<bool>("keep_dim")), d);
  };
}

// Grads read X (and Out when `reads_out`) and Out@GRAD, which must be there.
void InferReduceGrad(InferShapeContext& ctx, bool reads_out) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its values)");
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const Dims out = ops::ReduceOutDims(x, ops::ReducedDims(ctx, x.size()), ctx.Attr<bool>("keep_dim"));
  ops::CheckSameDtype(ctx, dout, dtype, "X");
  ops_a::CheckSameDims(ctx, dout, out, "Out");
  if (reads_out) {
    ops::CheckSameDtype(ctx, "Out", dtype, "X");
    ops_a::CheckSameDims(ctx, "Out", out, "Out");
  }
  ctx.SetOutput(GradVarName("X"), x, dtype);
}

// ---- forward kernels -----------------------------------------------------------------------
// Folds each group: acc starts at `init`, takes fold(acc, x) per element and
// ends as finish(acc); Acc is double for floats, uint64_t (wrapping) for integers.
template <typename Fold, typename Finish>
void FoldKernel(ExecContext& ctx, bool integers, double init, Fold fold, Finish finish) {
  const Tensor& x = ctx.Input("X");
  const Groups g = GroupsOf(ctx, x.dims());
  Tensor* out = ctx.Output("Out");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
    std::vector<Acc> acc(static_cast<size_t>(g.loops.y_numel), static_cast<Acc>(init));
    const T* xp = x.data<T>();
    ForEachBroadcast(g.loops, [&](int64_t i, int64_t j) { acc[j] = fold(acc[j], xp[i]); });
    T* o = out->mutable_data<T>();
    for (size_t j = 0; j < acc.size(); ++j) o[j] = static_cast<T>(finish(acc[j]));
  };
  if (integers) {
    ops::DispatchNumeric(ctx, x.dtype(), "input X", run);
  } else {
    ops_a::DispatchFloat(ctx, x.dtype(), "input X", run);
  }
}

template <typename Acc, typename T>
Acc Magnitude(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fabs(v);
  } else {
    return static_cast<Acc>(v < 0 ? -static_cast<Acc>(v) : static_cast<Acc>(v));
  }
}

void ProdKernel(ExecContext& ctx) {
  FoldKernel(
      ctx, true, 1.0, [](auto acc, auto v) { return acc * static_cast<decltype(acc)>(v); }, [](auto acc) { return acc; });
}

void L1Kernel(ExecContext& ctx) {
  FoldKernel(
      ctx, true, 0.0, [](auto acc, auto v) { return acc + Magnitude<decltype(acc)>(v); }, [](auto acc) { return acc; });
}

void L2Kernel(ExecContext& ctx) {
  FoldKernel(
      ctx, false, 0.0, [](auto acc, auto v) { return acc + static_cast<double>(v) * v; },
      [](auto acc) { return std::sqrt(acc); });
}

// m + log(sum exp(x - m)) with m the group's maximum; m = +-inf is the result
// itself (all -inf or empty: -inf), a NaN anywhere gives NaN.
void LogSumExpKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Groups g = GroupsOf(ctx, x.dims());
  Tensor* out = ctx.Output("Out");
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const double ninf = -std::numeric_limits<double>::infinity();
    std::vector<double> m(static_cast<size_t>(g.loops.y_numel), ninf), sum(m.size(), 0.0);
    ForEachBroadcast(g.loops, [&](int64_t i, int64_t j) {
      if (!std::isnan(m[j]) && !(xp[i] <= m[j])) m[j] = xp[i];  // a NaN sticks
    });
    ForEachBroadcast(g.loops, [&](int64_t i, int64_t j) {
      if (std::isfinite(m[j])) sum[j] += std::exp(xp[i] - m[j]);
    });
    T* o = out->mutable_data<T>();
    for (size_t j = 0; j < m.size(); ++j) o[j] = static_cast<T>(std::isfinite(m[j]) ? m[j] + std::log(sum[j]) : m[j]);
  });
}

// ---- grads -----------------------------------------------------------------------------------
// dX[i] = term(x, out, dout) of X[i] and its group's Out and Out@GRAD.
template <typename Term>
void PointwiseGradKernel(ExecContext& ctx, bool reads_out, Term term) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& x = ctx.Input("X");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const Tensor* out = reads_out ? &ctx.Input("Out") : nullptr;
  const Groups g = GroupsOf(ctx, x.dims());
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *gp = dout.data<T>(), *op = out ? out->data<T>() : nullptr;
    T* p = dx->mutable_data<T>();
    ForEachBroadcast(g.loops, [&](int64_t i, int64_t j) { p[i] = term(xp[i], op ? op[j] : T(0), gp[j]); });
  });
}

// The product of the others: Out / X[i] is undefined at zeros, so each group
// counts its zeros and multiplies its nonzero elements. One zero: only it
// gets the product of the rest; two or more: every term is 0.
void ProdGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& x = ctx.Input("X");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const Groups g = GroupsOf(ctx, x.dims());
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *gp = dout.data<T>();
    std::vector<double> nonzero(static_cast<size_t>(g.loops.y_numel), 1.0);
    std::vector<int64_t> zeros(nonzero.size(), 0);
    ForEachBroadcast(g.loops, [&](int64_t i, int64_t j) {
      if (xp[i] == T(0)) {
        ++zeros[j];
      } else {
        nonzero[j] *= xp[i];
      }
    });
    T* p = dx->mutable_data<T>();
    ForEachBroadcast(g.loops, [&](int64_t i, int64_t j) {
      double others = 0;
      if (zeros[j] == 0) others = nonzero[j] / xp[i];
      if (zeros[j] == 1 && xp[i] == T(0)) others = nonzero[j];
      p[i] = static_cast<T>(others * gp[j]);
    });
  });
}

template <typename T>
T L1Term(T x, T, T g) {
  return x > T(0) ? g : x < T(0) ? -g : T(0);
}
template <typename T>
T L2Term(T x, T out, T g) {
  return out == T(0) ? T(0) : x * g / out;
}
template <typename T>
T LogSumExpTerm(T x, T out, T g) {
  return g * std::exp(x - out);
}

// ---- the JIT's forms -------------------------------------------------------------------------
// One fragment over X's dims; `small` vars (Out, Out@GRAD) are read, or
// written as a sum, at the kept dims. None for an empty X.
std::vector<EwFragment> EwReduceNorm(const EwOpView& v, const std::vector<std::string>& small_reads,
                                     std::function<EwValue(EwProgram&, const std::vector<EwValue>&)> emit,
                                     bool writes_small) {
  const std::string x = v.In("X");
  const std::string dst = writes_small ? v.Out("Out") : v.Out(GradVarName("X"));
  if (x.empty() || dst.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  if (Numel(f.iter) == 0) return {};
  const Dims kept = GroupsOf(ops::EwOpContext(v), f.iter).kept;
  f.reads = {v.Full(x)};
  for (const std::string& slot : small_reads) {
    const std::string var = v.In(slot);
    if (var.empty()) return {};
    f.reads.push_back({var, kept});
  }
  f.writes = {writes_small ? EwAccess{dst, kept} : v.Full(dst)};
  f.emit = [emit](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{emit(p, in)}; };
  return {f};
}

std::vector<EwFragment> EwL1(const EwOpView& v) {
  return EwReduceNorm(v, {}, [](EwProgram& p, const std::vector<EwValue>& in) { return p.Abs(in[0]); }, true);
}
std::vector<EwFragment> EwL1Grad(const EwOpView& v) {
  return EwReduceNorm(v, {GradVarName("Out")}, [](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue zero = p.Const(0.0f), x = in[0], g = in[1];
    return p.Select(p.Gt(x, zero), g, p.Select(p.Lt(x, zero), p.Neg(g), zero));
  }, false);
}
std::vector<EwFragment> EwL2Grad(const EwOpView& v) {
  return EwReduceNorm(v, {"Out", GradVarName("Out")}, [](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue zero = p.Const(0.0f);
    return p.Select(p.Eq(in[1], zero), zero, p.Div(p.Mul(in[0], in[2]), in[1]));
  }, false);
}
std::vector<EwFragment> EwLogSumExpGrad(const EwOpView& v) {
  return EwReduceNorm(v, {"Out", GradVarName("Out")}, [](EwProgram& p, const std::vector<EwValue>& in) {
    return p.Mul(in[2], p.Exp(p.Sub(in[0], in[1])));
  }, false);
}

struct ReduceDef {
  std::string type, doc, grad_doc;
  std::vector<DataType> dtypes;
  KernelFn kernel, grad_kernel;
  bool grad_reads_out;
  EwLoweringFn ew, ew_grad;  // empty: kFramework
};

void AddReduce(OpRegistry& r, ReduceDef d) {
  const std::vector<AttrDef> attrs = {{"dim", AttrKind::kInts, Attribute(std::vector<int64_t>{0})},
                                      {"keep_dim", AttrKind::kBool, Attribute(false)},
                                      {"reduce_all", AttrKind::kBool, Attribute(false)}};
  OpInfo op;
  op.type = d.type;
  op.doc = d.doc;
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = attrs;
  op.infer_shape = InferReduce(d.dtypes);
  op.reference_kernel = std::move(d.kernel);
  const bool reads_out = d.grad_reads_out;
  op.grad_maker = [reads_out](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{
        MakeGradOp(fwd, {"X"}, reads_out ? std::vector<std::string>{"Out"} : std::vector<std::string>{}, {"Out"}, {"X"})};
  };
  op.jit = d.ew ? JitLowering::kReduction : JitLowering::kFramework;
  op.elementwise = std::move(d.ew);
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = d.type + "_grad";
  grad.doc = d.grad_doc;
  grad.inputs = {ops_a::Required("X")};
  if (reads_out) grad.inputs.push_back(ops_a::Required("Out"));
  grad.inputs.push_back(ops_a::Optional(GradVarName("Out")));
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = attrs;
  grad.infer_shape = [reads_out](InferShapeContext& ctx) { InferReduceGrad(ctx, reads_out); };
  grad.reference_kernel = std::move(d.grad_kernel);
  grad.jit = d.ew_grad ? JitLowering::kReduction : JitLowering::kFramework;
  grad.elementwise = std::move(d.ew_grad);
  r.Add(std::move(grad));
}

}  // namespace

void RegisterReduceNormOps(OpRegistry& r) {
  const std::string over = " over attr dim (as reduce_sum: negative dims count from the end, every dim when reduce_all "
                           "or dim is empty; keep_dim keeps them as 1)";
  AddReduce(r, {"reduce_prod", "Out = the product of X" + over + "; 1 for an empty group. f32, f64 (multiplied in "
                "double), i64, i32 (wrapping). JIT: framework",
                "Gradient of reduce_prod: X@GRAD = Out@GRAD * the product of the group's other elements (exact at "
                "zeros: one zero gets the product of the rest, the others 0). JIT: framework",
                kNumeric, ProdKernel, ProdGradKernel, false, nullptr, nullptr});
  AddReduce(r, {"reduce_l1", "Out = the sum of |X|" + over + "; f32, f64, i64, i32. JIT: a generated sum of |X| "
                "for f32",
                "Gradient of reduce_l1: X@GRAD = sign(X) * Out@GRAD (0 at X = 0)", kNumeric, L1Kernel,
                [](ExecContext& ctx) { PointwiseGradKernel(ctx, false, [](auto x, auto o, auto g) { return L1Term(x, o, g); }); },
                false, EwL1, EwL1Grad});
  AddReduce(r, {"reduce_l2", "Out = sqrt(the sum of X^2)" + over + "; f32, f64. JIT: framework (a square root after "
                "the sum)",
                "Gradient of reduce_l2: X@GRAD = X * Out@GRAD / Out, 0 where Out is 0", kFloat, L2Kernel,
                [](ExecContext& ctx) { PointwiseGradKernel(ctx, true, [](auto x, auto o, auto g) { return L2Term(x, o, g); }); },
                true, nullptr, EwL2Grad});
  AddReduce(r, {"logsumexp", "Out = log(the sum of exp(X))" + over + ", computed as m + log(sum(exp(X - m))) with "
                "m the maximum (Paddle's name; its axis/keepdim are dim/keep_dim here, as for every kiln reduction); "
                "-inf for an empty group or all -inf, +inf when any X is +inf, NaN with a NaN. f32, f64. JIT: "
                "framework (a maximum before the sum)",
                "Gradient of logsumexp: X@GRAD = Out@GRAD * exp(X - Out), softmax over the group", kFloat,
                LogSumExpKernel,
                [](ExecContext& ctx) {
                  PointwiseGradKernel(ctx, true, [](auto x, auto o, auto g) { return LogSumExpTerm(x, o, g); });
                },
                true, nullptr, EwLogSumExpGrad});
}

}  // namespace kiln
