// Dtype checks and dispatch for ops that take more than floats (reduce_max,
// arg_max, cast, gather, where, the comparisons): f32, f64, i64, i32 and bool.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "framework/operator.h"

namespace kiln::ops {

// std::isnan for any element type (false for integers and bool).
template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// "f32, f64, i64 or i32": the dtypes an error says were expected.
inline std::string DtypeList(std::initializer_list<DataType> dtypes) {
  std::string s;
  size_t k = 0;
  for (DataType d : dtypes) {
    if (k > 0) s += k + 1 == dtypes.size() ? " or " : ", ";
    s += DataTypeName(d);
    ++k;
  }
  return s;
}

// Shape-inference check that input `slot` has one of `allowed`; returns its dtype.
inline DataType CheckInputDtype(const InferShapeContext& ctx, std::string_view slot,
                                std::initializer_list<DataType> allowed) {
  const DataType dtype = ctx.InputDtype(slot);
  for (DataType d : allowed) {
    if (d == dtype) return dtype;
  }
  ctx.Fail("input ", slot, ": expected dtype ", DtypeList(allowed), ", got ", DataTypeName(dtype));
}

// Calls fn(T{}) with T = float, double, int64_t or int32_t after `dtype`;
// other dtypes fail naming the op and `what` (usually a slot).
template <typename Fn>
void DispatchNumeric(const ExecContext& ctx, DataType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DataType::kFP32: fn(float{}); return;
    case DataType::kFP64: fn(double{}); return;
    case DataType::kINT64: fn(int64_t{}); return;
    case DataType::kINT32: fn(int32_t{}); return;
    default: break;
  }
  ctx.Fail(what, ": expected dtype ",
           DtypeList({DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32}), ", got ",
           DataTypeName(dtype));
}

// DispatchNumeric plus T = bool.
template <typename Fn>
void DispatchAll(const ExecContext& ctx, DataType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DataType::kFP32: fn(float{}); return;
    case DataType::kFP64: fn(double{}); return;
    case DataType::kINT64: fn(int64_t{}); return;
    case DataType::kINT32: fn(int32_t{}); return;
    case DataType::kBOOL: fn(bool{}); return;
    default: break;
  }
  ctx.Fail(what, ": expected dtype ",
           DtypeList({DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32, DataType::kBOOL}),
           ", got ", DataTypeName(dtype));
}

}  // namespace kiln::ops
