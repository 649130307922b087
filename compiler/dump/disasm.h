// Disassembly of generated machine code (Zydis, Intel syntax) for dumps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::jit {

// One instruction a line, "  0x0040  vaddps zmm0, zmm1, zmm2", addresses as
// offsets from `code` so the text is the same in every process. Decoding
// stops after the first `ret`: kiln's generators emit one function with one
// return and put data after it (alignment padding, constant tables), which
// is printed as ".long" rows, a 64-byte row of one repeated dword (a
// broadcast constant) as one line "x16". Bytes that do not decode before the
// ret print as ".byte".
std::string Disassemble(const uint8_t* code, size_t size);

}  // namespace kiln::jit
