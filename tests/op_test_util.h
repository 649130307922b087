// Helpers for op tests: run one op through the executor, compare tensors, and
// check grad ops against central finite differences computed in double.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/scope.h"
#include "framework/tensor.h"

namespace kiln::test {

// A tensor of `dtype` (FP32 or FP64) with values uniform in [lo, hi).
// FP32 or FP64 uniform in [lo, hi); BOOL true for a draw in the upper half.
Tensor RandomTensor(const Dims& dims, DataType dtype, std::mt19937& rng, double lo = -1.0, double hi = 1.0);
Tensor Int64Tensor(const Dims& dims, const std::vector<int64_t>& values);
Tensor FloatTensor(const Dims& dims, const std::vector<float>& values);
// Converts FP32 <-> FP64 (other dtypes copied as they are).
Tensor CastTo(const Tensor& t, DataType dtype);
// Element i as double (FP32, FP64, INT64; BOOL's byte).
double ValueAt(const Tensor& t, int64_t i);

// Runs `ops` in order over a fresh scope holding `inputs`; returns the scope.
// `onednn`: how the oneDNN kernels run (with use_onednn).
std::unique_ptr<Scope> RunOps(const std::vector<proto::OpDesc>& ops, const std::map<std::string, Tensor>& inputs,
                              bool use_onednn, const onednn::Settings& onednn = {},
                              const OpRegistry& registry = OpRegistry::Global());
inline std::unique_ptr<Scope> RunOp(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs,
                                    bool use_onednn = false, const onednn::Settings& onednn = {}) {
  return RunOps({op}, inputs, use_onednn, onednn);
}

// oneDNN settings that take oneDNN's slow implementations too (default
// settings otherwise): parity tests check the descriptors on every case.
inline onednn::Settings AllowSlowOneDnn() {
  onednn::Settings s;
  s.allow_slow_impls = true;
  return s;
}

// Runs one op on the reference kernels and returns a copy of output var `out`.
Tensor RunAndGet(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs, const std::string& out);
// The message of the kiln::Error `fn` throws, or "(no error)".
std::string ErrorOf(const std::function<void()>& fn);

// Largest |a-b| - (atol + rtol*|b|) over elements; also checks dims and dtype.
// Returns an empty string when a matches b, else a description of the worst element.
std::string CompareTensors(const Tensor& a, const Tensor& b, double atol, double rtol);

struct GradCheckOptions {
  double eps = 1e-6;     // finite-difference step (inputs are FP64)
  double atol = 1e-6;
  double rtol = 1e-5;
  int max_elements = 64;  // elements of each input perturbed (spread over the tensor)
  unsigned seed = 7;
};

// Checks the grad ops made by `fwd`'s grad maker. `inputs` are cast to FP64
// (INT64 ones kept). loss = sum_k sum(out_k * R_k) over `outputs` with random
// R_k; the analytic gradients of each input in `wrt` are compared with central
// differences of that loss. Returns "" on success, else what failed.
std::string CheckGrad(const proto::OpDesc& fwd, const std::map<std::string, Tensor>& inputs,
                      const std::vector<std::string>& wrt, const std::vector<std::string>& outputs,
                      const GradCheckOptions& options = {});

}  // namespace kiln::test
