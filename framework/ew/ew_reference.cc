#include "framework/ew/ew_reference.h"

#include <cmath>

#include "framework/bf16.h"
#include "framework/error.h"

namespace kiln {

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
    case EwOp::kMax: return a != a ? a : (b != b || b > a ? b : a);  // NaN propagates
    case EwOp::kMin: return a != a ? a : (b != b || b < a ? b : a);
    case EwOp::kNeg: return -a;
    case EwOp::kAbs: return std::fabs(a);
    case EwOp::kSqrt: return std::sqrt(a);
    case EwOp::kExp: return std::exp(a);
    case EwOp::kTanh: return std::tanh(a);
    case EwOp::kSigmoid: return SigmoidRef(a);
    case EwOp::kErf: return std::erf(a);
    case EwOp::kErfc: return std::erfc(a);
    case EwOp::kLog: return std::log(a);
    case EwOp::kFma: return std::fma(a, b, v[in.args[2]]);
    case EwOp::kSelectGtZero: return a > T(0) ? b : T(0);
    case EwOp::kSelect: return a != T(0) ? b : v[in.args[2]];  // NaN != 0
    // C++'s comparisons are IEEE's: false with a NaN, except !=.
    case EwOp::kLt: return a < b ? T(1) : T(0);
    case EwOp::kLe: return a <= b ? T(1) : T(0);
    case EwOp::kGt: return a > b ? T(1) : T(0);
    case EwOp::kGe: return a >= b ? T(1) : T(0);
    case EwOp::kEq: return a == b ? T(1) : T(0);
    case EwOp::kNe: return a != b ? T(1) : T(0);
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
        } else if (op.elem == EwElem::kBF16) {
          outputs[in.operand][off] = T(RoundThroughBf16(static_cast<float>(v[in.args[0]])));
        } else if (op.elem == EwElem::kBool) {
          outputs[in.operand][off] = v[in.args[0]] != T(0) ? T(1) : T(0);  // NaN is true
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

}  // namespace kiln
