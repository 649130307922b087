// bf16 (the top half of an f32) conversions, as the JIT's generated kernels
// perform them: round to nearest even, with vcvtneps2bf16's rules for the
// special cases (a zero or denormal f32 becomes a zero of its sign, a NaN a
// quiet NaN with its sign and top payload bits). kiln's generated kernels use
// that instruction where the CPU has AVX512_BF16 and an exact integer
// sequence of these rules elsewhere, so their bits do not depend on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

inline uint16_t FloatToBf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x through bf16 and back.
inline float RoundThroughBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

}  // namespace kiln
