// Memory at the tool edge: --cache_allocations -> the process allocator, and
// the --memory_report table of kiln train (the in-place and recompute figures
// come from the pass pipeline's reports, tools/pipeline_setup.h).
#pragma once

#include <cstdint>
#include <string>

#include "framework/allocator.h"
#include "framework/executor.h"
#include "passes/inplace_pass.h"

namespace kiln::tools {

// Sets CachingAllocator::Global()'s caching from --cache_allocations.
void ConfigureAllocatorFromFlags();

// Where the training steps' peak happened (their executors' PeakTracker,
// with --memory_report): the op, the bytes live above `baseline`, the part
// transient inside the op, and the largest live tensors then.
std::string PeakReport(const PeakRecord& peak, size_t baseline);

// Allocator figures of a run: `stats` taken at its end, `baseline` when it
// started (after ResetStats, with the dataset loaded), so that the peaks
// count only what the run itself kept live or held.
struct MemoryFigures {
  size_t peak_tensor_bytes = 0;  // stats.peak_in_use_bytes - baseline.in_use_bytes
  size_t allocated_bytes = 0;    // class bytes obtained from the system during the run
  size_t peak_held_bytes = 0;    // stats.peak_held_bytes - baseline.held_bytes
  int64_t allocations = 0, hits = 0, misses = 0;
  size_t reuse_bytes = 0;        // requested bytes served from free lists
  size_t inplace_bytes_per_step = 0;
  std::string recomputed;           // RecomputeReport::ToString() of the training program
  size_t recompute_bytes_per_step = 0;  // activations no longer kept from forward to backward
  int inplace_ops = 0;
  int64_t steps = 0;
};
MemoryFigures ComputeMemoryFigures(const AllocatorStats& stats, const AllocatorStats& baseline,
                                   const InplaceReport& inplace,
                                   int64_t batch, int64_t steps);

// The --memory_report text: the figures as a table, then the JIT's arena plan
// of every compiled cluster (planned bytes vs. every temp in its own slot).
std::string MemoryReport(const MemoryFigures& f, bool caching);

}  // namespace kiln::tools
