// Hash combining for typed cache keys (primitive cache, compiler cache).
//
// A key's Hash() folds each field into a running seed with HashCombine. Plain
// XOR of field hashes is not enough: equal fields cancel ([4,4] hashes like
// [8,8]) and small integers collide. Every value goes through the splitmix64
// finaliser first, so one changed bit flips about half of the seed's bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace kiln {

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64 bits
// with full avalanche.
inline uint64_t Mix64(uint64_t v) {
  v += 0x9e3779b97f4a7c15ull;
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
  return v ^ (v >> 31);
}

// Folds `v` into `seed`. Order matters: (a, b) and (b, a) hash differently.
inline void HashCombine(size_t& seed, uint64_t v) {
  seed ^= static_cast<size_t>(Mix64(v)) + 0x9e3779b9 + (seed << 6) + (seed >> 2);
}

// A float's bit pattern. Keys compare floats by bits, so a key holding a NaN
// equals itself and hashing agrees with == (0.0f and -0.0f differ).
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline void HashCombineFloat(size_t& seed, float f) { HashCombine(seed, FloatBits(f)); }

// The length, then the bytes in 8-byte words (the last one zero-padded):
// deterministic across runs and platforms of one endianness.
inline void HashCombineString(size_t& seed, std::string_view s) {
  HashCombine(seed, s.size());
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    HashCombine(seed, word);
  }
  if (i < s.size()) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, s.size() - i);
    HashCombine(seed, word);
  }
}

// Dims (std::vector<int64_t>): the rank first, so that in a list of dims
// {[2,3],[4]} and {[2],[3,4]} hash differently.
inline void HashCombineDims(size_t& seed, const std::vector<int64_t>& dims) {
  HashCombine(seed, dims.size());
  for (int64_t d : dims) HashCombine(seed, static_cast<uint64_t>(d));
}

}  // namespace kiln
