// Shape helpers shared by reference kernels, oneDNN kernels and passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kiln {

// True when two possibly-unknown (-1) dims can be the same at run time.
inline bool DimCompatible(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }
bool DimsCompatible(const Dims& a, const Dims& b);

// Elementwise broadcast of OPS.md: Y's dims line up with X's starting at
// `axis` (-1: aligned to X's trailing dims); every Y dim equals X's or is 1.
// Returns Y's dims padded with 1s to X's rank. Throws InvalidArgument,
// prefixed with `who`, when Y does not broadcast into X. Unknown (-1) dims are
// accepted against anything.
Dims BroadcastYDims(const Dims& x, const Dims& y, int64_t axis, const std::string& who);

// Row-major strides of dims (in elements).
std::vector<int64_t> Strides(const Dims& dims);

// Normalises a possibly negative axis into [0, rank); throws when out of range.
int64_t NormalizeAxis(int64_t axis, size_t rank, const std::string& who);

}  // namespace kiln
