// runtime::Runner: runs a compiled Program with its inputs and outputs bound
// to caller-owned memory (zero-copy) and its temporaries in an arena taken
// from the caching allocator for the launch, or in donated inputs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/profiler.h"
#include "runtime/program.h"

namespace kiln::runtime {

// Called after instruction i ran, with the buffers it was given (args[k] for
// the instruction's arg k): for checks such as --check_nan_inf.
using InstructionHook = std::function<void(size_t i, const BufferView* args)>;

class Runner {
 public:
  // inputs[i] / outputs[i] are the data pointers of the buffers with role
  // kInput / kOutput and io_index i. donate[i] (when given) says the caller
  // gives up input i's memory after its last read: temps the plan placed there
  // use it; for an input not donated they get a block of their own. Thread-safe.
  // `owned` (when given, by input io index): buffers of donated inputs the
  // launch took over from their vars; each is dropped after the instruction
  // that last uses its memory (BufferPlan::free_after), so a dying input is
  // freed inside the launch as the executor would free it between ops.
  // `allocate_output` (when given) is called for every output whose pointer
  // in `outputs` is null, right before the instruction that first writes it
  // (BufferPlan::alloc_before), and returns its memory: outputs then count as
  // live only from when they are made. With a `profiler`, each instruction
  // is timed into it; `after` (when given) runs after each instruction.
  static void Run(const Program& program, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                  const std::vector<bool>& donate = {}, std::vector<std::shared_ptr<Allocation>> owned = {},
                  const std::function<void*(int)>& allocate_output = nullptr, Profiler* profiler = nullptr,
                  const InstructionHook& after = nullptr);
  // Runs instruction `i` alone with the given buffer pointers (one per arg).
  static void RunInstruction(const Program& program, size_t i, const std::vector<void*>& arg_data,
                             Profiler* profiler = nullptr, const InstructionHook& after = nullptr);
};

}  // namespace kiln::runtime
