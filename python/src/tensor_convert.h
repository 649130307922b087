// numpy arrays <-> kiln Tensors for the binding, without copies where the
// layout allows (docs/python.md lists when a copy happens).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "framework/tensor.h"

namespace kiln::python {

// How a value reached a Tensor.
enum class Binding { kShared, kCopied };

// `value` (a numpy array, or anything np.asarray takes: lists, scalars) as a
// tensor of `dtype`. An ndarray must already have that dtype (a mismatch is
// an error naming `who` and both dtypes); other values are converted. With
// `may_share`, a C-contiguous ndarray whose data is aligned for its dtype is
// shared: the tensor's buffer is the array's memory, kept alive by a
// reference to the array for as long as any tensor holds it. Otherwise the
// data is copied into a kiln buffer.
Tensor TensorFromPython(const pybind11::handle& value, DataType dtype, bool may_share, const std::string& who,
                        Binding* how = nullptr);

// A numpy array of `t`'s dtype and dims. With `share`, the array views t's
// buffer and keeps it alive (nobody may write that buffer afterwards: the
// caller detaches it from the scope); otherwise the array owns a copy.
pybind11::array ArrayFromTensor(const Tensor& t, bool share);

}  // namespace kiln::python
