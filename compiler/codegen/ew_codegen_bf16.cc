// bf16 operands of the fused elementwise kernels: widening loads, and stores
// that round to nearest even (framework/bf16.h's rules) with vcvtneps2bf16
// or with an integer sequence that gives the same bits on any AVX2 CPU.
// Masked tails use AVX-512's masks; on AVX2, whose masked moves have dword
// granules, a tail goes through a 16-byte frame slot a word at a time.
#include "compiler/codegen/ew_generator.h"

namespace kiln::jit {
namespace ew_x86 {

constexpr uint32_t kExpMask = 0x7f800000u;

// Shared with the bool operands (ew_codegen_bool.cc), whose tails are bytes.
template <typename Vmm>
void EwGenerator<Vmm>::CopyNarrowTail(bool to_frame, int bytes) {
  auto copy = [&](int i) {
    if (bytes == 1) {
      const Address mem = byte[rdx + i];
      const Address slot = byte[rsp + kFrameNarrow + i];
      mov(al, to_frame ? mem : slot);
      mov(to_frame ? slot : mem, al);
      return;
    }
    const Address mem = word[rdx + 2 * i];
    const Address slot = word[rsp + kFrameNarrow + 2 * i];
    mov(ax, to_frame ? mem : slot);
    mov(to_frame ? slot : mem, ax);
  };
  Xbyak::Label l_done;
  for (int i = 0; i < kW - 1; ++i) {  // rem (1..kW-1) is in the frame
    cmp(qword[rsp + kFrameRem], i);
    jbe(l_done, T_NEAR);
    copy(i);
  }
  L(l_done);
}

template <typename Vmm>
void EwGenerator<Vmm>::LoadBf16(const Vmm& d, const Reg64& p, const EwOperand& op, int off, bool masked) {
  if (!InnerContiguous(op)) {  // one value for the whole vector
    movzx(edx, word[p]);
    shl(edx, 16);
    if constexpr (kAvx512) {
      vpbroadcastd(d, edx);
    } else {
      vmovd(Xbyak::Xmm(d.getIdx()), edx);
      vpbroadcastd(d, Xbyak::Xmm(d.getIdx()));
    }
    return;
  }
  const Address addr = At(p, op, off);
  if constexpr (kAvx512) {
    if (masked) {
      vpmovzxwd(d | k1 | T_z, addr);
    } else {
      vpmovzxwd(d, addr);
    }
  } else if (!masked) {
    vpmovzxwd(d, addr);
  } else {
    const Xbyak::Xmm x(d.getIdx());
    lea(rdx, addr);
    vpxor(x, x, x);
    vmovdqu(ptr[rsp + kFrameNarrow], x);
    CopyNarrowTail(true, 2);
    vpmovzxwd(d, ptr[rsp + kFrameNarrow]);
  }
  vpslld(d, d, 16);
}

template <typename Vmm>
void EwGenerator<Vmm>::RoundToBf16Bits(const Vmm& s) {
  // x = s with zeros and denormals flushed to a zero of their sign; then
  // (x + 0x7fff + bit 16 of x) >> 16; a NaN gives (s >> 16) | 0x40.
  if constexpr (kAvx512) {
    vpandd(T(2), s, CI(kExpMask));
    vptestmd(k3, T(2), T(2));
    vpandd(T(0), s, CI(kSignBit));
    vmovdqa32(T(0) | k3, s);
  } else {
    vandps(T(2), s, CI(kExpMask));
    vpxor(T(1), T(1), T(1));
    vpcmpeqd(T(2), T(2), T(1));
    vandps(T(0), s, CI(kSignBit));
    vblendvps(T(0), s, T(0), T(2));
  }
  vpsrld(T(1), T(0), 16);
  And(T(1), T(1), CI(1));
  vpaddd(T(1), T(1), CI(0x7fff));
  vpaddd(T(1), T(1), T(0));
  vpsrld(T(1), T(1), 16);
  vpsrld(T(0), s, 16);
  if constexpr (kAvx512) {
    vcmpps(k2, s, s, kCmpUnordQ);
    vpord(T(1) | k2, T(0), CI(0x40));
  } else {
    vcmpps(T(2), s, s, kCmpUnordQ);
    vpor(T(0), T(0), CI(0x40));
    vblendvps(T(1), T(1), T(0), T(2));
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::StoreBf16(const Vmm& s, const Reg64& p, const EwOperand& op, int off, bool masked) {
  const Address addr = At(p, op, off);
  if constexpr (kAvx512) {
    if (bf16_store_ == Bf16Store::kVcvtneps2bf16) {
      const Xbyak::Ymm y0(0);
      vcvtneps2bf16(y0, s);
      if (masked) {
        vmovdqu16(addr | k1, y0);
      } else {
        vmovdqu(addr, y0);
      }
    } else {
      RoundToBf16Bits(s);
      if (masked) {
        vpmovdw(addr | k1, T(1));
      } else {
        vpmovdw(addr, T(1));
      }
    }
    return;
  }
  RoundToBf16Bits(s);
  vpackusdw(T(1), T(1), T(1));  // words 0-3 in lane 0, 4-7 in lane 1
  vpermq(T(1), T(1), 0x08);     // both into the low 16 bytes
  const Xbyak::Xmm x1(1);
  if (!masked) {
    vmovdqu(addr, x1);
    return;
  }
  lea(rdx, addr);
  vmovdqu(ptr[rsp + kFrameNarrow], x1);
  CopyNarrowTail(false, 2);
}

#define KILN_EW_BF16_INSTANTIATE(Vmm)                                                              \
  template void EwGenerator<Vmm>::CopyNarrowTail(bool, int);                                       \
  template void EwGenerator<Vmm>::LoadBf16(const Vmm&, const Reg64&, const EwOperand&, int, bool); \
  template void EwGenerator<Vmm>::RoundToBf16Bits(const Vmm&);                                     \
  template void EwGenerator<Vmm>::StoreBf16(const Vmm&, const Reg64&, const EwOperand&, int, bool);
KILN_EW_BF16_INSTANTIATE(Xbyak::Zmm)
KILN_EW_BF16_INSTANTIATE(Xbyak::Ymm)
#undef KILN_EW_BF16_INSTANTIATE

}  // namespace ew_x86
}  // namespace kiln::jit
