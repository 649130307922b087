#include "compiler/codegen/ew_codegen.h"

#include <omp.h>

#include <algorithm>
#include <sstream>

#include <xbyak/xbyak_util.h>

#include "compiler/codegen/ew_codegen_plan.h"
#include "compiler/codegen/jit_kernel.h"
#include "framework/error.h"

namespace kiln::jit {

const char* Bf16StoreName(Bf16Store s) {
  switch (s) {
    case Bf16Store::kAuto: return "auto";
    case Bf16Store::kVcvtneps2bf16: return "vcvtneps2bf16";
    case Bf16Store::kIntegerSequence: return "integer sequence";
  }
  return "?";
}

FusedElementwiseKernel::FusedElementwiseKernel(std::string name, EwProgram program, EwLayout layout, Isa isa)
    : name_(std::move(name)), program_(std::move(program)), layout_(std::move(layout)), isa_(isa) {}

FusedElementwiseKernel::~FusedElementwiseKernel() = default;

void FusedElementwiseKernel::Create() {
  layout_.Validate();
  program_.Validate(static_cast<int>(layout_.inputs.size()), static_cast<int>(layout_.outputs.size()));
  if (!IsaSupported(isa_)) {
    ThrowUnimplemented("jit kernel '", name_, "': ISA ", IsaName(isa_), " is not supported by this CPU");
  }
  int inner_reductions = 0;
  for (size_t k = 0; k < layout_.outputs.size(); ++k) inner_reductions += layout_.IsInnerReduction(static_cast<int>(k));
  const int pool = EwVectorRegs(isa_) - kEwTempRegs - inner_reductions;
  if (pool < 4) {
    ThrowUnimplemented("jit kernel '", name_, "': ", inner_reductions, " outputs reduced over the inner dim need ",
                       inner_reductions, " accumulator registers; at most ", EwVectorRegs(isa_) - kEwTempRegs - 4,
                       " fit on ", IsaName(isa_));
  }
  const bool native_bf16 = isa_ == Isa::kAvx512 && HasAvx512Bf16();
  if (bf16_store_ == Bf16Store::kAuto) {
    bf16_store_ = native_bf16 ? Bf16Store::kVcvtneps2bf16 : Bf16Store::kIntegerSequence;
  } else if (bf16_store_ == Bf16Store::kVcvtneps2bf16 && !native_bf16) {
    ThrowUnimplemented("jit kernel '", name_, "': vcvtneps2bf16 needs AVX-512 with AVX512_BF16 (ISA ", IsaName(isa_),
                       HasAvx512Bf16() ? ")" : ", and this CPU has no AVX512_BF16)");
  }
  const EwKernelPlan plan = PlanEwKernel(program_, layout_, pool);
  std::unique_ptr<JitKernel> jit = MakeEwGenerator(name_, plan, isa_, bf16_store_);
  jit->Create();
  fn_ = jit->fn<EwKernelFn>();
  jit_ = std::move(jit);
  num_spills_ = plan.num_spills;
  num_vector_regs_ = pool;
}

const uint8_t* FusedElementwiseKernel::code() const { return jit_ ? jit_->getCode() : nullptr; }
size_t FusedElementwiseKernel::code_size() const { return jit_ ? jit_->getSize() : 0; }

void FusedElementwiseKernel::Run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs,
                                 int num_threads) const {
  KILN_CHECK(inputs.size() == layout_.inputs.size() && outputs.size() == layout_.outputs.size(),
             "jit kernel '", name_, "': got ", inputs.size(), " inputs and ", outputs.size(), " outputs, layout has ",
             layout_.inputs.size(), " and ", layout_.outputs.size());
  for (const EwOperand& op : layout_.inputs) {
    KILN_CHECK(op.elem == EwElem::kF32, "jit kernel '", name_, "': ", EwElemName(op.elem), " input given as floats");
  }
  for (const EwOperand& op : layout_.outputs) {
    KILN_CHECK(op.elem == EwElem::kF32, "jit kernel '", name_, "': ", EwElemName(op.elem), " output given as floats");
  }
  std::vector<const void*> in(inputs.begin(), inputs.end());
  std::vector<void*> out(outputs.begin(), outputs.end());
  Run(in.data(), out.data(), num_threads);
}

void FusedElementwiseKernel::Run(const void* const* inputs, void* const* outputs, int num_threads) const {
  KILN_CHECK(fn_ != nullptr, "jit kernel '", name_, "': Run before Create");
  const int n_out = static_cast<int>(layout_.outputs.size());
  for (int k = 0; k < n_out; ++k) {
    if (layout_.IsReduction(k)) {  // always f32 (EwLayout::Validate)
      float* out = static_cast<float*>(outputs[k]);
      std::fill(out, out + layout_.OutputExtent(k), 0.0f);
    }
  }
  const int64_t numel = layout_.numel();
  if (numel == 0) return;
  const int64_t d0 = layout_.dims[0];
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
  // Outputs summed over dim 0 would race: chunk c > 0 sums into its own
  // zeroed scratch, added to the output in chunk order afterwards.
  std::vector<int> partial;
  for (int k = 0; k < n_out; ++k) {
    if (layout_.outputs[k].strides[0] == 0 && d0 > 1 && layout_.IsReduction(k)) partial.push_back(k);
  }
  int64_t chunks = 1;
  if (numel >= kParallelMinElements) {
    const int64_t by_size = std::min<int64_t>(d0, numel / (kParallelMinElements / 2));
    // The chunks fix the order of those sums: deterministic kernels do not
    // let the thread count choose them.
    if (deterministic_ && !partial.empty()) {
      chunks = std::min<int64_t>(kDeterministicChunks, by_size);
    } else if (threads > 1) {
      chunks = std::min<int64_t>(threads, by_size);
    }
  }
  if (chunks <= 1) {
    const EwKernelArgs args{inputs, outputs, 0, d0};
    fn_(&args);
    return;
  }
  // Dim-0 ranges; rank-1 ranges start on multiples of 16 elements (64 bytes
  // of f32, 32 of bf16, 16 of bool) so only the last chunk has a masked tail.
  std::vector<int64_t> bounds(static_cast<size_t>(chunks) + 1);
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = d0 * c / chunks;
    if (layout_.rank == 1) b &= ~int64_t{15};
    bounds[c] = b;
  }
  bounds[chunks] = d0;
  std::vector<std::vector<float>> scratch;
  std::vector<std::vector<void*>> outs(static_cast<size_t>(chunks), std::vector<void*>(outputs, outputs + n_out));
  for (int64_t c = 1; c < chunks; ++c) {
    for (int k : partial) {
      scratch.emplace_back(static_cast<size_t>(layout_.OutputExtent(k)), 0.0f);
      outs[c][k] = scratch.back().data();
    }
  }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const EwKernelArgs args{inputs, outs[c].data(), bounds[c], bounds[c + 1]};
    fn_(&args);
  }
  for (int k : partial) {
    const int64_t extent = layout_.OutputExtent(k);
    float* out = static_cast<float*>(outputs[k]);
#pragma omp parallel for num_threads(threads) schedule(static) if (extent >= kParallelMinElements)
    for (int64_t i = 0; i < extent; ++i) {
      float s = out[i];
      for (int64_t c = 1; c < chunks; ++c) s += static_cast<const float*>(outs[c][k])[i];
      out[i] = s;
    }
  }
}

std::string FusedElementwiseKernel::ToString() const {
  std::ostringstream os;
  os << "kernel " << name_ << " isa=" << IsaName(isa_) << " ops=[";
  for (size_t i = 0; i < fused_ops_.size(); ++i) os << (i ? "," : "") << fused_ops_[i];
  os << "] code=" << code_size() << "B regs=" << num_vector_regs_ << " spills=" << num_spills_;
  for (const EwOperand& op : layout_.outputs) {
    if (op.elem == EwElem::kBF16) {
      os << " bf16_store=" << Bf16StoreName(bf16_store_);
      break;
    }
  }
  os << "\n";
  os << layout_.ToString() << "\n" << program_.ToString();
  return os.str();
}

}  // namespace kiln::jit
