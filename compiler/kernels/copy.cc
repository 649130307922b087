#include "compiler/kernels/copy.h"

#include <omp.h>

#include <cstring>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/codegen/ew_runtime_kernel.h"

namespace kiln::jit {
namespace {

class ViewKernel final : public runtime::Kernel {
 public:
  ViewKernel(const Dims& dims, DataType dtype, std::string name)
      : name_(std::move(name)), bytes_(static_cast<size_t>(Numel(dims)) * SizeOf(dtype)), dims_(dims) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "view as " + DimsToString(dims_) + " (no copy when the plan gives both one memory)";
  }
  void Run(const runtime::BufferView* args) const override {
    if (args[1].data != args[0].data && bytes_ > 0) std::memcpy(args[1].data, args[0].data, bytes_);
  }

 private:
  std::string name_;
  size_t bytes_;
  Dims dims_;
};

// The permuted copy as loops over the output: dims and, per operand, element
// strides; size-1 dims dropped and dims that are contiguous in both operands
// merged.
struct CopyLoops {
  Dims dims;
  std::vector<int64_t> in_strides, out_strides;
};

CopyLoops MakeLoops(const Dims& in_dims, const std::vector<int64_t>& perm) {
  const size_t rank = in_dims.size();
  std::vector<int64_t> in_row(rank, 1);
  for (size_t d = rank; d-- > 1;) in_row[d - 1] = in_row[d] * in_dims[d];
  Dims od(rank);
  std::vector<int64_t> is(rank);
  for (size_t i = 0; i < rank; ++i) {
    od[i] = in_dims[perm[i]];
    is[i] = in_row[perm[i]];
  }
  std::vector<int64_t> os(rank, 1);
  for (size_t d = rank; d-- > 1;) os[d - 1] = os[d] * od[d];
  CopyLoops l;
  for (size_t i = 0; i < rank; ++i) {
    if (od[i] == 1) continue;
    if (!l.dims.empty() && l.in_strides.back() == is[i] * od[i] && l.out_strides.back() == os[i] * od[i]) {
      l.dims.back() *= od[i];
      l.in_strides.back() = is[i];
      l.out_strides.back() = os[i];
      continue;
    }
    l.dims.push_back(od[i]);
    l.in_strides.push_back(is[i]);
    l.out_strides.push_back(os[i]);
  }
  if (l.dims.empty()) l = CopyLoops{{1}, {1}, {1}};
  return l;
}

class StridedCopyKernel final : public runtime::Kernel {
 public:
  StridedCopyKernel(CopyLoops loops, size_t elem, std::string name)
      : name_(std::move(name)), l_(std::move(loops)), elem_(elem) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "kiln strided copy over " + DimsToString(l_.dims) + " (transpose)";
  }
  void Run(const runtime::BufferView* args) const override {
    const auto* in = static_cast<const char*>(args[0].data);
    auto* out = static_cast<char*>(args[1].data);
    const int64_t outer = l_.dims[0];
    const int64_t inner = Numel(l_.dims) / outer;
#pragma omp parallel for if (Numel(l_.dims) >= (1 << 16)) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      CopyRow(in + o * l_.in_strides[0] * elem_, out + o * l_.out_strides[0] * elem_, inner);
    }
  }

 private:
  // All of the inner dims below the outermost, walked as an odometer.
  void CopyRow(const char* in, char* out, int64_t count) const {
    const size_t rank = l_.dims.size();
    std::vector<int64_t> idx(rank, 0);
    int64_t ioff = 0, ooff = 0;
    for (int64_t n = 0; n < count; ++n) {
      std::memcpy(out + ooff * elem_, in + ioff * elem_, elem_);
      for (size_t d = rank; d-- > 1;) {
        ioff += l_.in_strides[d];
        ooff += l_.out_strides[d];
        if (++idx[d] < l_.dims[d]) break;
        ioff -= l_.in_strides[d] * l_.dims[d];
        ooff -= l_.out_strides[d] * l_.dims[d];
        idx[d] = 0;
      }
    }
  }

  std::string name_;
  CopyLoops l_;
  size_t elem_;
};

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeViewKernel(const Dims& out_dims, DataType dtype, const std::string& name) {
  return std::make_shared<ViewKernel>(out_dims, dtype, name);
}

std::shared_ptr<const runtime::Kernel> MakeTransposeKernel(const Dims& in_dims, const std::vector<int64_t>& perm,
                                                           DataType dtype, Isa isa, const std::string& name,
                                                           const std::string& op_type) {
  const CopyLoops l = MakeLoops(in_dims, perm);
  const int rank = static_cast<int>(l.dims.size());
  if (SizeOf(dtype) != 4 || rank > kEwMaxRank || l.in_strides.back() != 1 || l.out_strides.back() != 1) {
    return std::make_shared<StridedCopyKernel>(l, SizeOf(dtype), name);
  }
  EwLayout layout;
  layout.rank = rank;
  layout.inputs.resize(1);
  layout.outputs.resize(1);
  for (int d = 0; d < rank; ++d) {
    layout.dims[d] = l.dims[d];
    layout.inputs[0].strides[d] = l.in_strides[d];
    layout.outputs[0].strides[d] = l.out_strides[d];
  }
  EwProgram program;
  program.Store(0, program.Load(0));
  auto kernel = std::make_shared<jit::FusedElementwiseKernel>(name, program, layout, isa);
  kernel->set_fused_ops({op_type});
  kernel->Create();
  return MakeEwRuntimeKernel(kernel, std::string("generated ") + IsaName(isa) + " copy over " + layout.ToString() +
                                         " (transpose)");
}

}  // namespace kiln::jit
