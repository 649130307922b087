// Per-instruction timing of compiled programs (--jit_profile): the runner
// times each instruction it runs when given a profiler. Thread-safe. The
// process has the one the JIT compiler instance owns; tests make their own.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/program.h"

namespace kiln::runtime {

class Profiler {
 public:
  // Runs `kernel` on `args` and adds its time to the kernel's row.
  // With `scratch`, RunWithScratch (Kernel::ScratchBytes).
  void RunTimed(const Kernel& kernel, const BufferView* args, void* scratch = nullptr);
  // Time per kernel (name and what it does), slowest first, as a table.
  std::string Report() const;
  struct Entry {
    std::string kernel;  // "name  what it does"
    int64_t calls = 0;
    double ms = 0;
  };
  // The same rows, slowest first.
  std::vector<Entry> Entries() const;
  void Reset();
  // Calls recorded so far (all kernels).
  int64_t calls() const;

 private:
  struct Row {
    int64_t calls = 0;
    double ms = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Row> rows_;  // "name  describe"
};

}  // namespace kiln::runtime
