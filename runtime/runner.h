// runtime::Runner: runs a compiled Program with its inputs and outputs bound
// to caller-owned memory (zero-copy) and its temporaries in an arena taken
// from the caching allocator for the launch, or in donated inputs.
#pragma once

#include <string>
#include <vector>

#include "runtime/program.h"

namespace kiln::runtime {

class Runner {
 public:
  // inputs[i] / outputs[i] are the data pointers of the buffers with role
  // kInput / kOutput and io_index i. donate[i] (when given) says the caller
  // gives up input i's memory after its last read: temps the plan placed there
  // use it; for an input not donated they get a block of their own. Thread-safe.
  static void Run(const Program& program, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                  const std::vector<bool>& donate = {});
  // Runs instruction `i` alone with the given buffer pointers (one per arg).
  static void RunInstruction(const Program& program, size_t i, const std::vector<void*>& arg_data);
};

// Per-instruction timing of compiled programs (--jit_profile). Off by
// default; when on, every Run times each instruction with a steady clock.
void SetProfiling(bool on);
bool ProfilingEnabled();
// Time per kernel (name and what it does), slowest first, as a table.
std::string ProfileReport();
void ResetProfile();

}  // namespace kiln::runtime
