#include "framework/ew/ew_program.h"

#include <iomanip>
#include <limits>
#include <sstream>

#include "framework/error.h"

namespace kiln {

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
    case EwOp::kLog: return "log";
    case EwOp::kFma: return "fma";
    case EwOp::kSelectGtZero: return "select_gt0";
    case EwOp::kSelect: return "select";
    case EwOp::kLt: return "lt";
    case EwOp::kLe: return "le";
    case EwOp::kGt: return "gt";
    case EwOp::kGe: return "ge";
    case EwOp::kEq: return "eq";
    case EwOp::kNe: return "ne";
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
    case EwOp::kLog:
    case EwOp::kStore: return 1;
    case EwOp::kAdd:
    case EwOp::kSub:
    case EwOp::kMul:
    case EwOp::kDiv:
    case EwOp::kMax:
    case EwOp::kMin:
    case EwOp::kSelectGtZero:
    case EwOp::kLt:
    case EwOp::kLe:
    case EwOp::kGt:
    case EwOp::kGe:
    case EwOp::kEq:
    case EwOp::kNe: return 2;
    case EwOp::kFma:
    case EwOp::kSelect: return 3;
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

EwValue EwProgram::Ternary(EwOp op, EwValue a, EwValue b, EwValue c) {
  CheckArg(a);
  CheckArg(b);
  CheckArg(c);
  EwInstr in;
  in.op = op;
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

EwValue EwProgram::Log1p(EwValue u) {
  // For |u| <= 1, w - 1 is exact (Sterbenz, or 1 + u itself is exact for
  // u <= -1/2), so d = u - (w - 1) is the rounding error of w and log(1 + u)
  // = log(w) + log(1 + d/w) ~ log(w) + d/w, with |d/w| <= 2^-23 (the
  // neglected (d/w)^2/2 is below 2^-47). Above 1 the correction is below the
  // result's rounding; it only has to stay finite. The select drops it
  // where it would be 0/0 (u = -1, w = 0) or inf - inf (u = +inf): d is 0 or
  // FLT_MAX - w is not positive there; NaN also takes the branch without it.
  const EwValue w = Add(Const(1.0f), u);
  const EwValue d = Sub(u, Sub(w, Const(1.0f)));
  const EwValue finite_d = SelectGtZero(Sub(Const(std::numeric_limits<float>::max()), w), d);
  return Add(Log(w), Select(finite_d, Div(d, w), Const(0.0f)));
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

}  // namespace kiln
