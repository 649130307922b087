// Copies between a tensor and a box (an axis-aligned block) of a bigger tensor
// of the same rank: the data movement behind concat, split and slice and
// their grads. It works on bytes, so on every dtype.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "framework/error.h"
#include "framework/tensor.h"

namespace kiln::ops {

// Calls fn(big_offset, box_offset, count) for each contiguous run of the box
// of dims `box` at `offset` inside a row-major tensor of dims `big`, offsets
// in elements. Trailing dims the box covers whole merge into one run, so a
// concat along axis a moves runs of box[a] * (product of the dims after a).
template <typename Fn>
void ForEachBoxRun(const Dims& big, const Dims& box, const Dims& offset, Fn&& fn) {
  KILN_CHECK(big.size() == box.size() && big.size() == offset.size(), "box rank mismatch");
  if (Numel(box) == 0) return;
  const size_t r = big.size();
  if (r == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  // Dims [p, r) form one run: p is the last dim the box does not cover whole.
  size_t p = r - 1;
  while (p > 0 && box[p] == big[p]) --p;
  int64_t run = 1;
  for (size_t q = p; q < r; ++q) run *= box[q];
  std::vector<int64_t> stride(r, 1);
  for (size_t q = r - 1; q > 0; --q) stride[q - 1] = stride[q] * big[q];
  int64_t base = 0;
  for (size_t q = 0; q < r; ++q) base += offset[q] * stride[q];
  // Odometer over the box's dims [0, p).
  std::vector<int64_t> idx(p, 0);
  const int64_t runs = Numel(box) / run;
  int64_t big_off = base;
  for (int64_t k = 0; k < runs; ++k) {
    fn(big_off, k * run, run);
    for (size_t q = p; q-- > 0;) {
      big_off += stride[q];
      if (++idx[q] < box[q]) break;
      big_off -= stride[q] * box[q];
      idx[q] = 0;
    }
  }
}

// Reads the box of `big_data` (dims `big`) at `offset` into `box_data`
// (dense, dims `box`).
inline void CopyFromBox(const Dims& big, const Dims& box, const Dims& offset, size_t elem_size, const void* big_data,
                        void* box_data) {
  const auto* b = static_cast<const char*>(big_data);
  auto* x = static_cast<char*>(box_data);
  const auto es = static_cast<int64_t>(elem_size);
  ForEachBoxRun(big, box, offset, [&](int64_t big_off, int64_t box_off, int64_t n) {
    std::memcpy(x + box_off * es, b + big_off * es, static_cast<size_t>(n * es));
  });
}

// Writes `box_data` (dense, dims `box`) into the box of `big_data` at `offset`.
inline void CopyIntoBox(const Dims& big, const Dims& box, const Dims& offset, size_t elem_size, const void* box_data,
                        void* big_data) {
  auto* b = static_cast<char*>(big_data);
  const auto* x = static_cast<const char*>(box_data);
  const auto es = static_cast<int64_t>(elem_size);
  ForEachBoxRun(big, box, offset, [&](int64_t big_off, int64_t box_off, int64_t n) {
    std::memcpy(b + big_off * es, x + box_off * es, static_cast<size_t>(n * es));
  });
}

// Sets every byte of t's buffer (allocated with t's dtype) to 0: the value 0
// in every dtype.
inline void* ZeroBytes(Tensor* t) {
  void* p = t->raw_mutable_data(t->dtype());
  if (t->bytes() > 0) std::memset(p, 0, t->bytes());
  return p;
}

}  // namespace kiln::ops
