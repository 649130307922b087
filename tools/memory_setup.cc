#include "tools/memory_setup.h"

#include <algorithm>
#include <cstdio>

#include "framework/flags.h"
#include "launch_op/default_jit.h"

namespace kiln::tools {
namespace {

std::string Row(const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "  %-28s %s\n", label.c_str(), value.c_str());
  return buf;
}

std::string Bytes(size_t b) { return FormatBytes(b) + " (" + std::to_string(b) + " B)"; }

// "    at its peak, instruction 72 (conv_grad_4), 85 temps live: relu_4 4.0
// MiB, ..." (the largest arena temps live there, up to six).
std::string ArenaPeakLine(const runtime::Program& program, const runtime::ArenaPeak& peak) {
  if (peak.instruction < 0) return "";
  std::vector<std::pair<size_t, int>> live;
  for (int b : peak.live) live.emplace_back(program.plan.buffers[b].bytes(), b);
  std::sort(live.rbegin(), live.rend());
  std::string s = "    at its peak, instruction " + std::to_string(peak.instruction) + " (" +
                  program.instructions[peak.instruction].kernel->name() + "), " + std::to_string(live.size()) +
                  " temps live:";
  for (size_t k = 0; k < live.size() && k < 6; ++k) {
    s += (k ? ", " : " ") + program.plan.buffers[live[k].second].name + " " + FormatBytes(live[k].first);
  }
  return s + "\n";
}

}  // namespace

void ConfigureAllocatorFromFlags() { CachingAllocator::Global().SetCaching(FLAGS_cache_allocations); }

MemoryFigures ComputeMemoryFigures(const AllocatorStats& stats, const AllocatorStats& baseline,
                                   const InplaceReport& inplace, int64_t batch, int64_t steps) {
  auto above = [](size_t v, size_t base) { return v > base ? v - base : 0; };
  MemoryFigures f;
  f.peak_tensor_bytes = above(stats.peak_in_use_bytes, baseline.in_use_bytes);
  f.allocated_bytes = above(stats.system_bytes, baseline.system_bytes);
  f.peak_held_bytes = above(stats.peak_held_bytes, baseline.held_bytes);
  f.allocations = stats.allocations;
  f.hits = stats.hits;
  f.misses = stats.misses;
  f.reuse_bytes = stats.hit_bytes;
  f.inplace_bytes_per_step = inplace.SavedBytes(batch);
  f.inplace_ops = static_cast<int>(inplace.renamed.size());
  f.steps = steps;
  return f;
}

std::string MemoryReport(const MemoryFigures& f, bool caching) {
  std::string s = "memory (training steps only; the loaded dataset is not counted):\n";
  s += Row("peak tensor bytes", Bytes(f.peak_tensor_bytes));
  s += Row("allocated from the system", Bytes(f.allocated_bytes));
  s += Row("held from the system, peak", Bytes(f.peak_held_bytes));
  s += Row("allocator", std::to_string(f.allocations) + " allocations: " + std::to_string(f.hits) + " hits, " +
                            std::to_string(f.misses) + " misses (caching " + (caching ? "on" : "off") + ")");
  s += Row("saved by in-place", std::to_string(f.inplace_ops) + " ops, " + FormatBytes(f.inplace_bytes_per_step) +
                                    " per step");
  if (!f.recomputed.empty()) {
    s += Row("saved by recompute", FormatBytes(f.recompute_bytes_per_step) + " per step not kept for the backward: " +
                                       f.recomputed);
  }
  const size_t per_step = f.steps > 0 ? f.reuse_bytes / static_cast<size_t>(f.steps) : 0;
  s += Row("saved by reuse", FormatBytes(f.reuse_bytes) + " served from free lists (" + FormatBytes(per_step) +
                                 " per step)");
  const auto objects = jit::DefaultJit().cache().CachedObjects();
  if (objects.empty()) return s;
  s += "jit arena plans (per compiled cluster and signature; reuse of dead intermediates inside the cluster, and of\n"
       "  inputs that die in it):\n";
  for (const auto& obj : objects) {
    const auto& plan = obj->program.plan;
    const runtime::ArenaPeak peak = runtime::ArenaPeakOf(obj->program.instructions, plan);
    const size_t saved = plan.arena_bytes_no_reuse - std::min(plan.temp_arena_bytes, plan.arena_bytes_no_reuse);
    const auto& ins = obj->signature.inputs;
    const std::string first = ins.empty() ? "" : ", first " + std::string(DataTypeName(ins[0].dtype)) +
                                                     DimsToString(ins[0].dims);
    s += "  cluster " + obj->key + " (" + std::to_string(ins.size()) + " inputs" + first +
         "): planned " + FormatBytes(plan.arena_bytes) + " (at most " +
         FormatBytes(peak.bytes) + " in use at one instruction" +
         (plan.scratch_bytes > 0 ? ", kernel scratch included: oneDNN's reordered arguments and scratchpads, up to " +
                                       FormatBytes(plan.scratch_bytes) + " an instruction"
                                 : std::string()) +
         ")" +
         (plan.donated_bytes > 0 ? " + " + FormatBytes(plan.donated_bytes) + " in " +
                                       std::to_string(plan.donors.size()) + " dying inputs"
                                 : std::string()) +
         (plan.output_region_bytes > 0 ? " + " + FormatBytes(plan.output_region_bytes) + " in " +
                                             std::to_string(plan.output_regions.size()) + " outputs not written yet"
                                       : std::string()) +
         ", temps without reuse " + FormatBytes(plan.arena_bytes_no_reuse) + ", saved " + FormatBytes(saved) + "\n" +
         ArenaPeakLine(obj->program, peak);
  }
  const jit::LaunchStats ls = jit::DefaultJit().stats().launch;
  if (ls.inputs_donated + ls.inputs_kept > 0) {
    s += Row("dying inputs", std::to_string(ls.inputs_donated) +
                                 " taken over by launches (hold temps, freed at their last use inside), " +
                                 std::to_string(ls.inputs_kept) + " shared elsewhere (kept; their temps got own blocks)");
  }
  return s;
}

std::string PeakReport(const PeakRecord& peak, size_t baseline) {
  if (peak.op.empty()) return "";
  auto above = [baseline](size_t v) { return v > baseline ? v - baseline : 0; };
  std::string s = "peak of the training steps: " + FormatBytes(above(peak.peak_bytes)) + " during " + peak.op + "\n";
  const size_t transient = peak.peak_bytes > peak.in_use_after ? peak.peak_bytes - peak.in_use_after : 0;
  s += Row("transient inside the op", FormatBytes(transient) + " (arena, scratchpads, temporaries)");
  size_t listed = 0, shown = 0;
  std::string names;
  for (const auto& l : peak.live) {
    listed += l.bytes;
    if (shown < 12 && l.bytes >= 1024) {
      names += (shown ? ", " : "") + l.name + " " + FormatBytes(l.bytes);
      ++shown;
    }
  }
  s += Row("live scope tensors after it", FormatBytes(listed) + " in " + std::to_string(peak.live.size()) +
                                             " buffers (parameters included), largest: " + names);
  return s;
}

}  // namespace kiln::tools
