#include "compiler/kernels/copy.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/codegen/ew_runtime_kernel.h"

namespace kiln::jit {
namespace {

class ViewKernel final : public runtime::Kernel {
 public:
  ViewKernel(const Dims& dims, DataType dtype, std::string name)
      : name_(std::move(name)), dims_(dims) {
    (void)dtype;
  }
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "view as " + DimsToString(dims_) + " (no copy when the plan gives both one memory)";
  }
  // The bytes to copy are Out's, as bound (Out and In hold as many elements).
  void Run(const runtime::BufferView* args) const override {
    const size_t bytes = static_cast<size_t>(Numel(*args[1].dims)) * SizeOf(args[1].dtype);
    if (args[1].data != args[0].data && bytes > 0) std::memcpy(args[1].data, args[0].data, bytes);
  }
  bool ReadsDimsAtRunTime() const override { return true; }

 private:
  std::string name_;
  Dims dims_;
};

// The permuted copy as loops over the output: dims and, per operand, element
// strides; size-1 dims dropped and dims that are contiguous in both operands
// merged.
struct CopyLoops {
  Dims dims;
  std::vector<int64_t> in_strides, out_strides;
};

// Which loop each output dim went into (-1: size 1, dropped), to lay other
// dims out with the same loops (a resized kernel keeps its code).
using LoopOf = std::vector<int>;

// Out's dims, and each of its dims' element stride in In and in Out.
void Permuted(const Dims& in_dims, const std::vector<int64_t>& perm, Dims* od, std::vector<int64_t>* is,
              std::vector<int64_t>* os) {
  const size_t rank = in_dims.size();
  std::vector<int64_t> in_row(rank, 1);
  for (size_t d = rank; d-- > 1;) in_row[d - 1] = in_row[d] * in_dims[d];
  od->assign(rank, 1);
  is->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    (*od)[i] = in_dims[perm[i]];
    (*is)[i] = in_row[perm[i]];
  }
  os->assign(rank, 1);
  for (size_t d = rank; d-- > 1;) (*os)[d - 1] = (*os)[d] * (*od)[d];
}

CopyLoops MakeLoops(const Dims& in_dims, const std::vector<int64_t>& perm, LoopOf* loop_of) {
  Dims od;
  std::vector<int64_t> is, os;
  Permuted(in_dims, perm, &od, &is, &os);
  CopyLoops l;
  loop_of->assign(od.size(), -1);
  for (size_t i = 0; i < od.size(); ++i) {
    if (od[i] == 1) continue;
    if (!l.dims.empty() && l.in_strides.back() == is[i] * od[i] && l.out_strides.back() == os[i] * od[i]) {
      l.dims.back() *= od[i];
      l.in_strides.back() = is[i];
      l.out_strides.back() = os[i];
      (*loop_of)[i] = static_cast<int>(l.dims.size()) - 1;
      continue;
    }
    (*loop_of)[i] = static_cast<int>(l.dims.size());
    l.dims.push_back(od[i]);
    l.in_strides.push_back(is[i]);
    l.out_strides.push_back(os[i]);
  }
  if (l.dims.empty()) l = CopyLoops{{1}, {1}, {1}};
  return l;
}

// The loops of `loop_of` over other dims: each loop the product of its
// dims, strides those of its innermost dim. Out and In walk a merged loop
// as one dim at any sizes, as long as the dims dropped between its dims
// stay 1: false, with the reason in `why`, when a dropped dim is not 1, or
// when Out's dims are not In's permuted.
bool LoopsAt(const LoopOf& loop_of, const std::vector<int64_t>& perm, const std::vector<Dims>& dims, CopyLoops* l,
             std::string* why) {
  if (dims.size() != 2 || dims[0].size() != perm.size()) {
    *why = "expected In and Out of rank " + std::to_string(perm.size());
    return false;
  }
  Dims od;
  std::vector<int64_t> is, os;
  Permuted(dims[0], perm, &od, &is, &os);
  if (od != dims[1]) {
    *why = "Out " + DimsToString(dims[1]) + " is not In " + DimsToString(dims[0]) + " permuted: " + DimsToString(od);
    return false;
  }
  const int loops = *std::max_element(loop_of.begin(), loop_of.end()) + 1;
  if (loops == 0) {  // one point
    if (Numel(od) != 1) {
      *why = "made for one element, got In " + DimsToString(dims[0]);
      return false;
    }
    *l = CopyLoops{{1}, {1}, {1}};
    return true;
  }
  *l = CopyLoops{Dims(static_cast<size_t>(loops), 1), std::vector<int64_t>(static_cast<size_t>(loops), 0),
                 std::vector<int64_t>(static_cast<size_t>(loops), 0)};
  for (size_t i = 0; i < od.size(); ++i) {
    if (loop_of[i] < 0) {
      if (od[i] != 1) {
        *why = "Out dim " + std::to_string(i) + " was 1 (no loop) and is " + std::to_string(od[i]);
        return false;
      }
      continue;
    }
    l->dims[loop_of[i]] *= od[i];
    l->in_strides[loop_of[i]] = is[i];  // the innermost dim of the loop comes last
    l->out_strides[loop_of[i]] = os[i];
  }
  return true;
}

class StridedCopyKernel final : public runtime::Kernel {
 public:
  StridedCopyKernel(CopyLoops loops, LoopOf loop_of, std::vector<int64_t> perm, size_t elem, std::string name)
      : name_(std::move(name)), l_(std::move(loops)), loop_of_(std::move(loop_of)), perm_(std::move(perm)),
        elem_(elem) {}
  const std::string& name() const override { return name_; }
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    CopyLoops l;
    std::string reason;
    if (!LoopsAt(loop_of_, perm_, dims, &l, &reason)) {
      if (why != nullptr) *why = name_ + ": " + reason;
      return nullptr;
    }
    return std::make_shared<StridedCopyKernel>(std::move(l), loop_of_, perm_, elem_, name_);
  }
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
  LoopOf loop_of_;
  std::vector<int64_t> perm_;
  size_t elem_;
};

// The generated kernel's layout of the loops (at most kEwMaxRank).
EwLayout CopyLayout(const CopyLoops& l) {
  EwLayout layout;
  layout.rank = static_cast<int>(l.dims.size());
  layout.inputs.resize(1);
  layout.outputs.resize(1);
  for (int d = 0; d < layout.rank; ++d) {
    layout.dims[d] = l.dims[d];
    layout.inputs[0].strides[d] = l.in_strides[d];
    layout.outputs[0].strides[d] = l.out_strides[d];
  }
  return layout;
}

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeViewKernel(const Dims& out_dims, DataType dtype, const std::string& name) {
  return std::make_shared<ViewKernel>(out_dims, dtype, name);
}

std::shared_ptr<const runtime::Kernel> MakeTransposeKernel(const Dims& in_dims, const std::vector<int64_t>& perm,
                                                           DataType dtype, Isa isa, const std::string& name,
                                                           const std::string& op_type) {
  LoopOf loop_of;
  const CopyLoops l = MakeLoops(in_dims, perm, &loop_of);
  const int rank = static_cast<int>(l.dims.size());
  if (SizeOf(dtype) != 4 || rank > kEwMaxRank || l.in_strides.back() != 1 || l.out_strides.back() != 1) {
    return std::make_shared<StridedCopyKernel>(l, loop_of, perm, SizeOf(dtype), name);
  }
  const EwLayout layout = CopyLayout(l);
  EwProgram program;
  program.Store(0, program.Load(0));
  auto kernel = std::make_shared<jit::FusedElementwiseKernel>(name, program, layout, isa);
  kernel->set_fused_ops({op_type});
  kernel->Create();
  EwLayoutOf layout_of = [loop_of, perm](const std::vector<Dims>& dims, std::string* why) -> std::optional<EwLayout> {
    CopyLoops at;
    if (!LoopsAt(loop_of, perm, dims, &at, why)) return std::nullopt;
    return CopyLayout(at);
  };
  return MakeEwRuntimeKernel(kernel, std::string("generated ") + IsaName(isa) + " copy over " + layout.ToString() +
                                         " (transpose)", std::move(layout_of));
}

}  // namespace kiln::jit
