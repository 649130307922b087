#include "compiler/ew_program.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "framework/error.h"

namespace kiln {
namespace compiler {

// ---------------------------------------------------------------------------
// EwLayout

int64_t EwLayout::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

bool EwLayout::IsReduction(int output) const {
  const EwOutput& o = outputs[output];
  for (int d = 0; d < rank; ++d) {
    if (dims[d] > 1 && o.strides[d] == 0) return true;
  }
  return false;
}

bool EwLayout::IsInnerReduction(int output) const {
  return dims[rank - 1] > 1 && outputs[output].strides[rank - 1] == 0;
}

namespace {

int64_t Extent(const EwLayout& layout, const EwOperand& op) {
  int64_t extent = 1;
  for (int d = 0; d < layout.rank; ++d) {
    if (layout.dims[d] == 0) {
      if (op.strides[d] != 0) return 0;
      continue;
    }
    extent += (layout.dims[d] - 1) * op.strides[d];
  }
  return extent;
}

std::string StridesToString(const EwLayout& layout, const EwOperand& op) {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < layout.rank; ++d) os << (d ? "," : "") << op.strides[d];
  os << "]";
  return os.str();
}

}  // namespace

int64_t EwLayout::InputExtent(int input) const { return Extent(*this, inputs[input]); }
int64_t EwLayout::OutputExtent(int output) const { return Extent(*this, outputs[output]); }

std::string EwLayout::ToString() const {
  std::ostringstream os;
  os << "dims=[";
  for (int d = 0; d < rank; ++d) os << (d ? "," : "") << dims[d];
  os << "]";
  for (size_t k = 0; k < inputs.size(); ++k) os << " in" << k << "=" << StridesToString(*this, inputs[k]);
  for (size_t k = 0; k < outputs.size(); ++k) {
    os << " out" << k << "=" << StridesToString(*this, outputs[k]) << (IsReduction(static_cast<int>(k)) ? "+" : "");
  }
  return os.str();
}

void EwLayout::Validate() const {
  if (rank < 1 || rank > kEwMaxRank) ThrowInvalidArgument("ew layout: rank must be in [1,", kEwMaxRank, "], got ", rank);
  for (int d = 0; d < rank; ++d) {
    if (dims[d] < 0) ThrowInvalidArgument("ew layout: dim ", d, " is negative: ", ToString());
  }
  if (outputs.empty()) ThrowInvalidArgument("ew layout: no outputs: ", ToString());
  auto check = [&](const EwOperand& op, const char* kind, size_t k) {
    for (int d = 0; d < rank; ++d) {
      if (op.strides[d] < 0) ThrowInvalidArgument("ew layout: ", kind, k, " has a negative stride: ", ToString());
    }
    if (op.strides[rank - 1] > 1) {
      ThrowInvalidArgument("ew layout: ", kind, k, " inner stride must be 0 or 1: ", ToString());
    }
  };
  for (size_t k = 0; k < inputs.size(); ++k) check(inputs[k], "in", k);
  for (size_t k = 0; k < outputs.size(); ++k) check(outputs[k], "out", k);
}

EwLayout CollapseLayout(const Dims& iter_dims, const std::vector<Dims>& input_dims,
                        const std::vector<Dims>& output_dims) {
  const size_t rank = iter_dims.size();
  std::vector<const Dims*> operands;
  for (const Dims& d : input_dims) operands.push_back(&d);
  for (const Dims& d : output_dims) operands.push_back(&d);
  for (size_t k = 0; k < operands.size(); ++k) {
    const bool is_input = k < input_dims.size();
    const size_t idx = is_input ? k : k - input_dims.size();
    const Dims& od = *operands[k];
    if (od.size() != rank) {
      ThrowInvalidArgument("ew layout: ", is_input ? "input " : "output ", idx, " dims ", DimsToString(od),
                           " must have the iteration rank ", rank, " (iteration dims ", DimsToString(iter_dims),
                           ")");
    }
    for (size_t d = 0; d < rank; ++d) {
      if (od[d] != iter_dims[d] && od[d] != 1) {
        ThrowInvalidArgument("ew layout: ", is_input ? "input " : "output ", idx, " dims ", DimsToString(od),
                             " do not broadcast to iteration dims ", DimsToString(iter_dims));
      }
    }
  }
  int64_t numel = 1;
  for (int64_t d : iter_dims) {
    if (d < 0) ThrowInvalidArgument("ew layout: iteration dims must be known, got ", DimsToString(iter_dims));
    numel *= d;
  }

  // Per kept dim: its size and every operand's element stride (0 where the
  // operand has size 1 there).
  struct Dim {
    int64_t size;
    std::vector<int64_t> strides;
  };
  std::vector<Dim> kept;
  for (size_t d = 0; d < rank; ++d) {
    if (iter_dims[d] == 1) continue;
    Dim dim{iter_dims[d], {}};
    for (const Dims* od : operands) {
      int64_t stride = 1;
      for (size_t e = d + 1; e < rank; ++e) stride *= (*od)[e];
      dim.strides.push_back((*od)[d] == 1 ? 0 : stride);
    }
    kept.push_back(std::move(dim));
  }
  // Merge d into d+1 when every operand walks both as one dim. A size-0 dim
  // never merges (the extents of reduction outputs must survive).
  std::vector<Dim> merged;
  for (Dim& dim : kept) {
    if (!merged.empty() && numel != 0) {
      Dim& prev = merged.back();
      bool same = true;
      for (size_t k = 0; k < operands.size(); ++k) same &= prev.strides[k] == dim.strides[k] * dim.size;
      if (same) {
        prev.size *= dim.size;
        prev.strides = dim.strides;
        continue;
      }
    }
    merged.push_back(std::move(dim));
  }
  if (merged.size() > static_cast<size_t>(kEwMaxRank)) {
    std::ostringstream os;
    for (size_t k = 0; k < operands.size(); ++k) os << " " << DimsToString(*operands[k]);
    ThrowUnimplemented("ew layout: iteration dims ", DimsToString(iter_dims), " with operands", os.str(),
                       " collapse to ", merged.size(), " dims, more than ", kEwMaxRank);
  }
  EwLayout layout;
  layout.inputs.resize(input_dims.size());
  layout.outputs.resize(output_dims.size());
  if (merged.empty()) return layout;  // one point: rank 1, dims [1], strides 0
  layout.rank = static_cast<int>(merged.size());
  for (size_t d = 0; d < merged.size(); ++d) {
    layout.dims[d] = merged[d].size;
    for (size_t k = 0; k < operands.size(); ++k) {
      EwOperand& op = k < input_dims.size() ? layout.inputs[k] : layout.outputs[k - input_dims.size()];
      op.strides[d] = merged[d].strides[k];
    }
  }
  return layout;
}

// ---------------------------------------------------------------------------
// EwProgram

const char* EwOpName(EwOp op) {
  switch (op) {
    case EwOp::kLoad: return "load";
    case EwOp::kConst: return "const";
    case EwOp::kAdd: return "add";
    case EwOp::kSub: return "sub";
    case EwOp::kMul: return "mul";
    case EwOp::kDiv: return "div";
    case EwOp::kMax: return "max";
    case EwOp::kMin: return "min";
    case EwOp::kNeg: return "neg";
    case EwOp::kAbs: return "abs";
    case EwOp::kSqrt: return "sqrt";
    case EwOp::kExp: return "exp";
    case EwOp::kTanh: return "tanh";
    case EwOp::kSigmoid: return "sigmoid";
    case EwOp::kErf: return "erf";
    case EwOp::kErfc: return "erfc";
    case EwOp::kFma: return "fma";
    case EwOp::kSelectGtZero: return "select_gt0";
    case EwOp::kStore: return "store";
  }
  return "?";
}

int EwOpArity(EwOp op) {
  switch (op) {
    case EwOp::kLoad:
    case EwOp::kConst: return 0;
    case EwOp::kNeg:
    case EwOp::kAbs:
    case EwOp::kSqrt:
    case EwOp::kExp:
    case EwOp::kTanh:
    case EwOp::kSigmoid:
    case EwOp::kErf:
    case EwOp::kErfc:
    case EwOp::kStore: return 1;
    case EwOp::kAdd:
    case EwOp::kSub:
    case EwOp::kMul:
    case EwOp::kDiv:
    case EwOp::kMax:
    case EwOp::kMin:
    case EwOp::kSelectGtZero: return 2;
    case EwOp::kFma: return 3;
  }
  return 0;
}

void EwProgram::CheckArg(EwValue v) const {
  KILN_CHECK(v >= 0 && static_cast<size_t>(v) < instrs_.size() && instrs_[v].op != EwOp::kStore,
             "ew program: %", v, " is not a value of this program");
}

EwValue EwProgram::Append(EwInstr instr) {
  instrs_.push_back(instr);
  return static_cast<EwValue>(instrs_.size() - 1);
}

EwValue EwProgram::Load(int input) {
  KILN_CHECK(input >= 0, "ew program: negative input index ", input);
  EwInstr in;
  in.op = EwOp::kLoad;
  in.operand = input;
  return Append(in);
}

EwValue EwProgram::Const(float value) {
  EwInstr in;
  in.op = EwOp::kConst;
  in.imm = value;
  return Append(in);
}

EwValue EwProgram::Unary(EwOp op, EwValue a) {
  CheckArg(a);
  EwInstr in;
  in.op = op;
  in.args[0] = a;
  return Append(in);
}

EwValue EwProgram::Binary(EwOp op, EwValue a, EwValue b) {
  CheckArg(a);
  CheckArg(b);
  EwInstr in;
  in.op = op;
  in.args = {a, b, -1};
  return Append(in);
}

EwValue EwProgram::Fma(EwValue a, EwValue b, EwValue c) {
  CheckArg(a);
  CheckArg(b);
  CheckArg(c);
  EwInstr in;
  in.op = EwOp::kFma;
  in.args = {a, b, c};
  return Append(in);
}

void EwProgram::Store(int output, EwValue value) {
  KILN_CHECK(output >= 0, "ew program: negative output index ", output);
  CheckArg(value);
  EwInstr in;
  in.op = EwOp::kStore;
  in.operand = output;
  in.args[0] = value;
  Append(in);
}

namespace {
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;
}  // namespace

EwValue EwProgram::Relu(EwValue x) { return Max(x, Const(0.0f)); }

EwValue EwProgram::Gelu(EwValue x) {
  // Phi(x) through erfc keeps its relative accuracy for x << 0, where
  // 1 + erf(x/sqrt2) would cancel.
  const EwValue phi = Mul(Const(0.5f), Erfc(Mul(x, Const(static_cast<float>(-kSqrt1_2)))));
  return Mul(x, phi);
}

EwValue EwProgram::GeluGrad(EwValue x, EwValue dout) {
  const EwValue phi = Mul(Const(0.5f), Erfc(Mul(x, Const(static_cast<float>(-kSqrt1_2)))));
  const EwValue pdf = Mul(Const(static_cast<float>(kInvSqrt2Pi)), Exp(Mul(Const(-0.5f), Mul(x, x))));
  return Mul(dout, Fma(x, pdf, phi));
}

EwValue EwProgram::GeluTanh(EwValue x) {
  // 2u = x * (2 sqrt(2/pi) + 2 sqrt(2/pi) 0.044715 x^2).
  const EwValue x2 = Mul(x, x);
  const EwValue two_u = Mul(x, Fma(x2, Const(static_cast<float>(2 * kSqrt2OverPi * kGeluCubic)),
                                   Const(static_cast<float>(2 * kSqrt2OverPi))));
  return Mul(x, Sigmoid(two_u));
}

EwValue EwProgram::GeluTanhGrad(EwValue x, EwValue dout) {
  // d/dx [x s(2u)] = s + x * 2 s (1-s) * du/dx, du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2);
  // 1 - s = sigmoid(-2u) keeps its relative accuracy where 1 - s (and
  // 1 - tanh^2) would cancel.
  const EwValue x2 = Mul(x, x);
  const EwValue two_u = Mul(x, Fma(x2, Const(static_cast<float>(2 * kSqrt2OverPi * kGeluCubic)),
                                   Const(static_cast<float>(2 * kSqrt2OverPi))));
  const EwValue s = Sigmoid(two_u);
  const EwValue s1ms = Mul(s, Sigmoid(Neg(two_u)));
  const EwValue two_du = Fma(x2, Const(static_cast<float>(2 * kSqrt2OverPi * 3 * kGeluCubic)),
                             Const(static_cast<float>(2 * kSqrt2OverPi)));
  return Mul(dout, Fma(Mul(x, s1ms), two_du, s));
}

std::string EwProgram::ToString() const {
  std::ostringstream os;
  for (size_t i = 0; i < instrs_.size(); ++i) {
    const EwInstr& in = instrs_[i];
    if (in.op == EwOp::kStore) {
      os << "store out" << in.operand << ", %" << in.args[0] << "\n";
      continue;
    }
    os << "%" << i << " = " << EwOpName(in.op);
    if (in.op == EwOp::kLoad) os << " in" << in.operand;
    if (in.op == EwOp::kConst) os << " " << std::setprecision(9) << in.imm;
    for (int a = 0; a < EwOpArity(in.op); ++a) os << (a ? ", %" : " %") << in.args[a];
    os << "\n";
  }
  return os.str();
}

void EwProgram::Validate(int num_inputs, int num_outputs) const {
  std::vector<int> stores(static_cast<size_t>(num_outputs), 0);
  for (size_t i = 0; i < instrs_.size(); ++i) {
    const EwInstr& in = instrs_[i];
    const int arity = EwOpArity(in.op);
    for (int a = 0; a < 3; ++a) {
      const EwValue v = in.args[a];
      if (a >= arity) {
        if (v != -1) ThrowInvalidArgument("ew program: instruction ", i, " (", EwOpName(in.op), ") has extra argument %", v);
        continue;
      }
      if (v < 0 || static_cast<size_t>(v) >= i || instrs_[v].op == EwOp::kStore) {
        ThrowInvalidArgument("ew program: instruction ", i, " (", EwOpName(in.op), ") argument ", a,
                             " is %", v, ", not a value defined before it");
      }
    }
    if (in.op == EwOp::kLoad && (in.operand < 0 || in.operand >= num_inputs)) {
      ThrowInvalidArgument("ew program: instruction ", i, " loads in", in.operand, " but the layout has ", num_inputs,
                           " inputs");
    }
    if (in.op == EwOp::kStore) {
      if (in.operand < 0 || in.operand >= num_outputs) {
        ThrowInvalidArgument("ew program: instruction ", i, " stores out", in.operand, " but the layout has ",
                             num_outputs, " outputs");
      }
      ++stores[in.operand];
    }
  }
  for (int k = 0; k < num_outputs; ++k) {
    if (stores[k] != 1) ThrowInvalidArgument("ew program: out", k, " is stored ", stores[k], " times, expected once");
  }
}

// ---------------------------------------------------------------------------
// Reference interpreter

namespace {

template <typename T>
T SigmoidRef(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
T Eval(const EwInstr& in, const std::vector<T>& v) {
  const T a = in.args[0] >= 0 ? v[in.args[0]] : T(0);
  const T b = in.args[1] >= 0 ? v[in.args[1]] : T(0);
  switch (in.op) {
    case EwOp::kConst: return T(in.imm);
    case EwOp::kAdd: return a + b;
    case EwOp::kSub: return a - b;
    case EwOp::kMul: return a * b;
    case EwOp::kDiv: return a / b;
    case EwOp::kMax: return a > b ? a : b;
    case EwOp::kMin: return a < b ? a : b;
    case EwOp::kNeg: return -a;
    case EwOp::kAbs: return std::fabs(a);
    case EwOp::kSqrt: return std::sqrt(a);
    case EwOp::kExp: return std::exp(a);
    case EwOp::kTanh: return std::tanh(a);
    case EwOp::kSigmoid: return SigmoidRef(a);
    case EwOp::kErf: return std::erf(a);
    case EwOp::kErfc: return std::erfc(a);
    case EwOp::kFma: return std::fma(a, b, v[in.args[2]]);
    case EwOp::kSelectGtZero: return a > T(0) ? b : T(0);
    case EwOp::kLoad:
    case EwOp::kStore: break;
  }
  return T(0);
}

template <typename T>
void Interpret(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
               const std::vector<T*>& outputs) {
  layout.Validate();
  program.Validate(static_cast<int>(layout.inputs.size()), static_cast<int>(layout.outputs.size()));
  KILN_CHECK(inputs.size() == layout.inputs.size() && outputs.size() == layout.outputs.size(),
             "RunReference: operand pointer counts do not match the layout");
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (layout.IsReduction(static_cast<int>(k))) {
      const int64_t extent = layout.OutputExtent(static_cast<int>(k));
      for (int64_t i = 0; i < extent; ++i) outputs[k][i] = T(0);
    }
  }
  const int64_t numel = layout.numel();
  std::array<int64_t, kEwMaxRank> dims{{1, 1, 1, 1}};
  for (int d = 0; d < layout.rank; ++d) dims[kEwMaxRank - layout.rank + d] = layout.dims[d];
  auto stride = [&](const EwOperand& op, int d) {
    const int src = d - (kEwMaxRank - layout.rank);
    return src < 0 ? int64_t{0} : op.strides[src];
  };
  const std::vector<EwInstr>& code = program.instrs();
  std::vector<T> v(code.size(), T(0));
  std::vector<bool> reduce(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) reduce[k] = layout.IsReduction(static_cast<int>(k));
  if (numel == 0) return;
  std::array<int64_t, kEwMaxRank> idx{};
  for (int64_t n = 0; n < numel; ++n) {
    for (size_t i = 0; i < code.size(); ++i) {
      const EwInstr& in = code[i];
      if (in.op == EwOp::kLoad) {
        const EwOperand& op = layout.inputs[in.operand];
        int64_t off = 0;
        for (int d = 0; d < kEwMaxRank; ++d) off += idx[d] * stride(op, d);
        v[i] = T(inputs[in.operand][off]);
      } else if (in.op == EwOp::kStore) {
        const EwOperand& op = layout.outputs[in.operand];
        int64_t off = 0;
        for (int d = 0; d < kEwMaxRank; ++d) off += idx[d] * stride(op, d);
        if (reduce[in.operand]) {
          outputs[in.operand][off] += v[in.args[0]];
        } else {
          outputs[in.operand][off] = v[in.args[0]];
        }
      } else {
        v[i] = Eval<T>(in, v);
      }
    }
    for (int d = kEwMaxRank - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void RunReference(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
                  const std::vector<double*>& outputs) {
  Interpret<double>(program, layout, inputs, outputs);
}

void RunReferenceFloat(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
                       const std::vector<float*>& outputs) {
  Interpret<float>(program, layout, inputs, outputs);
}

}  // namespace compiler
}  // namespace kiln
