// Helpers shared by the memory tests of each layer (shape_only_test,
// shape_only_grad_test, memory_plan_test, runner_test,
// build_jit_pass_memory_test, jit_launch_memory_test): bit-exact tensor
// comparison, one-block programs, the donor program, and hand-built buffer
// plans (runtime::BufferInfo / Instruction over a kernel that does nothing).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/op_desc.h"
#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::test {

Tensor Copy(const Tensor& t);
// "" when a and b have the same dtype, dims and bytes.
std::string BitDiff(const Tensor& a, const Tensor& b);
proto::ProgramDesc OneBlock(const std::vector<proto::OpDesc>& ops);

inline bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// exp(x) = a (generated elementwise kernel: reads x for the last time and may
// write a over it in place), matmul(a, w) = b (a still fills x's memory, so b
// goes to the arena), softmax(b) = out.
std::vector<proto::OpDesc> DonorChain();

// softmax_with_cross_entropy (not lowerable) = sm, then the cluster
// exp(sm) -> matmul -> softmax; optionally a later data reader of sm.
proto::ProgramDesc DonorProgram(bool later_reader, int64_t batch, int64_t classes, int64_t hidden);

// ---- hand-built buffer plans --------------------------------------------------------

class NopKernel : public runtime::Kernel {
 public:
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "nop"; }
  void Run(const runtime::BufferView*) const override {}

 private:
  std::string name_ = "nop";
};

// A NopKernel that needs `bytes` of scratch (Kernel::ScratchBytes: oneDNN's
// reorder buffers).
class ScratchKernel : public NopKernel {
 public:
  explicit ScratchKernel(size_t bytes) : bytes_(bytes) {}
  size_t ScratchBytes() const override { return bytes_; }

 private:
  size_t bytes_;
};

// A buffer of `floats` FP32 elements; a temp gets a bogus place the planner
// must overwrite.
inline runtime::BufferInfo Buffer(const std::string& name, runtime::BufferRole role, int64_t floats, int io = -1,
                                  bool donatable = false) {
  runtime::BufferInfo b;
  b.name = name;
  b.dims = {floats};
  b.role = role;
  b.io_index = io;
  b.donatable = donatable;
  if (role == runtime::BufferRole::kTemp) {
    b.offset = 12345;  // planned afresh
    b.region = 77;
  }
  return b;
}

// Buffer `root` seen with dims `dims` (a reshape view): it has no memory of
// its own.
inline runtime::BufferInfo ViewOf(const std::string& name, int root, Dims dims) {
  runtime::BufferInfo b = Buffer(name, runtime::BufferRole::kTemp, 1);
  b.dims = std::move(dims);
  b.view_of = root;
  return b;
}

// An instruction reading `reads` and writing `writes` with `kernel`
// (a NopKernel when not given).
inline runtime::Instruction Ins(std::vector<int> reads, std::vector<int> writes,
                                std::shared_ptr<const runtime::Kernel> kernel = nullptr) {
  static const auto nop = std::make_shared<NopKernel>();
  runtime::Instruction ins;
  ins.kernel = kernel ? std::move(kernel) : nop;
  ins.num_inputs = static_cast<int>(reads.size());
  ins.args = std::move(reads);
  ins.args.insert(ins.args.end(), writes.begin(), writes.end());
  return ins;
}

}  // namespace kiln::test
