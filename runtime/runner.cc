#include "runtime/runner.h"

#include <cstdlib>
#include <memory>

#include "framework/error.h"

namespace kiln::runtime {
namespace {

// Per-thread arena, grown to the largest plan this thread has run.
struct Arena {
  std::unique_ptr<Allocation> block;
  void* Get(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (!block || block->size() < bytes) block = std::make_unique<Allocation>(bytes);
    return block->ptr();
  }
};

thread_local Arena tls_arena;

}  // namespace

void Runner::Run(const Program& program, const std::vector<void*>& inputs, const std::vector<void*>& outputs) {
  const BufferPlan& plan = program.plan;
  char* arena = static_cast<char*>(tls_arena.Get(plan.arena_bytes));
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
      case BufferRole::kTemp:
        views[b].data = arena + info.offset;
        break;
    }
  }
  std::vector<BufferView> args;
  for (const Instruction& ins : program.instructions) {
    args.clear();
    for (int b : ins.args) args.push_back(views[b]);
    ins.kernel->Run(args.data());
  }
}

void Runner::RunInstruction(const Program& program, size_t i, const std::vector<void*>& arg_data) {
  const Instruction& ins = program.instructions.at(i);
  KILN_CHECK(arg_data.size() == ins.args.size());
  std::vector<BufferView> args(ins.args.size());
  for (size_t k = 0; k < ins.args.size(); ++k) {
    const BufferInfo& info = program.plan.buffers[ins.args[k]];
    args[k] = {arg_data[k], info.dtype, &info.dims};
  }
  ins.kernel->Run(args.data());
}

}  // namespace kiln::runtime
