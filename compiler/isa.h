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
// The best ISA of this CPU; throws kiln::Error (kUnimplemented) when the CPU
// has neither.
Isa HostIsa();

}  // namespace kiln
