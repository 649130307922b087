// Internal to the fused elementwise code generator: the simplified, scheduled
// and register-allocated form of an EwProgram (no Xbyak here), and the
// generator factory. Used by ew_codegen.cc and ew_codegen_x86.cc only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "framework/ew/ew_layout.h"
#include "framework/ew/ew_program.h"

namespace kiln::jit {

// Vector registers the generator keeps for itself: scratch of the math
// expansions, masked tails and reductions.
constexpr int kEwTempRegs = 6;

// One step of the loop body on pool registers 0..num_regs-1.
struct EwStep {
  enum class Kind : uint8_t {
    kCompute,  // instrs[instr] into dst from src (a Store has no dst)
    kSpill,    // pool register dst -> stack slot
    kReload,   // stack slot -> pool register dst
  };
  Kind kind = Kind::kCompute;
  int32_t instr = -1;
  int32_t dst = -1;
  std::array<int32_t, 3> src{{-1, -1, -1}};
  int32_t slot = -1;
};

struct EwKernelPlan {
  EwLayout layout;
  // Live instructions with duplicates merged (same op and operands), in
  // program order except that every Store comes last, so that all loads of an
  // iteration precede its stores (in-place outputs). Values index this list.
  std::vector<EwInstr> instrs;
  std::vector<EwStep> steps;
  int num_regs = 0;
  int num_spill_slots = 0;
  int num_spills = 0;
  // Outputs summed over the inner dim, in accumulator order.
  std::vector<int> inner_reduction_outputs;
};

// Simplifies and schedules `program` and allocates num_regs pool registers
// (at least 4) by furthest-next-use eviction over the straight-line body.
EwKernelPlan PlanEwKernel(const EwProgram& program, const EwLayout& layout, int num_regs);

// Vector registers of the ISA (16 ymm / 32 zmm).
int EwVectorRegs(Isa isa);

// The Xbyak generator of a plan (ew_codegen_x86.cc); call Create() on it.
// `bf16_store` is resolved (not kAuto).
std::unique_ptr<JitKernel> MakeEwGenerator(const std::string& name, const EwKernelPlan& plan, Isa isa,
                                           Bf16Store bf16_store);

}  // namespace kiln::jit
