// Helpers of the concat, split and slice tests (concat_split_slice_ops_test,
// slice_op_test): multi-index loops, iota tensors, build-time inference.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace concat_split_slice_test {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

// Calls fn(idx) for every multi-index of `dims` in row-major order.
inline void ForEachIndex(const Dims& dims, const std::function<void(const std::vector<int64_t>&)>& fn) {
  if (Numel(dims) == 0) return;
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t n = 0; n < Numel(dims); ++n) {
    fn(idx);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

inline int64_t Flat(const Dims& dims, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < dims.size(); ++d) f = f * dims[d] + idx[d];
  return f;
}

// A tensor of `dtype` (FP32, FP64 or INT64) whose element i is `base + i`.
inline Tensor Iota(const Dims& dims, DataType dtype, int64_t base) {
  Tensor t(dtype, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DataType::kFP32) t.mutable_data<float>()[i] = static_cast<float>(base + i);
    if (dtype == DataType::kFP64) t.mutable_data<double>()[i] = static_cast<double>(base + i);
    if (dtype == DataType::kINT64) t.mutable_data<int64_t>()[i] = base + i;
  }
  return t;
}

// Runs build-time inference of `op` with the given vars declared (FP32).
inline proto::BlockDesc InferAtBuild(const proto::OpDesc& op, const std::vector<std::pair<std::string, Dims>>& vars) {
  proto::BlockDesc block;
  for (const auto& [name, dims] : vars) {
    proto::VarDesc* v = block.add_vars();
    v->set_name(name);
    for (int64_t d : dims) v->add_dims(d);
  }
  *block.add_ops() = op;
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  return block;
}
inline Dims DimsOf(const proto::BlockDesc& block, const std::string& var) { return VarDims(*FindVarDesc(block, var)); }

inline std::vector<std::string> Names(const std::string& prefix, size_t n) {
  std::vector<std::string> out;
  for (size_t k = 0; k < n; ++k) out.push_back(prefix + std::to_string(k));
  return out;
}

}  // namespace concat_split_slice_test
}  // namespace kiln
