// Memory at the tool edge: --cache_allocations -> the process allocator,
// --use_inplace -> inplace_pass after build_jit_pass, and the --memory_report
// table of kiln train.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "framework/allocator.h"
#include "framework/executor.h"
#include "framework/proto/framework.pb.h"
#include "passes/inplace_pass.h"
#include "passes/recompute_pass.h"

namespace kiln::tools {

// Sets CachingAllocator::Global()'s caching from --cache_allocations.
void ConfigureAllocatorFromFlags();

// With --use_inplace: `program` after inplace_pass on block 0 (keep: feeds
// and fetch targets); `report` (optional) receives what it did. Without:
// the program unchanged and the report empty.
proto::ProgramDesc MaybeApplyInplace(const proto::ProgramDesc& program, const std::set<std::string>& keep,
                                     InplaceReport* report = nullptr);

// With --recompute: `program` after recompute_pass (keep: feeds and fetch
// targets); `report` (optional) receives what it recomputed.
proto::ProgramDesc MaybeApplyRecompute(const proto::ProgramDesc& program, const std::set<std::string>& keep,
                                       RecomputeReport* report = nullptr);

// What kiln train and kiln run do to a program before running it, in this
// order: recompute_pass (--recompute), build_jit_pass (--use_jit), then
// inplace_pass (--use_inplace; it sees the framework ops left outside the
// clusters).
proto::ProgramDesc TransformProgramFromFlags(const proto::ProgramDesc& program, const std::set<std::string>& keep,
                                             InplaceReport* report = nullptr, RecomputeReport* recompute = nullptr);

// Where the training steps' peak happened (PeakRecordOfRuns, needs
// --memory_report): the op, the bytes live above `baseline`, the part
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
