// The Xbyak generator of fused elementwise kernels (AVX-512 and AVX2): the
// loop structure (described in ew_generator.h), loads and stores, and the
// instruction selection. The operand pointers are in ew_codegen_pointers.cc,
// the vector math in ew_codegen_math.cc.
#include <cmath>
#include <cstring>

#include "compiler/codegen/ew_generator.h"
#include "framework/error.h"

namespace kiln::jit {
namespace ew_x86 {

template <typename Vmm>
void EwGenerator<Vmm>::SetInnerBounds() {
  mov(rdx, rax);
  and_(rdx, static_cast<uint32_t>(-(unroll_ * kW)));
  mov(qword[rsp + kFrameBoundU], rdx);
  mov(rdx, rax);
  and_(rdx, static_cast<uint32_t>(-kW));
  mov(qword[rsp + kFrameBound1], rdx);
  and_(rax, kW - 1);
  mov(qword[rsp + kFrameRem], rax);
  if (bound_in_reg_) {
    mov(reg_bound_u_, qword[rsp + kFrameBoundU]);
    mov(reg_bound_1_, qword[rsp + kFrameBound1]);
    mov(reg_rem_, rax);
  }
  if constexpr (!kAvx512) {
    for (int i = 0; i < 16; ++i) mov(dword[rsp + kFrameMaskTab + 4 * i], i < 8 ? -1 : 0);
  }
  Xbyak::Label l_no_tail;
  test(rax, rax);
  jz(l_no_tail, T_NEAR);
  SetTailMaskRuntime();
  L(l_no_tail);
}

template <typename Vmm>
void EwGenerator<Vmm>::SetTailMaskRuntime() {
  if constexpr (kAvx512) {
    xor_(edx, edx);
    bts(edx, eax);
    dec(edx);
    kmovw(k1, edx);
  } else {
    // Lanes 0..rem-1 set: 8 dwords starting at MaskTab + 4*(8-rem).
    neg(rax);
    vmovups(T(0), ptr[rsp + rax * 4 + kFrameMaskTab + 32]);
    vmovups(ptr[rsp + kFrameMask], T(0));
  }
}

template <typename Vmm>
int EwGenerator<Vmm>::UnrollFactor() const {
  int cost = 0;
  for (const EwStep& s : plan_.steps) {
    if (s.kind != EwStep::Kind::kCompute) {
      ++cost;
      continue;
    }
    switch (plan_.instrs[s.instr].op) {
      case EwOp::kExp:
      case EwOp::kTanh:
      case EwOp::kSigmoid:
      case EwOp::kErf:
      case EwOp::kErfc:
      case EwOp::kLog: cost += 25; break;
      default: ++cost;
    }
  }
  return cost <= 12 ? 4 : cost <= 40 ? 2 : 1;
}

template <typename Vmm>
void EwGenerator<Vmm>::Generate() {
  const int rank = layout_.rank;
  num_acc_ = static_cast<int>(plan_.inner_reduction_outputs.size());
  acc_of_output_.assign(layout_.outputs.size(), -1);
  for (int a = 0; a < num_acc_; ++a) acc_of_output_[plan_.inner_reduction_outputs[a]] = a;
  KILN_CHECK(kEwTempRegs + num_acc_ + plan_.num_regs <= EwVectorRegs(kAvx512 ? Isa::kAvx512 : Isa::kAvx2),
             "ew kernel: plan uses more vector registers than the ISA has");
  AssignPointers();
  unroll_ = UnrollFactor();

  Preamble(static_cast<size_t>(frame_bytes_));
  mov(qword[rsp + kFrameArgs], rdi);
  mov(rax, qword[rdi + static_cast<int>(offsetof(EwKernelArgs, steps))]);
  mov(qword[rsp + kFrameSteps], rax);
  mov(rax, qword[rdi + static_cast<int>(offsetof(EwKernelArgs, begin))]);
  mov(qword[rsp + kFrameIdx], rax);
  mov(rdx, qword[rdi + static_cast<int>(offsetof(EwKernelArgs, end))]);
  mov(qword[rsp + kFrameEnd], rdx);
  Xbyak::Label l_done, l_row;
  cmp(rax, rdx);
  jge(l_done, T_NEAR);
  LoadPointers();

  if (rank == 1) {
    mov(rax, qword[rsp + kFrameEnd]);
    sub(rax, qword[rsp + kFrameIdx]);
  } else {
    CopySteps();
    mov(rdx, qword[rsp + kFrameArgs]);
    mov(rdx, qword[rdx + static_cast<int>(offsetof(EwKernelArgs, dims))]);
    for (int d = 1; d <= rank - 2; ++d) {
      mov(rax, qword[rdx + 8 * d]);
      mov(qword[rsp + kFrameDims + 8 * d], rax);
      mov(qword[rsp + kFrameIdx + 8 * d], 0);
    }
    mov(rax, qword[rdx + 8 * (rank - 1)]);
  }
  SetInnerBounds();

  L(l_row);
  for (int a = 0; a < num_acc_; ++a) Xor(Acc(a), Acc(a), Acc(a));
  InnerLoop();
  Epilogue();
  if (rank >= 2) {
    for (int level = rank - 2; level >= 1; --level) {
      Xbyak::Label l_wrap;
      mov(rax, qword[rsp + kFrameIdx + 8 * level]);
      inc(rax);
      mov(qword[rsp + kFrameIdx + 8 * level], rax);
      cmp(rax, qword[rsp + kFrameDims + 8 * level]);
      jge(l_wrap, T_NEAR);
      AddPtrDeltas(level);
      jmp(l_row, T_NEAR);
      L(l_wrap);
      mov(qword[rsp + kFrameIdx + 8 * level], 0);
    }
    inc(qword[rsp + kFrameIdx]);
    mov(rax, qword[rsp + kFrameIdx]);
    cmp(rax, qword[rsp + kFrameEnd]);
    jge(l_done, T_NEAR);
    AddPtrDeltas(0);
    jmp(l_row, T_NEAR);
  }
  L(l_done);
  Postamble();
  EmitConstTable();
}

// The bounds and the tail mask come from SetInnerBounds. A row shorter
// than a vector goes straight to its tail; each loop is tested at its top
// once and at its bottom after every block.
template <typename Vmm>
void EwGenerator<Vmm>::InnerLoop() {
  auto cmp_bound = [&](const Reg64& reg, int off) {
    if (bound_in_reg_) {
      cmp(r8, reg);
    } else {
      cmp(r8, qword[rsp + off]);
    }
  };
  xor_(r8, r8);  // r8 = element index of the current vector in the row
  Xbyak::Label l_unroll, l_one, l_tail, l_tail_end;
  cmp_bound(reg_bound_1_, kFrameBound1);
  jae(l_tail, T_NEAR);
  if (unroll_ > 1) {
    cmp_bound(reg_bound_u_, kFrameBoundU);
    jae(l_one, T_NEAR);
    L(l_unroll);
    for (int u = 0; u < unroll_; ++u) Body(u * kW, false);
    add(r8, unroll_ * kW);
    cmp_bound(reg_bound_u_, kFrameBoundU);
    jb(l_unroll, T_NEAR);
    cmp_bound(reg_bound_1_, kFrameBound1);
    jae(l_tail, T_NEAR);
  }
  L(l_one);
  Body(0, false);
  add(r8, kW);
  cmp_bound(reg_bound_1_, kFrameBound1);
  jb(l_one, T_NEAR);
  L(l_tail);
  if (bound_in_reg_) {
    test(reg_rem_, reg_rem_);
  } else {
    cmp(qword[rsp + kFrameRem], 0);
  }
  jz(l_tail_end, T_NEAR);
  Body(0, true);
  L(l_tail_end);
}

template <typename Vmm>
void EwGenerator<Vmm>::Body(int off, bool masked) {
  for (const EwStep& s : plan_.steps) {
    switch (s.kind) {
      case EwStep::Kind::kSpill: vmovups(ptr[rsp + spill_off_ + 64 * s.slot], Pool(s.dst)); break;
      case EwStep::Kind::kReload: vmovups(Pool(s.dst), ptr[rsp + spill_off_ + 64 * s.slot]); break;
      case EwStep::Kind::kCompute: Compute(s, off, masked); break;
    }
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::LoadInput(const Vmm& d, int input, int off, bool masked) {
  const Reg64 p = PtrReg(InPtr(input));
  const EwOperand& op = layout_.inputs[input];
  if (op.elem != EwElem::kF32) {
    op.elem == EwElem::kBF16 ? LoadBf16(d, p, op, off, masked) : LoadBool(d, p, op, off, masked);
    return;
  }
  if (!InnerContiguous(op)) {
    vbroadcastss(d, dword[p]);
    return;
  }
  const Address addr = At(p, op, off);
  if (!masked) {
    vmovups(d, addr);
  } else if constexpr (kAvx512) {
    vmovups(d | k1 | T_z, addr);
  } else {
    vmovups(T(0), ptr[rsp + kFrameMask]);
    vmaskmovps(d, T(0), addr);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::StoreOutput(const Vmm& s, int output, int off, bool masked) {
  const int acc = acc_of_output_[output];
  if (acc >= 0) {
    if (!masked) {
      vaddps(Acc(acc), Acc(acc), s);
    } else if constexpr (kAvx512) {
      vaddps(Acc(acc) | k1, Acc(acc), s);
    } else {
      vmovups(T(0), ptr[rsp + kFrameMask]);
      vandps(T(0), T(0), s);
      vaddps(Acc(acc), Acc(acc), T(0));
    }
    return;
  }
  const Reg64 p = PtrReg(OutPtr(output));
  const EwOperand& op = layout_.outputs[output];
  if (op.elem != EwElem::kF32) {  // never a reduction (EwLayout::Validate)
    op.elem == EwElem::kBF16 ? StoreBf16(s, p, op, off, masked) : StoreBool(s, p, op, off, masked);
    return;
  }
  const Address addr = At(p, op, off);
  const bool reduce = layout_.IsReduction(output);
  if (!masked) {
    if (reduce) {
      vaddps(T(0), s, addr);
      vmovups(addr, T(0));
    } else {
      vmovups(addr, s);
    }
    return;
  }
  if constexpr (kAvx512) {
    if (reduce) {
      vmovups(T(0) | k1 | T_z, addr);
      vaddps(T(0), T(0), s);
      vmovups(addr | k1, T(0));
    } else {
      vmovups(addr | k1, s);
    }
  } else {
    vmovups(T(1), ptr[rsp + kFrameMask]);
    if (reduce) {
      vmaskmovps(T(0), T(1), addr);
      vaddps(T(0), T(0), s);
      vmaskmovps(addr, T(1), T(0));
    } else {
      vmaskmovps(addr, T(1), s);
    }
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Compute(const EwStep& s, int off, bool masked) {
  const EwInstr& in = plan_.instrs[s.instr];
  if (in.op == EwOp::kStore) {
    StoreOutput(Pool(s.src[0]), in.operand, off, masked);
    return;
  }
  const Vmm d = Pool(s.dst);
  const Vmm a = s.src[0] >= 0 ? Pool(s.src[0]) : d;
  const Vmm b = s.src[1] >= 0 ? Pool(s.src[1]) : d;
  switch (in.op) {
    case EwOp::kLoad: LoadInput(d, in.operand, off, masked); break;
    case EwOp::kConst: vmovups(d, C(in.imm)); break;
    case EwOp::kAdd: vaddps(d, a, b); break;
    case EwOp::kSub: vsubps(d, a, b); break;
    case EwOp::kMul: vmulps(d, a, b); break;
    case EwOp::kDiv: vdivps(d, a, b); break;
    case EwOp::kMax:
    case EwOp::kMin: MaxMin(in.op, d, a, b, IsPlainConst(in.args[0]), IsPlainConst(in.args[1])); break;
    case EwOp::kNeg: Xor(d, a, CI(kSignBit)); break;
    case EwOp::kAbs: And(d, a, CI(kAbsMask)); break;
    case EwOp::kSqrt: vsqrtps(d, a); break;
    case EwOp::kExp: Exp(d, a); break;
    case EwOp::kTanh: Tanh(d, a); break;
    case EwOp::kSigmoid: Sigmoid(d, a); break;
    case EwOp::kErf: Erf(d, a); break;
    case EwOp::kErfc: Erfc(d, a); break;
    case EwOp::kLog: Log(d, a); break;
    case EwOp::kFma: Fma(d, a, b, Pool(s.src[2])); break;
    case EwOp::kSelect: SelectNonZero(d, a, b, Pool(s.src[2])); break;
    case EwOp::kSelectGtZero: SelectGtZero(d, a, b); break;
    case EwOp::kLt: case EwOp::kLe: case EwOp::kGt:
    case EwOp::kGe: case EwOp::kEq: case EwOp::kNe: Compare(in.op, d, a, b); break;
    case EwOp::kStore: break;
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Epilogue() {
  for (int a = 0; a < num_acc_; ++a) {
    const Xbyak::Ymm y1(1);
    const Xbyak::Xmm x0(0), x2(2);
    if constexpr (kAvx512) {
      vextractf64x4(y1, Acc(a), 1);
      vaddps(y1, y1, Xbyak::Ymm(Acc(a).getIdx()));
    } else {
      vmovaps(y1, Acc(a));
    }
    vextractf128(x0, y1, 1);
    vaddps(x0, x0, Xbyak::Xmm(1));
    vmovhlps(x2, x2, x0);
    vaddps(x0, x0, x2);
    vmovshdup(x2, x0);
    vaddss(x0, x0, x2);
    const Reg64 p = PtrReg(OutPtr(plan_.inner_reduction_outputs[a]));
    vaddss(x0, x0, dword[p]);
    vmovss(dword[p], x0);
  }
}


template <typename Vmm>
void EwGenerator<Vmm>::EmitConstTable() {
  align(64);
  L(l_consts_);
  for (uint32_t bits : consts_) {
    for (int i = 0; i < 16; ++i) dd(bits);
  }
}

template class EwGenerator<Xbyak::Zmm>;
template class EwGenerator<Xbyak::Ymm>;

}  // namespace ew_x86

std::unique_ptr<JitKernel> MakeEwGenerator(const std::string& name, const EwKernelPlan& plan, Isa isa,
                                           Bf16Store bf16_store) {
  if (isa == Isa::kAvx512) return std::make_unique<ew_x86::EwGenerator<Xbyak::Zmm>>(name, plan, bf16_store);
  return std::make_unique<ew_x86::EwGenerator<Xbyak::Ymm>>(name, plan, bf16_store);
}

}  // namespace kiln::jit
