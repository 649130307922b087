// The x86 vector ISAs kiln generates code for: one enum for the code
// generators, the compile options and the cache keys.
#pragma once

#include <string>

namespace kiln {

enum class Isa { kAvx2, kAvx512 };

// "avx2" | "avx512".
const char* IsaName(Isa isa);
// Throws InvalidArgument naming the value for anything else.
Isa ParseIsa(const std::string& name);
// CPU support: kAvx512 needs AVX512F, kAvx2 needs AVX2 and FMA.
bool IsaSupported(Isa isa);
// AVX512F, AVX512BW and AVX512_BF16 (vcvtneps2bf16, vdpbf16ps): the bf16
// fused attention kernels' native path.
bool HasAvx512Bf16();
// HasAvx512Bf16() and AMX-TILE + AMX-BF16, with the kernel's permission to
// use the tile data (requested once for the process, as Linux asks:
// arch_prctl ARCH_REQ_XCOMP_PERM): the bf16 fused attention's tdpbf16ps
// path.
bool AmxUsable();
// The best ISA of this CPU; throws kiln::Error (kUnimplemented) when the CPU
// has neither.
Isa HostIsa();
// HostIsa(), or kAvx2 on a CPU with neither (compiling for it then fails
// with HostIsa's error): the default of CompileOptions, which never throws.
Isa DefaultIsa();

}  // namespace kiln
