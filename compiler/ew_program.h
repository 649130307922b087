// The kernel IR of fused elementwise kernels: an iteration space of up to
// kEwMaxRank collapsed dims, strided operands (stride 0 = broadcast for an
// input, = sum reduction for an output) and a straight-line SSA program that
// computes the outputs of one iteration point from its inputs.
//
// The lowering builds an EwProgram and an EwLayout (usually with
// CollapseLayout); ew_codegen.h turns both into machine code. RunReference is
// the oracle the generated code is tested against.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kiln {
namespace compiler {

constexpr int kEwMaxRank = 4;

// Strides in elements, one per iteration dim (only the first `rank` are used).
// Input: stride 0 on a dim broadcasts the input along it. Output: stride 0 on a
// dim of size > 1 makes the output the SUM over that dim (a reduction output).
// The innermost stride is 0 or 1.
struct EwOperand {
  std::array<int64_t, kEwMaxRank> strides{};
};
using EwInput = EwOperand;
using EwOutput = EwOperand;

// The iteration space (row-major, innermost dim last) and the operands.
struct EwLayout {
  int rank = 1;
  std::array<int64_t, kEwMaxRank> dims{{1, 1, 1, 1}};
  std::vector<EwInput> inputs;
  std::vector<EwOutput> outputs;

  int64_t numel() const;
  // True when output k has stride 0 on a dim of size > 1.
  bool IsReduction(int output) const;
  // True when output k is summed over the innermost dim (its inner stride is 0
  // and the inner dim has size > 1).
  bool IsInnerReduction(int output) const;
  // Elements an operand spans: 1 + sum over dims of (size-1)*stride; 0 when the
  // space is empty along a dim the operand is not broadcast/reduced over.
  int64_t InputExtent(int input) const;
  int64_t OutputExtent(int output) const;
  // "dims=[64,512] in0=[512,1] in1=[0,1] out0=[0,1]+"; "+" marks reductions.
  std::string ToString() const;
  // Throws kiln::Error (InvalidArgument) naming the bad field.
  void Validate() const;
};

// Builds the collapsed layout of an elementwise group. iter_dims are the
// iteration (= largest operand) dims; each operand's dims are padded with 1s to
// the same rank (Y of elementwise_* per OPS.md: see BroadcastYDims), each dim
// equal to the iteration dim or 1 (1 = broadcast input / reduced output).
// Dims of size 1 are dropped and adjacent dims with the same broadcast pattern
// across all operands are merged. Throws kiln::Error with code kUnimplemented
// when more than kEwMaxRank dims remain (the lowering then splits the group),
// and InvalidArgument when an operand does not fit the iteration dims.
EwLayout CollapseLayout(const Dims& iter_dims, const std::vector<Dims>& input_dims,
                        const std::vector<Dims>& output_dims);

// Instructions. Semantics (also those of the generated code):
//   max(a, b) = a > b ? a : b   and   min(a, b) = a < b ? a : b  (x86 maxps/minps:
//               a NaN in either operand yields b; relu(x) = max(x, 0) maps NaN to 0
//               like the reference relu)
//   select_gt0(a, b) = a > 0 ? b : 0   (relu grad: select_gt0(out, dout))
//   fma(a, b, c) = a*b + c, rounded once
//   sigmoid(x) = 1 / (1 + exp(-x));  erfc(x) = 1 - erf(x), accurate for large x
//   exp, tanh, sigmoid, erf, erfc are approximations in generated code (see
//   ew_codegen_x86.cc for the error bounds); div and sqrt are IEEE-rounded.
enum class EwOp : uint8_t {
  kLoad,   // operand = input index
  kConst,  // imm
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,
  kMin,
  kNeg,
  kAbs,
  kSqrt,
  kExp,
  kTanh,
  kSigmoid,
  kErf,
  kErfc,
  kFma,
  kSelectGtZero,
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
  EwValue Fma(EwValue a, EwValue b, EwValue c);
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
  void CheckArg(EwValue v) const;

  std::vector<EwInstr> instrs_;
};

// The scalar oracle: runs the program at every iteration point in double
// precision (inputs widened from float). Outputs are assigned (reductions are
// summed from zero in double); output k must hold OutputExtent(k) elements.
void RunReference(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
                  const std::vector<double*>& outputs);
// The same in float arithmetic, one rounding per instruction (fma rounds once;
// exp/tanh/erf/erfc use the float libm; sigmoid computes 1/(1+exp(-x)) in float).
// Matches the generated code exactly for programs without transcendental ops
// or reductions.
void RunReferenceFloat(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
                       const std::vector<float*>& outputs);

}  // namespace compiler
}  // namespace kiln
