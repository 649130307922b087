// The registry entries of unary elementwise ops (activations, math
// functions) from one functor each: reference kernels, shape inference, grad
// op and the JIT's elementwise lowering of the op and its grad.
//
// A functor Act is constructed from the op's attrs (an ExecContext, an
// InferShapeContext or the JIT's EwOpView: all have Attr<T>(name)) and has
//   static constexpr const char* kGradReads;  // "X", "Out" or nullptr (only Out@GRAD)
//   template <typename T> T Fwd(T x) const;   // the op, for T = float and double
//   template <typename T> T Grad(T v, T dout) const;  // X@GRAD; v is kGradReads' value
//   EwValue Ew(EwProgram&, EwValue x) const;  // the same as EwProgram, for the JIT
//   EwValue EwGrad(EwProgram&, EwValue v, EwValue dout) const;
// and optionally `static void CheckAttrs(const InferShapeContext&)`, which
// shape inference of the op and its grad calls to refuse bad attribute values,
// and `static constexpr bool kIntegers = true` when the forward also takes i64
// and i32 X (Fwd<int64_t>, Fwd<int32_t>; the grad stays f32/f64).
// An Act without Ew (EwGrad) has no elementwise form: the op (its grad) is
// JitLowering::kFramework, so its framework kernel runs inside clusters.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"

namespace kiln::unary_op {

template <typename Act, typename = void>
struct HasCheckAttrs : std::false_type {};
template <typename Act>
struct HasCheckAttrs<Act, std::void_t<decltype(Act::CheckAttrs(std::declval<const InferShapeContext&>()))>>
    : std::true_type {};

template <typename Act>
void CheckAttrs(const InferShapeContext& ctx) {
  if constexpr (HasCheckAttrs<Act>::value) Act::CheckAttrs(ctx);
}

template <typename Act, typename = void>
struct HasEw : std::false_type {};
template <typename Act>
struct HasEw<Act, std::void_t<decltype(std::declval<const Act&>().Ew(std::declval<EwProgram&>(), EwValue{}))>>
    : std::true_type {};

template <typename Act, typename = void>
struct HasEwGrad : std::false_type {};
template <typename Act>
struct HasEwGrad<Act, std::void_t<decltype(std::declval<const Act&>().EwGrad(std::declval<EwProgram&>(), EwValue{},
                                                                              EwValue{}))>> : std::true_type {};

template <typename Act, typename = void>
struct TakesIntegers : std::false_type {};
template <typename Act>
struct TakesIntegers<Act, std::void_t<decltype(Act::kIntegers)>> : std::bool_constant<Act::kIntegers> {};

template <typename Act>
void ActivationKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const Act act(ctx);
  auto body = [&](auto tag) {
    using T = decltype(tag);
    // Out may be X's buffer (in place): element i is read before it is written.
    T* o = out->mutable_data<T>();
    const T* xp = x.data<T>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = act.template Fwd<T>(xp[i]);
  };
  if constexpr (TakesIntegers<Act>::value) {
    ops::DispatchNumeric(ctx, x.dtype(), "input X", body);
  } else {
    ops_a::DispatchFloat(ctx, x.dtype(), "input X", body);
  }
}

template <typename Act>
void InferActivation(InferShapeContext& ctx) {
  CheckAttrs<Act>(ctx);
  DataType dtype;
  if constexpr (TakesIntegers<Act>::value) {
    dtype = ops::CheckInputDtype(ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32});
  } else {
    dtype = ops_a::CheckFloatInput(ctx, "X");
  }
  ctx.SetOutput("Out", ctx.InputDims("X"), dtype);
}

template <typename Act>
void InferActivationGrad(InferShapeContext& ctx) {
  CheckAttrs<Act>(ctx);
  const std::string dout = GradVarName("Out");
  const bool has_dout = ctx.HasInput(dout);
  if (Act::kGradReads == nullptr && !has_dout) {
    ctx.Fail("input ", dout, " is required (it gives X@GRAD its dims)");
  }
  const std::string src = Act::kGradReads ? Act::kGradReads : dout;
  const DataType dtype = ops_a::CheckFloatInput(ctx, src);
  const Dims dims = ctx.InputDims(src);
  if (has_dout && src != dout) {
    ops_a::CheckSameDtype(ctx, dout, dtype, src);
    ops_a::CheckSameDims(ctx, dout, dims, src);
  }
  ctx.SetOutput(GradVarName("X"), dims, dtype);
}

template <typename Act>
void ActivationGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  const Tensor* v = nullptr;
  if constexpr (Act::kGradReads != nullptr) {
    v = &ctx.Input(Act::kGradReads);
  } else {
    v = &ctx.Input(GradVarName("Out"));
  }
  const Act act(ctx);
  ops_a::DispatchFloat(ctx, v->dtype(), "input", [&](auto tag) {
    using T = decltype(tag);
    if (dout == nullptr) {  // no gradient flows into Out: zeros
      ops_a::ZeroFill<T>(dx);
      return;
    }
    T* p = dx->mutable_data<T>();
    const T* vp = v->data<T>();
    const T* g = dout->data<T>();
    const int64_t n = v->numel();
    for (int64_t i = 0; i < n; ++i) p[i] = act.template Grad<T>(vp[i], g[i]);
  });
}

// The JIT's form: one fragment over X's (dOut's) dims.
template <typename Act>
std::vector<EwFragment> EwForward(const EwOpView& v) {
  const std::string x = v.In("X"), out = v.Out("Out");
  if (x.empty() || out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x)};
  f.writes = {v.Full(out)};
  const Act act(v);
  f.emit = [act](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{act.Ew(p, in[0])}; };
  return {f};
}

template <typename Act>
std::vector<EwFragment> EwBackward(const EwOpView& v) {
  const std::string dout = v.In(GradVarName("Out")), dx = v.Out(GradVarName("X"));
  std::string src;
  if constexpr (Act::kGradReads != nullptr) {
    src = v.In(Act::kGradReads);
    if (src.empty()) return {};
  }
  if (dout.empty() || dx.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(dout);
  f.reads = {v.Full(dout)};
  if (!src.empty()) f.reads.push_back(v.Full(src));
  f.writes = {v.Full(dx)};
  const Act act(v);
  f.emit = [act](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{act.EwGrad(p, in.size() > 1 ? in[1] : -1, in[0])};
  };
  return {f};
}

// Registers `type` and `type`_grad (documented as `grad_doc`, or "gradient
// of `type`" when empty): reference kernels for f32 and f64 (and i64, i32
// for kIntegers), shape inference, the grad maker, X -> Out in place, and
// the JIT's elementwise lowering of each that has one (else kFramework).
template <typename Act>
void RegisterUnaryOp(OpRegistry& r, const std::string& type, const std::string& doc, std::vector<AttrDef> attrs,
                     const std::string& grad_doc = "") {
  OpInfo fwd;
  fwd.type = type;
  fwd.doc = doc;
  fwd.inputs = {ops_a::Required("X")};
  fwd.outputs = {ops_a::Required("Out")};
  fwd.attrs = attrs;
  fwd.infer_shape = InferActivation<Act>;
  fwd.reference_kernel = ActivationKernel<Act>;
  fwd.grad_maker = [](const proto::OpDesc& op) {
    std::vector<std::string> fwd_inputs, fwd_outputs;
    if (Act::kGradReads != nullptr && std::string(Act::kGradReads) == "X") fwd_inputs = {"X"};
    if (Act::kGradReads != nullptr && std::string(Act::kGradReads) == "Out") fwd_outputs = {"Out"};
    return std::vector<proto::OpDesc>{MakeGradOp(op, fwd_inputs, fwd_outputs, {"Out"}, {"X"})};
  };
  fwd.inplace = {{"X", "Out"}};
  fwd.jit = JitLowering::kFramework;
  if constexpr (HasEw<Act>::value) {
    fwd.jit = JitLowering::kElementwise;
    fwd.elementwise = EwForward<Act>;
  }
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = type + "_grad";
  grad.doc = grad_doc.empty() ? "gradient of " + type : grad_doc;
  if (Act::kGradReads != nullptr) grad.inputs.push_back(ops_a::Required(Act::kGradReads));
  grad.inputs.push_back(ops_a::Optional(GradVarName("Out")));
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = std::move(attrs);
  grad.infer_shape = InferActivationGrad<Act>;
  grad.reference_kernel = ActivationGradKernel<Act>;
  grad.jit = JitLowering::kFramework;
  if constexpr (HasEwGrad<Act>::value) {
    grad.jit = JitLowering::kElementwise;
    grad.elementwise = EwBackward<Act>;
  }
  r.Add(std::move(grad));
}

}  // namespace kiln::unary_op
