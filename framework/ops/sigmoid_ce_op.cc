// sigmoid_cross_entropy_with_logits (Paddle's op) and its grad: binary
// cross-entropy on logits, elementwise, with an ignored label value and an
// optional normalisation by the number of elements that are not ignored.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_a::CheckSameDims;
using ops_a::CheckSameDtype;
using ops_a::Optional;
using ops_a::Required;

// The attributes, from an ExecContext, an InferShapeContext or an EwOpView.
struct CeAttrs {
  template <typename Ctx>
  explicit CeAttrs(const Ctx& ctx)
      : ignore_index(ctx.template Attr<int64_t>("ignore_index")), normalize(ctx.template Attr<bool>("normalize")) {}
  int64_t ignore_index;
  bool normalize;
};

// -label log(sigmoid(x)) - (1 - label) log(1 - sigmoid(x)), rewritten as
// max(x, 0) - x label + log(1 + e^-|x|): exp never overflows and no log is
// taken of a rounded 1 - sigmoid(x). NaN in x or label gives NaN.
template <typename T>
T Loss(T x, T label) {
  return ((x > T(0) ? x : T(0)) - x * label) + std::log1p(std::exp(-std::fabs(x)));
}

template <typename T>
T Sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// What every kept element is divided by: 1, or with normalize the number of
// labels that are not ignore_index, at least 1 (all ignored: Out is 0).
template <typename T>
T Normalizer(const T* label, int64_t n, T ignore, bool normalize) {
  if (!normalize) return T(1);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += label[i] != ignore;
  return T(kept > 0 ? kept : 1);
}

void CheckInputs(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  CheckSameDtype(ctx, "Label", dtype, "X");
  CheckSameDims(ctx, "Label", ctx.InputDims("X"), "X");
}

void InferForward(InferShapeContext& ctx) {
  CheckInputs(ctx);
  ctx.SetOutput("Out", ctx.InputDims("X"), ctx.InputDtype("X"));
}

void InferGrad(InferShapeContext& ctx) {
  CheckInputs(ctx);
  const std::string dout = GradVarName("Out");
  if (ctx.HasInput(dout)) {
    CheckSameDtype(ctx, dout, ctx.InputDtype("X"), "X");
    CheckSameDims(ctx, dout, ctx.InputDims("X"), "X");
  }
  ctx.SetOutput(GradVarName("X"), ctx.InputDims("X"), ctx.InputDtype("X"));
}

void ForwardKernel(ExecContext& ctx) {
  const CeAttrs a(ctx);
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  Tensor* out = ctx.Output("Out");
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* lp = label.data<T>();
    const int64_t n = x.numel();
    const T ignore = static_cast<T>(a.ignore_index);
    const T norm = Normalizer(lp, n, ignore, a.normalize);
    T* o = out->mutable_data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = lp[i] == ignore ? T(0) : Loss(xp[i], lp[i]) / norm;
  });
}

void GradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const CeAttrs a(ctx);
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    if (dout == nullptr) {  // no gradient flows into Out: zeros
      ops_a::ZeroFill<T>(dx);
      return;
    }
    const T* xp = x.data<T>();
    const T* lp = label.data<T>();
    const T* g = dout->data<T>();
    const int64_t n = x.numel();
    const T ignore = static_cast<T>(a.ignore_index);
    const T norm = Normalizer(lp, n, ignore, a.normalize);
    T* p = dx->mutable_data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = lp[i] == ignore ? T(0) : (Sigmoid(xp[i]) - lp[i]) * g[i] / norm;
  });
}

// value, or 0 where label == ignore: label - ignore is 0 exactly there (and
// NaN, which keeps the value, for a NaN label).
EwValue ZeroWhereIgnored(EwProgram& p, EwValue label, float ignore, EwValue value) {
  return p.Select(p.Sub(label, p.Const(ignore)), value, p.Const(0.0f));
}

// One fragment over X's dims reading `reads` (X and Label first) and writing
// `write`. With normalize there is none: the count of kept labels is a
// reduction over all of Label that must finish before the first element is
// written, which one generated pass cannot do, so such an op runs its
// framework kernel inside the cluster.
std::vector<EwFragment> Fragment(const EwOpView& v, const std::vector<std::string>& reads, const std::string& write,
                                 std::function<EwValue(EwProgram&, const std::vector<EwValue>&, float)> emit) {
  const CeAttrs a(v);
  if (a.normalize || write.empty()) return {};
  EwFragment f;
  for (const std::string& r : reads) {
    if (r.empty()) return {};
    f.reads.push_back(v.Full(r));
  }
  f.iter = v.DimsOf(reads[0]);
  f.writes = {v.Full(write)};
  const float ignore = static_cast<float>(a.ignore_index);
  f.emit = [emit, ignore](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{emit(p, in, ignore)};
  };
  return {f};
}

std::vector<EwFragment> EwForward(const EwOpView& v) {
  return Fragment(v, {v.In("X"), v.In("Label")}, v.Out("Out"),
                  [](EwProgram& p, const std::vector<EwValue>& in, float ignore) {
                    const EwValue x = in[0], label = in[1];
                    const EwValue loss = p.Add(p.Sub(p.Relu(x), p.Mul(x, label)), p.Log1p(p.Exp(p.Neg(p.Abs(x)))));
                    return ZeroWhereIgnored(p, label, ignore, loss);
                  });
}

std::vector<EwFragment> EwBackward(const EwOpView& v) {
  return Fragment(v, {v.In("X"), v.In("Label"), v.In(GradVarName("Out"))}, v.Out(GradVarName("X")),
                  [](EwProgram& p, const std::vector<EwValue>& in, float ignore) {
                    const EwValue x = in[0], label = in[1], dout = in[2];
                    return ZeroWhereIgnored(p, label, ignore, p.Mul(p.Sub(p.Sigmoid(x), label), dout));
                  });
}

std::vector<AttrDef> Attrs() {
  return {{"ignore_index", AttrKind::kInt, Attribute(int64_t{-100})}, {"normalize", AttrKind::kBool, Attribute(false)}};
}

}  // namespace

void RegisterSigmoidCrossEntropyOps(OpRegistry& r) {
  OpInfo fwd;
  fwd.type = "sigmoid_cross_entropy_with_logits";
  fwd.doc =
      "Out = max(X, 0) - X * Label + log1p(exp(-|X|)) elementwise (binary cross-entropy on logits, as "
      "torch.nn.functional.binary_cross_entropy_with_logits with reduction='none'); Label (X's dtype and dims) holds "
      "probabilities. Out is 0 where Label equals ignore_index (compared as floats); with normalize, every element is "
      "divided by the number of elements whose Label is not ignore_index (at least 1). JIT: a generated kernel; with "
      "normalize the framework kernel inside the cluster (the count must be known before any element is written)";
  fwd.inputs = {Required("X"), Required("Label")};
  fwd.outputs = {Required("Out")};
  fwd.attrs = Attrs();
  fwd.infer_shape = InferForward;
  fwd.reference_kernel = ForwardKernel;
  fwd.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X", "Label"}, {}, {"Out"}, {"X"})};
  };
  fwd.no_grad_inputs = {"Label"};
  fwd.jit = JitLowering::kElementwise;
  fwd.elementwise = EwForward;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = "sigmoid_cross_entropy_with_logits_grad";
  grad.doc =
      "Gradient of sigmoid_cross_entropy_with_logits w.r.t. X: X@GRAD = (sigmoid(X) - Label) * Out@GRAD, 0 where "
      "Label equals ignore_index, divided by the same count with normalize. Label gets no gradient";
  grad.inputs = {Required("X"), Required("Label"), Optional(GradVarName("Out"))};
  grad.outputs = {Optional(GradVarName("X"))};
  grad.attrs = Attrs();
  grad.infer_shape = InferGrad;
  grad.reference_kernel = GradKernel;
  grad.jit = JitLowering::kElementwise;
  grad.elementwise = EwBackward;
  r.Add(std::move(grad));
}

}  // namespace kiln
