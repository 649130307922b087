// Tensors of any element type from a list of values, and back: for op tests
// over i32 and bool, which op_test_util's helpers (f32, f64, i64) leave out.
#pragma once

#include <vector>

#include "framework/tensor.h"

namespace kiln::test {

template <typename T>
Tensor TypedTensor(const Dims& dims, const std::vector<T>& values) {
  Tensor t(DataTypeOf<T>::value, dims);
  KILN_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "TypedTensor: ", values.size(), " values for ",
             t.ShapeString());
  T* p = t.mutable_data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

// The elements of `t`, which must hold T.
template <typename T>
std::vector<T> ValuesOf(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

}  // namespace kiln::test
