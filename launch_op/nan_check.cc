#include "launch_op/nan_check.h"

#include <cmath>
#include <string>

#include "framework/error.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

template <typename T>
int64_t FirstNonFinite(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) return i;
  }
  return -1;
}

// "op #3 'relu_grad' (relu_grad)" of the cluster that writes `var`, the last
// such op (an in-place update writes its var once more).
std::string WriterOf(const JitSubgraph& sg, const std::string& var) {
  std::string found;
  for (int i = 0; i < sg.block.ops_size(); ++i) {
    for (const std::string& a : AllOutputArgs(sg.block.ops(i))) {
      if (a == var) found = OpLabel(sg.block.ops(i), i);
    }
  }
  return found.empty() ? "no op of the cluster (a temporary of the kernel)" : found;
}

}  // namespace

runtime::InstructionHook NanInfCheck(const CompiledObject& obj, const JitSubgraph& sg) {
  return [&obj, &sg](size_t i, const runtime::BufferView* args) {
    const runtime::Instruction& ins = obj.program.instructions[i];
    for (size_t k = static_cast<size_t>(ins.num_inputs); k < ins.args.size(); ++k) {
      const runtime::BufferView& v = args[k];
      if (v.data == nullptr || v.dims == nullptr) continue;
      const int64_t n = Numel(*v.dims);
      double value = 0;
      int64_t at = -1;
      if (v.dtype == DataType::kFP32) {
        at = FirstNonFinite(static_cast<const float*>(v.data), n);
        if (at >= 0) value = static_cast<const float*>(v.data)[at];
      } else if (v.dtype == DataType::kFP64) {
        at = FirstNonFinite(static_cast<const double*>(v.data), n);
        if (at >= 0) value = static_cast<const double*>(v.data)[at];
      }
      if (at < 0) continue;
      const runtime::BufferInfo& b = obj.program.plan.buffers[static_cast<size_t>(ins.args[k])];
      ThrowInvalidArgument("--check_nan_inf: in JIT cluster ", obj.key, ", ", WriterOf(sg, b.name), " wrote ",
                           std::isnan(value) ? "NaN" : (value > 0 ? "+Inf" : "-Inf"), " to var '", b.name, "' ",
                           DataTypeName(b.dtype), DimsToString(b.dims), " at flat index ", at, " (kernel ",
                           ins.kernel->name(), ": ", ins.kernel->Describe(), ")");
    }
  };
}

}  // namespace kiln::jit
