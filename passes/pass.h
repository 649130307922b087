// The pass interface: one flat class, no intermediate bases. A pass rewrites
// an ir::Graph and says whether it changed anything. Options come in through
// the pass's constructor, never from flags read inside the pass.
#pragma once

#include <string_view>

#include "framework/ir/graph.h"

namespace kiln {

class Pass {
 public:
  virtual ~Pass() = default;
  // The name the pass is registered and dumped under ("build_jit_pass").
  virtual std::string_view name() const = 0;
  // Rewrites `graph`; returns true iff it changed it. Bad input (options,
  // program) throws kiln::Error; a pass must leave a graph that passes
  // graph.Verify() (RunPasses checks).
  virtual bool Run(ir::Graph& graph) const = 0;
};

}  // namespace kiln
