// The small program the optimizer tests build their updates on: a linear
// layer x [batch, 3] @ w [3, 4] + b [4] with w = 0.5, b = 0, and its loss.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/backward.h"
#include "framework/program_builder.h"

namespace kiln::test {

struct LinearLossOptions {
  int64_t batch = 2;     // -1: any batch size
  bool squared = false;  // mean((x w + b)^2) instead of mean(x w + b)
};

// Appends the layer, its loss and the backward pass; returns the
// (param, grad) pairs.
inline std::vector<std::pair<std::string, std::string>> BuildLinearLoss(ProgramBuilder& b,
                                                                        LinearLossOptions o = {}) {
  const std::string x = b.Data("x", {o.batch, 3});
  const std::string w = b.Param("w", {3, 4}, Init::Constant(0.5f));
  const std::string bias = b.Param("b", {4}, Init::Constant(0.f));
  const std::string h = b.Op1("matmul", {{"X", {x}}, {"Y", {w}}});
  std::string y = b.Op1("elementwise_add", {{"X", {h}}, {"Y", {bias}}});
  if (o.squared) y = b.Op1("elementwise_mul", {{"X", {y}}, {"Y", {y}}});
  const std::string loss = b.Op1("mean", {{"X", {y}}});
  return AppendBackward(&b.main(), loss);
}

}  // namespace kiln::test
