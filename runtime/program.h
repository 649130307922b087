// The compiled runtime's data: a list of instructions over numbered buffers,
// plus a buffer plan. Instructions hold kernels (generated machine code or
// framework kernels on views); the runner binds buffers and runs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/data_type.h"
#include "framework/onednn/reorder_note.h"
#include "framework/tensor.h"

namespace kiln::runtime {

// One bound buffer as a kernel sees it.
struct BufferView {
  void* data = nullptr;
  DataType dtype = DataType::kFP32;
  const Dims* dims = nullptr;
};

// An executable unit of a compiled object.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const std::string& name() const = 0;
  // One line for listings and dumps: what it computes and how.
  virtual std::string Describe() const = 0;
  // args[i] is the buffer bound to argument i of the instruction.
  virtual void Run(const BufferView* args) const = 0;
  // Working memory a Run needs beside its arguments (oneDNN's reordered
  // arguments and scratchpads): the arena plans ScratchBytes() at the
  // instruction (BufferPlan::scratch_offset) and the runner calls
  // RunWithScratch with it, 64-byte aligned, the kernel's alone for the call.
  // Run alone (tests, the executor's per-instruction path) takes it from the
  // allocator instead.
  virtual size_t ScratchBytes() const { return 0; }
  virtual void RunWithScratch(const BufferView* args, void* scratch) const {
    (void)scratch;
    Run(args);
  }

  // For dumps (kiln dump, --jit_dump_dir); the defaults suit kernels that run
  // no code of their own. Generated machine code (valid while the kernel lives):
  virtual const uint8_t* code() const { return nullptr; }
  virtual size_t code_size() const { return 0; }
  // Op types the kernel computes, in order.
  virtual std::vector<std::string> fused_ops() const { return {}; }
  // Multi-line internals (a generated kernel's IR and iteration layout).
  virtual std::string DumpDetail() const { return {}; }
  // (input k, output j) pairs, numbered within the inputs and within the
  // outputs, that the kernel computes correctly when output j is written over
  // input k's memory (element i of j depends only on element i of k, read
  // before j's element i is written).
  virtual std::vector<std::pair<int, int>> InplacePairs() const { return {}; }
  // The oneDNN reorders one Run does, in order (kiln dump's reorders.txt).
  // `args`: buffers of the instruction's dims and dtypes whose contents do
  // not matter (a framework op runs its kernel on them in a dry run:
  // onednn::Settings::dry_run; nothing is computed, but the kernel may write
  // them). The default: a kernel that runs no oneDNN reorder.
  virtual std::vector<onednn::ReorderNote> Reorders(const BufferView* args) const {
    (void)args;
    return {};
  }

  // ---- Dynamic shapes (a compiled object that serves several shapes) ------
  // True when Run takes every size from BufferView::dims and nothing else
  // (a framework op on views): the kernel serves arguments of any dims as it is.
  virtual bool ReadsDimsAtRunTime() const { return false; }
  // The same computation for arguments of other dims (`dims[k]` for arg k, in
  // the instruction's order; dtypes and roles unchanged), sharing what does
  // not depend on sizes (generated code, the oneDNN primitive of a shape from
  // the primitive cache). The kernel checks here every assumption about sizes
  // it was made under (a dim that must be 1, a tile that must divide a dim, a
  // layout whose shape must not change): nullptr, with the reason in `why`,
  // is a failed guard, and the cluster is then compiled for the new shape.
  // The default: a kernel fixed to the dims it was made for.
  virtual std::shared_ptr<const Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const {
    (void)dims;
    if (why != nullptr) *why = name() + " is made for fixed sizes";
    return nullptr;
  }
};

struct Instruction {
  std::shared_ptr<const Kernel> kernel;
  std::vector<int> args;  // buffer ids, in the kernel's argument order
  int num_inputs = 0;     // args[0, num_inputs) are read, the rest written
  // (arg of an input, arg of an output) the planner may give one memory when
  // the input dies here (Kernel::InplacePairs, shifted to arg positions).
  std::vector<std::pair<int, int>> inplace;
};

enum class BufferRole { kInput, kOutput, kTemp };

struct BufferInfo {
  std::string name;  // the framework var it stands for
  DataType dtype = DataType::kFP32;
  Dims dims;
  BufferRole role = BufferRole::kTemp;
  int io_index = -1;     // position among the inputs / outputs for kInput/kOutput
  // kInput: the var dies in this cluster (JitSubgraph::donatable_inputs), so
  // after its last read its memory may hold temps when the launch donates it.
  bool donatable = false;
  // kTemp: -1 for the arena, else the buffer id of the donatable input (dead
  // before the temp is written) or of the output (made before the temp is
  // written, first written after its last use) whose memory it takes;
  // `offset` is within that region.
  int region = -1;
  size_t offset = 0;
  // The buffer whose memory this one is, seen with its own dims (a reshape
  // view), or -1 when it has memory of its own. Following view_of leads to
  // the root, the buffer that is placed or bound; a view is live whenever
  // its root is, and the root as long as any of its views.
  int view_of = -1;
  // kTemp that no instruction writes: its readers take only its dims (a
  // no-need-buffer input whose producer the compiler dropped or fused away).
  // It gets no memory and is bound as nullptr.
  bool dims_only = false;
  size_t bytes() const { return static_cast<size_t>(Numel(dims)) * SizeOf(dtype); }
};

struct BufferPlan {
  std::vector<BufferInfo> buffers;
  size_t arena_bytes = 0;            // with reuse of dead buffers (as planned)
  size_t arena_bytes_no_reuse = 0;   // every temp in its own slot
  // Donatable inputs that hold temps (buffer ids), and the temp bytes placed
  // in them instead of the arena.
  std::vector<int> donors;
  size_t donated_bytes = 0;
  // Outputs that hold temps before they are first written (buffer ids), and
  // the temp bytes placed in them instead of the arena.
  std::vector<int> output_regions;
  size_t output_region_bytes = 0;
  // free_after[i]: io indices of donatable inputs whose memory nothing uses
  // after instruction i (their last read, or the last use of a temp placed
  // in them). A launch that owns such an input's buffer frees it there.
  std::vector<std::vector<int>> free_after;
  // alloc_before[i]: io indices of outputs first written by instruction i (or
  // holding a temp that instruction i first writes, output_regions), for a
  // launch that allocates outputs only when they are about to be used.
  std::vector<std::vector<int>> alloc_before;
  // scratch_offset[i]: the arena offset of instruction i's scratch
  // (Kernel::ScratchBytes), kNoScratch for none.
  static constexpr size_t kNoScratch = static_cast<size_t>(-1);
  std::vector<size_t> scratch_offset;
  size_t scratch_bytes = 0;     // the largest scratch of one instruction
  size_t temp_arena_bytes = 0;  // the arena the temps alone take (arena_bytes less what scratch adds)
};

struct Program {
  std::vector<Instruction> instructions;
  BufferPlan plan;
};

// The root of buffer `b` (BufferInfo::view_of followed to the end).
int RootBuffer(const BufferPlan& plan, int b);

// Assigns arena offsets to the kTemp buffers of `plan` from their live ranges
// over `instructions` (first writer to last reader; a root's range covers
// those of its views, and views are not placed: they take their root's
// memory). With `reuse`, a temp
// first takes the memory of an input of its first writer that dies there
// when the instruction allows it in place (Instruction::inplace) and the
// sizes match; else it goes into the memory of a donatable input read for the last time
// before the temp is written (the smallest such input where it fits beside
// the temps already there), else takes the lowest arena offset free for its
// whole range (first fit, 64-byte aligned); without, each gets its own arena
// slot. Pure: same input, same plan.
void PlanArena(const std::vector<Instruction>& instructions, BufferPlan* plan, bool reuse);

// The most arena bytes in use at one instruction of a planned program (temps
// written in place over another share its bytes): no placement of those
// temps in one arena is smaller, so arena_bytes over it is fragmentation.
// For --memory_report; computed on demand, not by PlanArena.
struct ArenaPeak {
  size_t bytes = 0;
  int instruction = -1;   // the first instruction where it is; -1 for none
  std::vector<int> live;  // the arena temps live there (buffer ids, ascending)
};
ArenaPeak ArenaPeakOf(const std::vector<Instruction>& instructions, const BufferPlan& plan);

}  // namespace kiln::runtime
