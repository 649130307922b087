// bool operands of the fused elementwise kernels and the comparisons that
// make their values: a bool is one byte (0 or 1) in memory and 0.0 or 1.0 in
// a float lane. Loads widen bytes to dwords and convert; stores compare
// with zero (unordered, so NaN stores 1 as C++'s float-to-bool does) and
// narrow to bytes. Masked tails use AVX-512's masks; on AVX2, whose masked
// moves have dword granules, a tail goes through the frame's narrow slot a
// byte at a time (CopyNarrowTail, shared with bf16).
#include "compiler/codegen/ew_generator.h"
#include "framework/error.h"

namespace kiln::jit {
namespace ew_x86 {

namespace {

// vcmpps predicates. Ordered for all but ne: a NaN operand makes them false,
// and ne true (IEEE, as C++'s operators).
int Predicate(EwOp op) {
  constexpr int kLtOq = 0x11, kLeOq = 0x12, kGtOq = 0x1e, kGeOq = 0x1d;
  switch (op) {
    case EwOp::kLt: return kLtOq;
    case EwOp::kLe: return kLeOq;
    case EwOp::kGt: return kGtOq;
    case EwOp::kGe: return kGeOq;
    case EwOp::kEq: return kCmpEqOq;
    case EwOp::kNe: return kCmpNeqUq;
    default: break;
  }
  KILN_CHECK(false, "ew kernel: ", EwOpName(op), " is not a comparison");
  return 0;
}

}  // namespace

template <typename Vmm>
void EwGenerator<Vmm>::Compare(EwOp op, const Vmm& d, const Vmm& a, const Vmm& b) {
  const int pred = Predicate(op);
  if constexpr (kAvx512) {
    vcmpps(k2, a, b, pred);
    vmovups(d | k2 | T_z, C(1.0f));
  } else {
    vcmpps(d, a, b, pred);  // all ones where true
    vandps(d, d, C(1.0f));
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::LoadBool(const Vmm& d, const Reg64& p, const EwOperand& op, int off, bool masked) {
  if (!InnerContiguous(op)) {  // one value for the whole vector
    movzx(edx, byte[p]);
    if constexpr (kAvx512) {
      vpbroadcastd(d, edx);
    } else {
      vmovd(Xbyak::Xmm(d.getIdx()), edx);
      vpbroadcastd(d, Xbyak::Xmm(d.getIdx()));
    }
  } else if constexpr (kAvx512) {
    // Masked-off bytes are not read (fault suppression), so a tail at the
    // end of a buffer is safe.
    const Address addr = At(p, op, off);
    if (masked) {
      vpmovzxbd(d | k1 | T_z, addr);
    } else {
      vpmovzxbd(d, addr);
    }
  } else if (!masked) {
    vpmovzxbd(d, At(p, op, off));
  } else {
    const Xbyak::Xmm x(d.getIdx());
    lea(rdx, At(p, op, off));
    vpxor(x, x, x);
    vmovdqu(ptr[rsp + kFrameNarrow], x);
    CopyNarrowTail(true, 1);
    vpmovzxbd(d, ptr[rsp + kFrameNarrow]);
  }
  vcvtdq2ps(d, d);
}

template <typename Vmm>
void EwGenerator<Vmm>::StoreBool(const Vmm& s, const Reg64& p, const EwOperand& op, int off, bool masked) {
  const Address addr = At(p, op, off);
  if constexpr (kAvx512) {
    vcmpps(k2, s, CI(0), kCmpNeqUq);
    vmovdqu32(T(0) | k2 | T_z, CI(1));
    if (masked) {
      vpmovdb(addr | k1, T(0));
    } else {
      vpmovdb(addr, T(0));
    }
    return;
  }
  vcmpps(T(0), s, CI(0), kCmpNeqUq);
  vpsrld(T(0), T(0), 31);         // 1 or 0 per dword
  vpackusdw(T(0), T(0), T(0));    // words 0-3 in lane 0, 4-7 in lane 1
  vpermq(T(0), T(0), 0x08);       // both into the low 16 bytes
  const Xbyak::Xmm x0(0);
  vpackuswb(x0, x0, x0);          // the 8 bytes in the low quadword
  if (!masked) {
    vmovq(addr, x0);
    return;
  }
  lea(rdx, addr);
  vmovq(ptr[rsp + kFrameNarrow], x0);
  CopyNarrowTail(false, 1);
}

#define KILN_EW_BOOL_INSTANTIATE(Vmm)                                                              \
  template void EwGenerator<Vmm>::Compare(EwOp, const Vmm&, const Vmm&, const Vmm&);               \
  template void EwGenerator<Vmm>::LoadBool(const Vmm&, const Reg64&, const EwOperand&, int, bool); \
  template void EwGenerator<Vmm>::StoreBool(const Vmm&, const Reg64&, const EwOperand&, int, bool);
KILN_EW_BOOL_INSTANTIATE(Xbyak::Zmm)
KILN_EW_BOOL_INSTANTIATE(Xbyak::Ymm)
#undef KILN_EW_BOOL_INSTANTIATE

}  // namespace ew_x86
}  // namespace kiln::jit
