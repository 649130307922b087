#include "compiler/lowering/units/post_ops.h"

namespace kiln::jit {

std::string EpilogueText(bool bias, MatmulActivation activation) {
  std::string s = bias ? " + bias" : "";
  if (activation == MatmulActivation::kRelu) s += " + relu";
  if (activation == MatmulActivation::kGelu) s += " + gelu";
  if (activation == MatmulActivation::kGeluTanh) s += " + gelu_tanh";
  return s;
}

}  // namespace kiln::jit
