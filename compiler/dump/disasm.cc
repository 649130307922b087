#include "compiler/dump/disasm.h"

#include <Zydis/Zydis.h>

#include <cstdio>
#include <cstring>

namespace kiln::jit {
namespace {

std::string Offset(size_t off) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%04zx", off);
  return buf;
}

std::string Dword(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  char buf[48];
  std::snprintf(buf, sizeof(buf), "0x%08x (%.9g)", bits, static_cast<double>(f));
  return buf;
}

// Data after the function: whole dwords, 64-byte rows where possible.
void AppendData(const uint8_t* code, size_t begin, size_t size, std::string* out) {
  size_t off = begin;
  // Padding up to the first 64-byte boundary (multi-byte nops or zeros).
  const size_t aligned = std::min(size, (begin + 63) / 64 * 64);
  if (aligned > off) {
    *out += "  " + Offset(off) + "  ; " + std::to_string(aligned - off) + " bytes of alignment padding\n";
    off = aligned;
  }
  if (off < size) *out += "  ; data (constant table)\n";
  while (off + 4 <= size) {
    uint32_t first;
    std::memcpy(&first, code + off, 4);
    if (off + 64 <= size) {
      bool same = true;
      for (size_t k = 4; k < 64 && same; k += 4) same = std::memcmp(code + off, code + off + k, 4) == 0;
      if (same) {
        *out += "  " + Offset(off) + "  .long " + Dword(first) + " x16\n";
        off += 64;
        continue;
      }
    }
    *out += "  " + Offset(off) + "  .long " + Dword(first) + "\n";
    off += 4;
  }
  for (; off < size; ++off) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "0x%02x", code[off]);
    *out += "  " + Offset(off) + "  .byte " + buf + "\n";
  }
}

}  // namespace

std::string Disassemble(const uint8_t* code, size_t size) {
  std::string out;
  size_t off = 0;
  while (off < size) {
    ZydisDisassembledInstruction ins;
    if (!ZYAN_SUCCESS(ZydisDisassembleIntel(ZYDIS_MACHINE_MODE_LONG_64, off, code + off, size - off, &ins))) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "0x%02x", code[off]);
      out += "  " + Offset(off) + "  .byte " + buf + "  ; does not decode\n";
      ++off;
      continue;
    }
    out += "  " + Offset(off) + "  " + ins.text + "\n";
    off += ins.info.length;
    if (ins.info.mnemonic == ZYDIS_MNEMONIC_RET) break;
  }
  if (off < size) AppendData(code, off, size, &out);
  return out;
}

}  // namespace kiln::jit
