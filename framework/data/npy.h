// NumPy .npy files: the feed and fetch format of `kiln run` (OPS.md).
//
// Read: format 1.0, 2.0 and 3.0; C order; dtypes '<f4' (FP32), '<f8' (FP64),
// '<i8' (INT64), '<i4' (INT32) and '|b1' (BOOL, bytes must be 0 or 1).
// A 0-d array (shape ()) reads as a tensor with empty dims (numel 1); a
// shape with a 0 dim reads as an empty tensor.
// Write: format 1.0 (2.0 only when the header does not fit in 65535 bytes),
// header padded so the data starts at a multiple of 64 bytes, as NumPy does.
//
// Errors name the file and what is wrong: a missing or unreadable file throws
// NotFound; a truncated file (header or data) throws DataLoss; everything
// else (bad magic, unsupported version, malformed header dict,
// fortran_order True, unsupported dtype, trailing bytes) throws
// InvalidArgument.
#pragma once

#include <string>

#include "framework/tensor.h"

namespace kiln {

Tensor ReadNpy(const std::string& path);
// Parses the bytes of a .npy file; `name` is the file name used in messages.
Tensor ParseNpy(const std::string& bytes, const std::string& name);

// The bytes of `t` as a .npy file. Throws InvalidArgument when `t` holds no
// data. Lets a caller build several files and write them only once all of
// them could be built.
std::string NpyBytes(const Tensor& t);
// Writes NpyBytes(t) atomically: on error no file (partial or temporary) is
// left at `path`.
void WriteNpy(const std::string& path, const Tensor& t);

}  // namespace kiln
