// How the layout of an elementwise group's kernel follows new sizes. The
// lowering pads each operand's dims to the iteration rank (EwAccess::dims:
// leading 1s, Y of elementwise_* placed at its axis, a reduction's kept
// dims); a kernel resized to new sizes gets the dims of its args' vars, so
// the resizer remembers where each var's dims went and which iteration dims
// its loops merged (EwCollapse), and lays the new sizes out the same way.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "framework/ew/ew_layout.h"
#include "framework/tensor.h"

namespace kiln {

class EwLayoutResizer {
 public:
  // At compile time: the iteration dims, each operand's padded dims (as
  // CollapseLayout took them) and its var's own dims (what the instruction
  // binds), inputs then outputs.
  EwLayoutResizer(Dims iter, const std::vector<Dims>& padded_inputs, const std::vector<Dims>& padded_outputs,
                  std::vector<Dims> var_dims);

  // The layout (element types f32: the caller keeps its own) when the vars
  // have `var_dims`, laid out as at compile time; nullopt with the reason in
  // `why` when it cannot be: a var of another rank, a var whose dims'
  // place in the padded dims is not unique (a [1] var that grew), a dim that
  // was 1 (no loop) and grew, an operand that was broadcast or summed along a
  // dim that it now has or the other way round, an iteration dim no operand
  // has.
  std::optional<EwLayout> LayoutAt(const std::vector<Dims>& var_dims, std::string* why) const;

 private:
  // Where var dim i of an operand sits in its padded dims: padded position
  // of[i], increasing; every padded position not listed holds 1.
  using Placement = std::vector<int>;
  bool PaddedAt(size_t k, const Dims& var, Dims* padded, std::string* why) const;

  Dims iter_;
  size_t num_inputs_;
  std::vector<Dims> padded_;    // per operand, at compile time
  std::vector<Dims> var_dims_;  // per operand, at compile time
  std::vector<std::vector<Placement>> placements_;  // per operand: every placement that fits
  EwCollapse collapse_;
};

}  // namespace kiln
