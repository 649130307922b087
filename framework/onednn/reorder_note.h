// One oneDNN reorder a kernel runs each time it runs: which argument of which
// primitive it serves, the layouts it moves between, over which dims. Kernels
// list theirs (runtime::Kernel::Reorders) and kiln dump writes them per
// cluster (reorders.txt). Plain data: no oneDNN types here, so the runtime's
// kernel interface can carry it; onednn_handler.h makes them from entries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kiln::onednn {

struct ReorderNote {
  // The primitive the reorder serves, as oneDNN names its kind and
  // propagation: "convolution backward_weights", "matmul".
  std::string primitive;
  // The primitive's argument: "src", "weights", "diff_dst", ...
  std::string arg;
  // True for a result moved after the primitive ran (from its layout into
  // the buffer's); false for an input moved before.
  bool output = false;
  // Data type and layout, as ONEDNN_VERBOSE prints a memory descriptor's
  // ("f32:abcd" is NCHW, "f32:aBcd16b" nChw16c, "f32:acdb" NHWC,
  // "f32:ABcd16b16a" a blocked filter).
  std::string from;
  std::string to;
  Dims dims;  // the logical dims (as ONEDNN_VERBOSE prints them)
  // Sizes of the two sides, padding included.
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;

  // "diff_dst in: f32:abcd -> f32:aBcd16b [32,64,16,16] 2097152 -> 2097152 B
  // (convolution backward_weights)".
  std::string ToString() const;
};

// Count and bytes of a list of reorders.
struct ReorderTotals {
  int64_t count = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  void Add(const ReorderNote& r);
  void Add(const ReorderTotals& t);
  // "12 reorders, 3.50 MiB read, 3.75 MiB written" ("no reorders" for none).
  std::string ToString() const;
};

}  // namespace kiln::onednn
