#include "compiler/codegen/isa.h"

#include <sys/syscall.h>
#include <unistd.h>
#include <xbyak/xbyak_util.h>

#include "framework/error.h"

namespace kiln {

const char* IsaName(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : "avx2"; }

Isa ParseIsa(const std::string& name) {
  if (name == "avx512") return Isa::kAvx512;
  if (name == "avx2") return Isa::kAvx2;
  ThrowInvalidArgument("unknown ISA '", name, "': expected avx512 or avx2");
}

bool IsaSupported(Isa isa) {
  static const Xbyak::util::Cpu cpu;
  using Cpu = Xbyak::util::Cpu;
  if (isa == Isa::kAvx512) return cpu.has(Cpu::tAVX512F);
  return cpu.has(Cpu::tAVX2) && cpu.has(Cpu::tFMA);
}

bool HasAvx512Bf16() {
  static const Xbyak::util::Cpu cpu;
  using Cpu = Xbyak::util::Cpu;
  return cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512BW) && cpu.has(Cpu::tAVX512_BF16);
}

bool AmxUsable() {
  static const bool usable = [] {
    static const Xbyak::util::Cpu cpu;
    using Cpu = Xbyak::util::Cpu;
    if (!HasAvx512Bf16() || !cpu.has(Cpu::tAMX_TILE) || !cpu.has(Cpu::tAMX_BF16)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

Isa HostIsa() {
  static const bool avx512 = IsaSupported(Isa::kAvx512);
  static const bool avx2 = IsaSupported(Isa::kAvx2);
  if (avx512) return Isa::kAvx512;
  if (avx2) return Isa::kAvx2;
  ThrowUnimplemented("jit: this CPU has neither AVX-512F nor AVX2+FMA");
}

Isa DefaultIsa() { return IsaSupported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2; }

}  // namespace kiln
