// The kernel IR of fused elementwise kernels: a straight-line SSA program that
// computes the outputs of one iteration point from its inputs.
//
// Ops give their elementwise meaning as fragments of such programs in their
// registry entries (ew_fragment.h); the JIT groups them, lays the group out
// (ew_layout.h) and generates machine code (compiler/codegen/ew_codegen.h).
// RunReference (ew_reference.h) is the oracle the generated code is tested
// against.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Instructions. Semantics (also those of the generated code):
//   max(a, b) = a > b ? a : b   and   min(a, b) = a < b ? a : b  (x86 maxps/minps:
//               a NaN in either operand yields b; relu(x) = max(x, 0) maps NaN to 0
//               like the reference relu)
//   select_gt0(a, b) = a > 0 ? b : 0   (relu grad: select_gt0(out, dout))
//   select(c, a, b) = c != 0 ? a : b   (as C's ternary on a float: a NaN c
//               picks a; compare two values with select(x - y, ...), which is
//               0 exactly when x == y)
//   lt(a, b) = a < b ? 1 : 0, likewise le, gt, ge, eq, ne (the comparisons
//               give 1.0 or 0.0 in a float lane; IEEE: with a NaN operand
//               all are 0 except ne, which is 1)
//   fma(a, b, c) = a*b + c, rounded once
//   sigmoid(x) = 1 / (1 + exp(-x));  erfc(x) = 1 - erf(x), accurate for large x
//   log(x) = natural logarithm: NaN for x < 0 and NaN, -inf at +-0, +inf at +inf
//   exp, tanh, sigmoid, erf, erfc, log are approximations in generated code
//   (see compiler/codegen/ew_codegen_math.cc for the error bounds); div and sqrt are
//   IEEE-rounded.
enum class EwOp : uint8_t {
  kLoad,   // operand = input index
  kConst,  // imm
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,  // NaN if either operand is NaN (as torch.maximum)
  kMin,  // NaN if either operand is NaN (as torch.minimum)
  kNeg,
  kAbs,
  kSqrt,
  kExp,
  kTanh,
  kSigmoid,
  kErf,
  kErfc,
  kLog,
  kFma,
  kSelectGtZero,
  kSelect,  // args: c, a, b
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kStore,  // operand = output index, args[0] = value
};
const char* EwOpName(EwOp op);
// Number of value operands (args) the op reads.
int EwOpArity(EwOp op);

// An SSA value is the index of the instruction that defines it.
using EwValue = int32_t;

struct EwInstr {
  EwOp op = EwOp::kConst;
  std::array<EwValue, 3> args{{-1, -1, -1}};
  int32_t operand = -1;  // kLoad: input index; kStore: output index
  float imm = 0.0f;      // kConst
};

// A straight-line program. The builder appends instructions; value arguments
// must come from earlier calls on the same program (checked).
class EwProgram {
 public:
  EwValue Load(int input);
  EwValue Const(float value);
  EwValue Add(EwValue a, EwValue b) { return Binary(EwOp::kAdd, a, b); }
  EwValue Sub(EwValue a, EwValue b) { return Binary(EwOp::kSub, a, b); }
  EwValue Mul(EwValue a, EwValue b) { return Binary(EwOp::kMul, a, b); }
  EwValue Div(EwValue a, EwValue b) { return Binary(EwOp::kDiv, a, b); }
  EwValue Max(EwValue a, EwValue b) { return Binary(EwOp::kMax, a, b); }
  EwValue Min(EwValue a, EwValue b) { return Binary(EwOp::kMin, a, b); }
  EwValue SelectGtZero(EwValue a, EwValue b) { return Binary(EwOp::kSelectGtZero, a, b); }
  EwValue Neg(EwValue a) { return Unary(EwOp::kNeg, a); }
  EwValue Abs(EwValue a) { return Unary(EwOp::kAbs, a); }
  EwValue Sqrt(EwValue a) { return Unary(EwOp::kSqrt, a); }
  EwValue Exp(EwValue a) { return Unary(EwOp::kExp, a); }
  EwValue Tanh(EwValue a) { return Unary(EwOp::kTanh, a); }
  EwValue Sigmoid(EwValue a) { return Unary(EwOp::kSigmoid, a); }
  EwValue Erf(EwValue a) { return Unary(EwOp::kErf, a); }
  EwValue Erfc(EwValue a) { return Unary(EwOp::kErfc, a); }
  EwValue Log(EwValue a) { return Unary(EwOp::kLog, a); }
  EwValue Fma(EwValue a, EwValue b, EwValue c) { return Ternary(EwOp::kFma, a, b, c); }
  EwValue Select(EwValue c, EwValue a, EwValue b) { return Ternary(EwOp::kSelect, c, a, b); }
  EwValue Lt(EwValue a, EwValue b) { return Binary(EwOp::kLt, a, b); }
  EwValue Le(EwValue a, EwValue b) { return Binary(EwOp::kLe, a, b); }
  EwValue Gt(EwValue a, EwValue b) { return Binary(EwOp::kGt, a, b); }
  EwValue Ge(EwValue a, EwValue b) { return Binary(EwOp::kGe, a, b); }
  EwValue Eq(EwValue a, EwValue b) { return Binary(EwOp::kEq, a, b); }
  EwValue Ne(EwValue a, EwValue b) { return Binary(EwOp::kNe, a, b); }
  void Store(int output, EwValue value);

  // Composites expanded into primitives, written so that they stay accurate
  // where the textbook form cancels (large negative x).
  EwValue Relu(EwValue x);  // max(x, 0)
  // x * Phi(x) = x * 0.5 * erfc(-x / sqrt(2)).
  EwValue Gelu(EwValue x);
  // dout * (Phi(x) + x * phi(x)).
  EwValue GeluGrad(EwValue x, EwValue dout);
  // 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
  // x * sigmoid(2u) (the same function; 1 + tanh(u) = 2 sigmoid(2u)).
  EwValue GeluTanh(EwValue x);
  // dout * (s + 2 x s (1 - s) du/dx) with s = sigmoid(2u), 1 - s = sigmoid(-2u).
  EwValue GeluTanhGrad(EwValue x, EwValue dout);
  // log(1 + u), accurate for tiny u (log(1 + u) alone returns 0 for |u| <
  // 2^-25): w = 1 + u; log(w) + (u - (w - 1)) / w, the second term the
  // first-order correction for the rounding of w. Exact at the edges:
  // -inf at u = -1, +inf at u = +inf, NaN below -1 and for NaN. Measured in
  // generated code: <= 1.44 ulp (tests/ew_codegen_log_test.cc).
  EwValue Log1p(EwValue u);

  const std::vector<EwInstr>& instrs() const { return instrs_; }
  size_t size() const { return instrs_.size(); }

  // One instruction per line: "%2 = add %0, %1", "store out0, %2".
  std::string ToString() const;
  // Checks SSA order and arity, Load/Store operand ranges against the layout's
  // operand counts, and that every output is stored exactly once. Throws
  // kiln::Error (InvalidArgument) naming the instruction.
  void Validate(int num_inputs, int num_outputs) const;

 private:
  EwValue Append(EwInstr instr);
  EwValue Unary(EwOp op, EwValue a);
  EwValue Binary(EwOp op, EwValue a, EwValue b);
  EwValue Ternary(EwOp op, EwValue a, EwValue b, EwValue c);
  void CheckArg(EwValue v) const;

  std::vector<EwInstr> instrs_;
};

}  // namespace kiln
