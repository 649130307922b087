// dropout and dropout_grad. The mask is a pure function of (state, element
// index), so it is the same on any number of threads and resumes exactly from
// a checkpointed state var.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dropout_hash.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

constexpr const char* kUpscale = "upscale_in_train";
constexpr const char* kDowngrade = "downgrade_in_infer";

// Below this many elements the kernel stays on one thread (the hash costs a
// few ns an element; thread start-up would dominate).
constexpr int64_t kParallelMinElements = int64_t{1} << 16;

struct DropoutAttrs {
  double p;
  bool is_test;
  bool upscale;  // upscale_in_train, else downgrade_in_infer

  // The factor of every element at test time (and of kept ones in training).
  double TestFactor() const { return upscale ? 1.0 : 1.0 - p; }
  double KeptFactor() const { return upscale ? (p < 1.0 ? 1.0 / (1.0 - p) : 0.0) : 1.0; }
};

template <typename Ctx>
DropoutAttrs ReadAttrs(const Ctx& ctx) {
  DropoutAttrs a;
  a.p = ctx.template Attr<float>("dropout_prob");
  a.is_test = ctx.template Attr<bool>("is_test");
  a.upscale = ctx.template Attr<std::string>("dropout_implementation") == kUpscale;
  return a;
}

void CheckAttrs(const InferShapeContext& ctx) {
  const float p = ctx.Attr<float>("dropout_prob");
  if (!(p >= 0.0f && p <= 1.0f)) ctx.Fail("attribute dropout_prob: expected a value in [0, 1], got ", p);
  const std::string& impl = ctx.Attr<std::string>("dropout_implementation");
  if (impl != kUpscale && impl != kDowngrade) {
    ctx.Fail("attribute dropout_implementation: expected \"", kUpscale, "\" or \"", kDowngrade, "\", got \"", impl,
             "\"");
  }
}

void DropoutInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  CheckAttrs(ctx);
  if (ctx.HasInput("Seed")) {
    if (ctx.InputDtype("Seed") != DataType::kINT64) {
      ctx.Fail("input Seed: expected dtype i64 (the dropout state), got ", DataTypeName(ctx.InputDtype("Seed")));
    }
    if (!DimsCompatible(ctx.InputDims("Seed"), {1})) {
      ctx.Fail("input Seed: expected dims [1], got ", DimsToString(ctx.InputDims("Seed")));
    }
  } else if (ctx.HasOutput("SeedOut")) {
    ctx.Fail("output SeedOut needs input Seed (the state it advances)");
  }
  const Dims x = ctx.InputDims("X");
  ctx.SetOutput("Out", x, dtype);
  if (ctx.HasOutput("Mask")) ctx.SetOutput("Mask", x, dtype);
  if (ctx.HasOutput("SeedOut")) ctx.SetOutput("SeedOut", {1}, DataType::kINT64);
}

void DropoutGradInferShape(InferShapeContext& ctx) {
  CheckAttrs(ctx);
  const bool has_mask = ctx.HasInput("Mask");
  const bool has_dout = ctx.HasInput("Out@GRAD");
  if (!has_mask && !ctx.Attr<bool>("is_test")) ctx.Fail("input Mask is required in training (is_test = false)");
  if (!has_mask && !has_dout) ctx.Fail("input Mask or Out@GRAD is required (it gives X@GRAD its dims)");
  const char* src = has_mask ? "Mask" : "Out@GRAD";
  const DataType dtype = ops_b::CheckFloatInput(ctx, src);
  const Dims dims = ctx.InputDims(src);
  if (has_mask && has_dout) {
    ops_b::CheckSameDtype(ctx, "Out@GRAD", dtype, "Mask");
    if (!DimsCompatible(ctx.InputDims("Out@GRAD"), dims)) {
      ctx.Fail("input Out@GRAD: expected dims ", DimsToString(dims), " (as Mask), got ",
               DimsToString(ctx.InputDims("Out@GRAD")));
    }
  }
  if (ctx.HasOutput("X@GRAD")) ctx.SetOutput("X@GRAD", dims, dtype);
}

template <typename T>
void DropoutKernel(ExecContext& ctx) {
  const DropoutAttrs a = ReadAttrs(ctx);
  const Tensor& xt = ctx.Input("X");
  const int64_t n = xt.numel();
  const T* x = xt.data<T>();
  // Out may be X's buffer: element i is read before it is written.
  T* out = ctx.Output("Out")->mutable_data<T>();
  Tensor* mask_t = ctx.OutputOrNull("Mask");
  T* mask = mask_t != nullptr ? mask_t->mutable_data<T>() : nullptr;
  const Tensor* seed_t = ctx.InputOrNull("Seed");
  const uint64_t state =
      static_cast<uint64_t>(seed_t != nullptr ? seed_t->data<int64_t>()[0] : ctx.Attr<int64_t>("seed"));
  Tensor* seed_out = ctx.OutputOrNull("SeedOut");
  if (a.is_test) {
    const T f = static_cast<T>(a.TestFactor());
    for (int64_t i = 0; i < n; ++i) {
      out[i] = x[i] * f;
      if (mask) mask[i] = f;
    }
    // Inference draws nothing: the state stays where it is.
    if (seed_out != nullptr) seed_out->mutable_data<int64_t>()[0] = static_cast<int64_t>(state);
    return;
  }
  const dropout_hash::KeepTest keep(state, a.p);
  const T kept = static_cast<T>(a.KeptFactor());
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const T f = keep(static_cast<uint64_t>(i)) ? kept : T(0);
    out[i] = x[i] * f;
    if (mask) mask[i] = f;
  }
  if (seed_out != nullptr) seed_out->mutable_data<int64_t>()[0] = static_cast<int64_t>(dropout_hash::NextState(state));
}

template <typename T>
void DropoutGradKernel(ExecContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (dxt == nullptr) return;
  const Tensor* dout_t = ctx.InputOrNull("Out@GRAD");
  if (dout_t == nullptr) {  // no gradient flows into Out: zeros
    ops_b::ZeroFill<T>(dxt);
    return;
  }
  const Tensor* mask_t = ctx.InputOrNull("Mask");
  const T* g = dout_t->data<T>();
  T* dx = dxt->mutable_data<T>();
  const int64_t n = dout_t->numel();
  if (mask_t != nullptr) {
    const T* m = mask_t->data<T>();
    for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * m[i];
    return;
  }
  // is_test without a Mask (InferShape refuses training without one).
  const T f = static_cast<T>(ReadAttrs(ctx).TestFactor());
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * f;
}

// The JIT's form of the grad: X@GRAD = Out@GRAD * Mask, or times the
// constant test factor when there is no Mask.
std::vector<EwFragment> EwDropoutGrad(const EwOpView& v) {
  const std::string dout = v.In("Out@GRAD"), mask = v.In("Mask"), dx = v.Out("X@GRAD");
  if (dout.empty() || dx.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(dout);
  f.reads = {v.Full(dout)};
  f.writes = {v.Full(dx)};
  if (!mask.empty()) {
    f.reads.push_back(v.Full(mask));
    f.emit = [](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{p.Mul(in[0], in[1])}; };
    return {f};
  }
  const DropoutAttrs a = ReadAttrs(v);
  if (!a.is_test) return {};
  const float factor = static_cast<float>(a.TestFactor());
  f.emit = [factor](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{p.Mul(in[0], p.Const(factor))};
  };
  return {f};
}

std::vector<AttrDef> DropoutAttrDefs() {
  return {{"dropout_prob", AttrKind::kFloat, Attribute(0.5f)},
          {"is_test", AttrKind::kBool, Attribute(false)},
          {"seed", AttrKind::kInt, Attribute(int64_t{0})},
          {"dropout_implementation", AttrKind::kString, Attribute(std::string(kUpscale))}};
}

constexpr const char* kDropoutDoc =
    "Training: each element is kept with probability 1 - dropout_prob and zeroed otherwise; kept ones are "
    "scaled by 1/(1 - dropout_prob) for upscale_in_train, left as they are for downgrade_in_infer (dropout_prob "
    "0: identity, 1: all zeros). is_test: Out = X (upscale_in_train) or X * (1 - dropout_prob) "
    "(downgrade_in_infer). Mask (X's dtype) holds the factor each element was multiplied by (0 or 1/(1-p), or 0 "
    "or 1; the constant factor at test time), so X@GRAD = Out@GRAD * Mask. Randomness: element i is kept when "
    "a counter-based hash (SplitMix64's output function) of (state, i) is at least p; the same state gives the "
    "same mask on any thread count. The state is input Seed (int64 [1], a persistable var) when given, and "
    "SeedOut (the same var) receives the next state, Seed + 0x9E3779B97F4A7C15 (wrapping int64), so every run "
    "draws a new mask and a checkpointed state resumes the sequence; is_test leaves the state unchanged. Without "
    "Seed the state is attribute seed: the same mask on every run";

}  // namespace

void RegisterDropoutOps(OpRegistry& r) {
  OpInfo op;
  op.type = "dropout";
  op.doc = kDropoutDoc;
  op.inputs = {{"X"}, {"Seed", false, true}};
  op.outputs = {{"Out"}, {"Mask", false, true}, {"SeedOut", false, true}};
  op.attrs = DropoutAttrDefs();
  op.infer_shape = DropoutInferShape;
  op.reference_kernel = [](ExecContext& ctx) {
    ops_b::DispatchFloat(ctx, "X", [&](auto tag) { DropoutKernel<decltype(tag)>(ctx); });
  };
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {}, {"Mask"}, {"Out"}, {"X"})};
  };
  op.inplace = {{"X", "Out"}, {"Seed", "SeedOut"}};
  op.no_grad_inputs = {"Seed"};
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "dropout_grad";
  grad.doc =
      "Gradient of dropout: X@GRAD = Out@GRAD * Mask (Out@GRAD times the test factor when is_test and "
      "there is no Mask)";
  grad.inputs = {{"Mask", false, true}, {"Out@GRAD", false, true}};
  grad.outputs = {{"X@GRAD", false, true}};
  grad.attrs = DropoutAttrDefs();
  grad.infer_shape = DropoutGradInferShape;
  grad.reference_kernel = [](ExecContext& ctx) {
    const char* slot = ctx.InputOrNull("Mask") != nullptr ? "Mask" : "Out@GRAD";
    ops_b::DispatchFloat(ctx, slot, [&](auto tag) { DropoutGradKernel<decltype(tag)>(ctx); });
  };
  grad.inplace = {{"Out@GRAD", "X@GRAD"}};
  grad.jit = JitLowering::kElementwise;
  grad.elementwise = EwDropoutGrad;
  r.Add(std::move(grad));
}

}  // namespace kiln
