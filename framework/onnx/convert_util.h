// Helpers the converters share: axes, reshapes that keep run-time dims, and
// ONNX's numpy broadcasting mapped onto kiln's "Y broadcasts into X" rule.
// Internal to framework/onnx/.
#pragma once

#include <string>
#include <vector>

#include "framework/onnx/import_context.h"

namespace kiln::onnx_import {

// `axis` in [-rank, rank) as a non-negative axis; refuses naming `what`.
int64_t NormAxis(const NodeContext& ctx, int64_t axis, int64_t rank, const std::string& what);
std::vector<int64_t> NormAxes(const NodeContext& ctx, const std::vector<int64_t>& axes, int64_t rank,
                              const std::string& what);

// `var` (dims `from`) reshaped to `to` with reshape2, into `out` (a temp when
// empty). src[i] is the dim of `from` that output dim i is (-1: a new dim of
// size 1): a dim known only at run time stays one when it keeps its index
// (reshape2's 0) or is the only such dim (-1); otherwise the node is refused.
std::string ReshapeTo(NodeContext& ctx, const std::string& var, const Dims& from, const Dims& to,
                      const std::vector<int>& src, const std::string& out = "");

// The broadcast of two ONNX operand shapes (numpy's rule; -1 unknown);
// refuses shapes that do not broadcast.
Dims BroadcastShapes(const NodeContext& ctx, const Dims& a, const Dims& b);

// `var` (dims `dims`, which broadcast to `r`) as a var of dims `r`: itself
// when they are equal, else expand_v2; refuses a dim of `r` known only at run
// time that `var` lacks.
std::string BroadcastTo(NodeContext& ctx, const std::string& var, const Dims& dims, const Dims& r);

enum class Operands {
  kCommutative,  // a op b == b op a: the operands may swap
  kFlippable,    // a comparison: swapping them flips it (less <-> greater)
  kOrdered,      // sub, div, pow: they may not swap
};

// The operands of a binary node (inputs 0 and 1) as kiln's elementwise ops
// take them: X has the broadcast shape (reshaped from a lower rank with
// leading 1s when needed) and Y broadcasts into it. `swapped` when X is input
// 1. When both operands broadcast, the first is expanded to the broadcast
// shape (expand_v2: numpy's broadcasting is that expansion); refuses when a
// dim of that shape is known only at run time and the first operand lacks it,
// or when only the first operand broadcasts and the op is kOrdered.
struct BinaryOperands {
  std::string x, y;
  bool swapped = false;
};
BinaryOperands MapBroadcast(NodeContext& ctx, Operands order);
// The same for two vars (Max and Min chain their inputs pairwise).
BinaryOperands MapBroadcast(NodeContext& ctx, Operands order, const std::string& a, const Dims& a_dims,
                            const std::string& b, const Dims& b_dims);

}  // namespace kiln::onnx_import
