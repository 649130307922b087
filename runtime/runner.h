// runtime::Runner: runs a compiled Program with its inputs and outputs bound
// to caller-owned memory (zero-copy) and its temporaries in a per-thread arena.
#pragma once

#include <string>
#include <vector>

#include "runtime/program.h"

namespace kiln::runtime {

class Runner {
 public:
  // inputs[i] / outputs[i] are the data pointers of the buffers with role
  // kInput / kOutput and io_index i. Thread-safe: each thread has its own arena.
  static void Run(const Program& program, const std::vector<void*>& inputs, const std::vector<void*>& outputs);
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
