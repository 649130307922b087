// Operand pointers of the fused elementwise kernels (the generator is in
// ew_codegen_x86.cc, described in ew_generator.h): which GPR or frame slot
// holds each row pointer, the inner loop's bounds and the row level's steps;
// loading the pointers at dim-0 index `begin`; the steps of the levels,
// copied from the args; and advancing the pointers from row to row.
#include "compiler/codegen/ew_generator.h"

namespace kiln::jit {
namespace ew_x86 {

template <typename Vmm>
void EwGenerator<Vmm>::AssignPointers() {
  const size_t n_in = layout_.inputs.size();
  ptrs_.assign(n_in + layout_.outputs.size(), PtrLoc());
  for (const EwInstr& in : plan_.instrs) {
    if (in.op == EwOp::kLoad) ptrs_[in.operand].used = true;
  }
  for (size_t k = 0; k < layout_.outputs.size(); ++k) ptrs_[n_in + k].used = true;
  // Operands touched on every vector get the GPRs first.
  const Reg64 pool[] = {rbx, rbp, rsi, rdi, rcx, r9, r10, r11, r12, r13, r14, r15};
  size_t next_reg = 0;
  int next_slot = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < ptrs_.size(); ++k) {
      PtrLoc& p = ptrs_[k];
      if (!p.used) continue;
      const EwOperand& op = k < n_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
      if ((pass == 0) != InnerContiguous(op)) continue;
      if (next_reg < sizeof(pool) / sizeof(pool[0])) {
        p.in_reg = true;
        p.reg = pool[next_reg++];
      } else {
        p.off = kFramePtrs + 8 * next_slot++;
      }
    }
  }
  // GPRs left over hold the inner loop's bounds (else they stay in the frame).
  const size_t pool_size = sizeof(pool) / sizeof(pool[0]);
  bound_in_reg_ = next_reg + 3 <= pool_size;
  if (bound_in_reg_) {
    reg_bound_u_ = pool[next_reg++];
    reg_bound_1_ = pool[next_reg++];
    reg_rem_ = pool[next_reg++];
  }
  // Then the steps of the innermost row level, the one taken on every row.
  step_reg_.assign(ptrs_.size(), -1);
  const int row_level = layout_.rank - 2;
  for (size_t k = 0; k < ptrs_.size() && row_level >= 0 && next_reg < pool_size; ++k) {
    if (ptrs_[k].used && Moves(k, row_level)) step_reg_[k] = pool[next_reg++].getIdx();
  }
  step_tab_off_ = kFramePtrs + 8 * next_slot;
  spill_off_ = step_tab_off_ + 8 * kEwMaxRank * static_cast<int>(ptrs_.size());
  spill_off_ = (spill_off_ + 63) / 64 * 64;
  frame_bytes_ = spill_off_ + 64 * plan_.num_spill_slots;
}

template <typename Vmm>
void EwGenerator<Vmm>::LoadPointers() {
  const size_t n_in = layout_.inputs.size();
  for (size_t k = 0; k < ptrs_.size(); ++k) {
    const PtrLoc& p = ptrs_[k];
    if (!p.used) continue;
    const bool is_in = k < n_in;
    const EwOperand& op = is_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
    const int idx = static_cast<int>(is_in ? k : k - n_in);
    mov(rax, qword[rsp + kFrameArgs]);
    mov(rax, qword[rax + static_cast<int>(is_in ? offsetof(EwKernelArgs, inputs) : offsetof(EwKernelArgs, outputs))]);
    mov(rax, qword[rax + 8 * idx]);
    if (op.strides[0] != 0) {  // + begin * the dim-0 step
      mov(rdx, qword[rsp + kFrameSteps]);
      mov(rdx, qword[rdx + static_cast<int>(8 * (kEwMaxRank * k + kEwMaxRank - 1))]);
      imul(rdx, qword[rsp + kFrameIdx]);
      add(rax, rdx);
    }
    if (p.in_reg) {
      mov(p.reg, rax);
    } else {
      mov(qword[rsp + p.off], rax);
    }
  }
}

// The steps of the levels, from the args into the frame, and those of the
// row level into GPRs where some are left: a step loaded through the args
// pointer on every row made short rows up to 1.8x slower than immediates,
// one loaded from the frame up to 1.4x.
template <typename Vmm>
void EwGenerator<Vmm>::CopySteps() {
  mov(rdx, qword[rsp + kFrameSteps]);
  for (size_t k = 0; k < ptrs_.size(); ++k) {
    if (!ptrs_[k].used) continue;
    for (int level = 0; level <= layout_.rank - 2; ++level) {
      mov(rax, qword[rdx + static_cast<int>(8 * (kEwMaxRank * k + level))]);
      mov(qword[rsp + StepSlot(k, level)], rax);
    }
    if (step_reg_[k] >= 0) mov(Reg64(step_reg_[k]), rax);  // the row level's (the last copied)
  }
}

// Moves every row pointer from the last row of level `level`'s inner levels
// to the first row of the next index at `level`, by the step the args give
// (none for an operand whose strides are 0 from `level` to dim r-2: its step
// is 0 at every size).
template <typename Vmm>
void EwGenerator<Vmm>::AddPtrDeltas(int level) {
  for (size_t k = 0; k < ptrs_.size(); ++k) {
    const PtrLoc& p = ptrs_[k];
    if (!p.used) continue;
    if (!Moves(k, level)) continue;
    if (level == layout_.rank - 2 && step_reg_[k] >= 0) {
      if (p.in_reg) {
        add(p.reg, Reg64(step_reg_[k]));
      } else {
        add(qword[rsp + p.off], Reg64(step_reg_[k]));
      }
      continue;
    }
    const Address step = qword[rsp + StepSlot(k, level)];
    if (p.in_reg) {
      add(p.reg, step);
    } else {
      mov(rax, step);
      add(qword[rsp + p.off], rax);
    }
  }
}

#define KILN_EW_POINTERS_INSTANTIATE(Vmm)                 \
  template void EwGenerator<Vmm>::AssignPointers();       \
  template void EwGenerator<Vmm>::LoadPointers();         \
  template void EwGenerator<Vmm>::CopySteps();            \
  template void EwGenerator<Vmm>::AddPtrDeltas(int);
KILN_EW_POINTERS_INSTANTIATE(Xbyak::Zmm)
KILN_EW_POINTERS_INSTANTIATE(Xbyak::Ymm)
#undef KILN_EW_POINTERS_INSTANTIATE

}  // namespace ew_x86
}  // namespace kiln::jit
