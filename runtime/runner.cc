#include "runtime/runner.h"

#include <algorithm>
#include <memory>

#include "framework/error.h"
#include "framework/trace.h"

namespace kiln::runtime {
namespace {

// Every buffer's view: inputs and outputs at the caller's pointers, temps in
// the arena or the region of the dying input that holds them.
std::vector<BufferView> BindBuffers(const BufferPlan& plan, const std::vector<void*>& inputs,
                                    const std::vector<void*>& outputs, char* arena,
                                    const std::vector<char*>& region_base) {
  std::vector<BufferView> views(plan.buffers.size());
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const BufferInfo& info = plan.buffers[b];
    views[b].dtype = info.dtype;
    views[b].dims = &info.dims;
    switch (info.role) {
      case BufferRole::kInput:
        KILN_CHECK(info.io_index < static_cast<int>(inputs.size()));
        views[b].data = inputs[info.io_index];
        break;
      case BufferRole::kOutput:
        KILN_CHECK(info.io_index < static_cast<int>(outputs.size()));
        views[b].data = outputs[info.io_index];
        break;
      case BufferRole::kTemp: {
        // A temp in an output made later is bound when the output is made.
        char* base = info.region >= 0 ? region_base[info.region] : arena;
        views[b].data = info.dims_only || base == nullptr ? nullptr : base + info.offset;
        break;
      }
    }
  }
  return views;
}

// Output b was just made: the temps placed in it (BufferPlan::output_regions)
// and every view take their memory.
void BindOutputRegion(const BufferPlan& plan, int b, const std::vector<std::pair<int, int>>& view_roots,
                      std::vector<BufferView>* views) {
  for (size_t t = 0; t < plan.buffers.size(); ++t) {
    const BufferInfo& info = plan.buffers[t];
    if (info.role == BufferRole::kTemp && info.region == b && info.view_of < 0 && !info.dims_only) {
      (*views)[t].data = static_cast<char*>((*views)[b].data) + info.offset;
    }
  }
  for (const auto& [v, root] : view_roots) (*views)[v].data = (*views)[root].data;
}

}  // namespace

void Runner::Run(const Program& program, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                 const std::vector<bool>& donate, std::vector<std::shared_ptr<Allocation>> owned,
                 const std::function<void*(int)>& allocate_output, Profiler* profiler,
                 const InstructionHook& after) {
  const BufferPlan& plan = program.plan;
  // The arena lives for this launch only; the caching allocator hands the same
  // block back next time, so it costs no system allocation, and between
  // launches it does not count as live.
  std::unique_ptr<Allocation> block;
  if (plan.arena_bytes > 0) block = std::make_unique<Allocation>(plan.arena_bytes);
  char* arena = block ? static_cast<char*>(block->ptr()) : nullptr;
  // Temps planned into a dying input use its memory when it is donated, else
  // a block of that input's size (same offsets, correct either way).
  std::vector<std::unique_ptr<Allocation>> spills;
  std::vector<char*> region_base(plan.buffers.size(), nullptr);
  for (int d : plan.donors) {
    const BufferInfo& info = plan.buffers[d];
    const size_t i = static_cast<size_t>(info.io_index);
    KILN_CHECK(i < inputs.size());
    if (i < donate.size() && donate[i] && inputs[i] != nullptr) {
      region_base[d] = static_cast<char*>(inputs[i]);
    } else {
      spills.push_back(std::make_unique<Allocation>(info.bytes()));
      region_base[d] = static_cast<char*>(spills.back()->ptr());
    }
  }
  for (int o : plan.output_regions) {
    const size_t i = static_cast<size_t>(plan.buffers[o].io_index);
    KILN_CHECK(i < outputs.size() && (outputs[i] != nullptr || allocate_output), "output ", i,
               " holds temps but has no memory and no allocator");
    region_base[o] = static_cast<char*>(outputs[i]);
  }
  std::vector<BufferView> views = BindBuffers(plan, inputs, outputs, arena, region_base);
  // Views take their root's memory (set again when a root output is made).
  std::vector<std::pair<int, int>> view_roots;
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (plan.buffers[b].view_of < 0) continue;
    view_roots.emplace_back(static_cast<int>(b), RootBuffer(plan, static_cast<int>(b)));
    views[b].data = views[view_roots.back().second].data;
  }
  // Output buffer ids by io index, for outputs made on demand.
  std::vector<int> output_buffer(outputs.size(), -1);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (plan.buffers[b].role == BufferRole::kOutput) output_buffer[plan.buffers[b].io_index] = static_cast<int>(b);
  }
  std::vector<BufferView> args;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    if (allocate_output && i < plan.alloc_before.size()) {
      for (int io : plan.alloc_before[i]) {
        const int b = output_buffer[io];
        if (b < 0 || views[b].data != nullptr) continue;
        views[b].data = allocate_output(io);
        BindOutputRegion(plan, b, view_roots, &views);
      }
    }
    args.clear();
    for (int b : ins.args) args.push_back(views[b]);
    {
      TraceSpan span("kernel", ins.kernel->name());
      void* scratch = nullptr;
      if (i < plan.scratch_offset.size() && plan.scratch_offset[i] != BufferPlan::kNoScratch && arena != nullptr) {
        scratch = arena + plan.scratch_offset[i];
      }
      if (profiler != nullptr) {
        profiler->RunTimed(*ins.kernel, args.data(), scratch);
      } else {
        ins.kernel->RunWithScratch(args.data(), scratch);
      }
      if (Tracer::Global().on()) span.Arg("does", ins.kernel->Describe());
    }
    if (after) after(i, args.data());
    if (!owned.empty() && i < plan.free_after.size()) {
      for (int io : plan.free_after[i]) {
        if (static_cast<size_t>(io) < owned.size()) owned[io].reset();
      }
    }
  }
}

void Runner::RunInstruction(const Program& program, size_t i, const std::vector<void*>& arg_data,
                            Profiler* profiler, const InstructionHook& after) {
  const Instruction& ins = program.instructions.at(i);
  KILN_CHECK(arg_data.size() == ins.args.size());
  std::vector<BufferView> args(ins.args.size());
  for (size_t k = 0; k < ins.args.size(); ++k) {
    const BufferInfo& info = program.plan.buffers[ins.args[k]];
    args[k] = {arg_data[k], info.dtype, &info.dims};
  }
  if (profiler != nullptr) {
    profiler->RunTimed(*ins.kernel, args.data());
  } else {
    ins.kernel->Run(args.data());
  }
  if (after) after(i, args.data());
}

}  // namespace kiln::runtime
