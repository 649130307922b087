// The counter-based random stream of dropout: the keep decision of element i
// is a pure function of (state, i), so any kernel on any number of threads
// draws the same mask, and a state saved in a checkpoint resumes the sequence.
//
// Construction: SplitMix64 (Steele, Lea & Flood, "Fast Splittable
// Pseudorandom Number Generators", OOPSLA 2014; the variant-13 finalizer
// constants of Vigna's splitmix64.c). Its n-th output from seed s is
// Mix64(s + n * kGolden), which can be computed for any n directly; here
// s = Mix64(state), so that neighbouring states give unrelated streams.
// Element i takes output n = i + 1.
#pragma once

#include <cstdint>

namespace kiln::dropout_hash {

// 2^64 / golden ratio, odd: SplitMix64's Weyl increment.
inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The state after a training run: a Weyl step. States that start close
// together (one per dropout op, initialised to seed + k) walk disjoint
// sequences: state a reaches state b only after (b - a) * kGolden^-1 mod 2^64
// steps, astronomically many for small b - a.
inline uint64_t NextState(uint64_t state) { return state + kGolden; }

// Keep decision of element i: the top 53 bits of its output as a uniform u
// in [0, 1), kept when u >= p (p = 0 keeps all, p = 1 none).
class KeepTest {
 public:
  KeepTest(uint64_t state, double p) : key_(Mix64(state)), p_(p) {}
  bool operator()(uint64_t i) const {
    const uint64_t bits = Mix64(key_ + (i + 1) * kGolden);
    return static_cast<double>(bits >> 11) * 0x1.0p-53 >= p_;
  }

 private:
  uint64_t key_;
  double p_;
};

}  // namespace kiln::dropout_hash
