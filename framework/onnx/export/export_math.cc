// Elementwise ops (Paddle's axis broadcast as ONNX's trailing one), unary
// activations, clip, leaky_relu, hard_sigmoid, gelu (decomposed: opset 17 has no Gelu), scale and the
// reductions, onto ONNX.
#include <cmath>

#include "framework/onnx/export/export_ops.h"

namespace kiln::onnx_export {
namespace {

// Paddle's elementwise axis lines Y's dims up with X's from `axis`; ONNX
// aligns them from the right, so Y gets the trailing 1s X has after it.
std::string AlignedY(ExportContext& ctx) {
  const std::string y = ctx.In("Y");
  const int64_t axis = ctx.Int("axis", -1);
  const int64_t xr = static_cast<int64_t>(ctx.InDims("X").size());
  const int64_t yr = static_cast<int64_t>(ctx.InDims("Y").size());
  if (axis == -1 || axis + yr == xr) return y;
  if (axis < 0 || axis + yr > xr) ctx.Refuse("axis ", axis, " does not place Y (rank ", yr, ") inside X (rank ", xr, ")");
  std::vector<int64_t> axes;
  for (int64_t a = yr; a < xr - axis; ++a) axes.push_back(a);
  const std::string out = ctx.Temp("y_aligned");
  ctx.Node("Unsqueeze", {y, ctx.Int64s("axes", axes)}, {out});
  return out;
}

template <const char* kOnnx>
void Binary(ExportContext& ctx) {
  const std::string y = AlignedY(ctx);
  ctx.Node(kOnnx, {ctx.In("X"), y}, {ctx.Out("Out")});
}

template <const char* kOnnx>
void Unary(ExportContext& ctx) {
  ctx.Node(kOnnx, {ctx.In("X")}, {ctx.Out("Out")});
}

constexpr char kAdd[] = "Add", kSub[] = "Sub", kMul[] = "Mul", kDiv[] = "Div", kMax[] = "Max", kMin[] = "Min",
               kPow[] = "Pow";
constexpr char kRelu[] = "Relu", kSigmoid[] = "Sigmoid", kTanh[] = "Tanh", kExp[] = "Exp", kLog[] = "Log",
               kSqrt[] = "Sqrt", kAbs[] = "Abs", kErf[] = "Erf", kReciprocal[] = "Reciprocal";

// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)); approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void Gelu(ExportContext& ctx) {
  const std::string x = ctx.In("X");
  // a (*) b as a new value.
  const auto mul = [&ctx](const std::string& a, const std::string& b, const char* what) {
    const std::string out = ctx.Temp(what);
    ctx.Node("Mul", {a, b}, {out});
    return out;
  };
  std::string inner;
  if (ctx.Bool("approximate", false)) {
    const std::string x3 = mul(mul(x, x, "x2"), x, "x3");
    const std::string poly = ctx.Temp("poly");
    ctx.Node("Add", {x, mul(x3, ctx.FloatScalar("c", 0.044715f), "cx3")}, {poly});
    const float k = std::sqrt(2.0f / static_cast<float>(M_PI));
    inner = ctx.Temp("tanh");
    ctx.Node("Tanh", {mul(poly, ctx.FloatScalar("k", k), "poly_scaled")}, {inner});
  } else {
    inner = ctx.Temp("erf");
    ctx.Node("Erf", {mul(x, ctx.FloatScalar("rsqrt2", static_cast<float>(M_SQRT1_2)), "x_scaled")}, {inner});
  }
  const std::string one_plus = ctx.Temp("one_plus");
  ctx.Node("Add", {inner, ctx.FloatScalar("one", 1.0f)}, {one_plus});
  ctx.Node("Mul", {mul(x, ctx.FloatScalar("half", 0.5f), "half_x"), one_plus}, {ctx.Out("Out")});
}

// Out = scale * X + bias, or scale * (X + bias).
void Scale(ExportContext& ctx) {
  const float scale = ctx.Float("scale", 1.0f), bias = ctx.Float("bias", 0.0f);
  const bool after = ctx.Bool("bias_after_scale", true);
  const std::string x = ctx.In("X");
  if (bias == 0.0f) {
    ctx.Node("Mul", {x, ctx.FloatScalar("scale", scale)}, {ctx.Out("Out")});
    return;
  }
  const std::string mid = ctx.Temp(after ? "scaled" : "biased");
  if (after) {
    ctx.Node("Mul", {x, ctx.FloatScalar("scale", scale)}, {mid});
    ctx.Node("Add", {mid, ctx.FloatScalar("bias", bias)}, {ctx.Out("Out")});
  } else {
    ctx.Node("Add", {x, ctx.FloatScalar("bias", bias)}, {mid});
    ctx.Node("Mul", {mid, ctx.FloatScalar("scale", scale)}, {ctx.Out("Out")});
  }
}

void Clip(ExportContext& ctx) {
  const std::string lo = ctx.FloatScalar("min", ctx.Float("min", 0.0f));
  const std::string hi = ctx.FloatScalar("max", ctx.Float("max", 0.0f));
  ctx.Node("Clip", {ctx.In("X"), lo, hi}, {ctx.Out("Out")});
}

void LeakyRelu(ExportContext& ctx) {
  SetAttr(ctx.Node("LeakyRelu", {ctx.In("X")}, {ctx.Out("Out")}), "alpha", ctx.Float("alpha", 0.02f));
}

void HardSigmoid(ExportContext& ctx) {
  onnx::NodeProto* node = ctx.Node("HardSigmoid", {ctx.In("X")}, {ctx.Out("Out")});
  SetAttr(node, "alpha", ctx.Float("slope", 0.2f));
  SetAttr(node, "beta", ctx.Float("offset", 0.5f));
}

// reduce_*: over `dim` (negative from the end), or everything with
// reduce_all; ReduceSum takes its axes as an input from opset 13, the
// others as an attribute until opset 18.
template <const char* kOnnx>
void Reduce(ExportContext& ctx) {
  const bool all = ctx.Bool("reduce_all", false);
  const std::vector<int64_t> dims = ctx.Ints("dim", {0});
  std::vector<std::string> inputs = {ctx.In("X")};
  const bool axes_input = std::string(kOnnx) == "ReduceSum";
  if (!all && axes_input) inputs.push_back(ctx.Int64s("axes", dims));
  onnx::NodeProto* node = ctx.Node(kOnnx, inputs, {ctx.Out("Out")});
  SetAttr(node, "keepdims", int64_t{ctx.Bool("keep_dim", false) ? 1 : 0});
  if (!all && !axes_input) SetAttr(node, "axes", dims);
}

constexpr char kReduceMean[] = "ReduceMean", kReduceSum[] = "ReduceSum", kReduceMax[] = "ReduceMax",
               kReduceMin[] = "ReduceMin";

}  // namespace

void AddMathExporters(ExportTable* t) {
  (*t)["elementwise_add"] = Binary<kAdd>;
  (*t)["elementwise_sub"] = Binary<kSub>;
  (*t)["elementwise_mul"] = Binary<kMul>;
  (*t)["elementwise_div"] = Binary<kDiv>;
  (*t)["elementwise_max"] = Binary<kMax>;
  (*t)["elementwise_min"] = Binary<kMin>;
  (*t)["elementwise_pow"] = Binary<kPow>;
  (*t)["relu"] = Unary<kRelu>;
  (*t)["sigmoid"] = Unary<kSigmoid>;
  (*t)["tanh"] = Unary<kTanh>;
  (*t)["exp"] = Unary<kExp>;
  (*t)["log"] = Unary<kLog>;
  (*t)["sqrt"] = Unary<kSqrt>;
  (*t)["abs"] = Unary<kAbs>;
  (*t)["erf"] = Unary<kErf>;
  (*t)["reciprocal"] = Unary<kReciprocal>;
  (*t)["gelu"] = Gelu;
  (*t)["clip"] = Clip;
  (*t)["leaky_relu"] = LeakyRelu;
  (*t)["hard_sigmoid"] = HardSigmoid;
  (*t)["scale"] = Scale;
  (*t)["reduce_mean"] = Reduce<kReduceMean>;
  (*t)["reduce_sum"] = Reduce<kReduceSum>;
  (*t)["reduce_max"] = Reduce<kReduceMax>;
  (*t)["reduce_min"] = Reduce<kReduceMin>;
}

}  // namespace kiln::onnx_export
