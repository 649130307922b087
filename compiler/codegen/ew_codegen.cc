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

// Shared by a kernel and its Resized copies.
struct FusedElementwiseKernel::Code {
  std::unique_ptr<JitKernel> jit;
  EwLayout layout;  // the one it was generated for
  std::vector<bool> sums, inner_sums;  // per output: layout.IsReduction, IsInnerReduction
  int num_spills = 0;
  int num_vector_regs = 0;
};

FusedElementwiseKernel::FusedElementwiseKernel(std::string name, EwProgram program, EwLayout layout, Isa isa)
    : name_(std::move(name)), program_(std::move(program)), layout_(std::move(layout)), isa_(isa) {}

FusedElementwiseKernel::~FusedElementwiseKernel() = default;

int FusedElementwiseKernel::num_spills() const { return code_ ? code_->num_spills : 0; }
int FusedElementwiseKernel::num_vector_regs() const { return code_ ? code_->num_vector_regs : 0; }
bool FusedElementwiseKernel::Sums(int output) const { return code_->sums[static_cast<size_t>(output)]; }

void FusedElementwiseKernel::SetSteps() {
  const size_t n_in = layout_.inputs.size();
  const size_t n_ops = n_in + layout_.outputs.size();
  steps_.assign(n_ops * kEwMaxRank, 0);
  for (size_t k = 0; k < n_ops; ++k) {
    const EwOperand& op = k < n_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
    const int64_t bytes = EwElemBytes(op.elem);
    int64_t* step = &steps_[k * kEwMaxRank];
    step[kEwMaxRank - 1] = op.strides[0] * bytes;
    for (int level = 0; level <= layout_.rank - 2; ++level) {
      int64_t delta = op.strides[level];
      for (int e = level + 1; e <= layout_.rank - 2; ++e) delta -= (layout_.dims[e] - 1) * op.strides[e];
      step[level] = delta * bytes;
    }
  }
}

void FusedElementwiseKernel::Call(EwKernelArgs args) const {
  args.dims = layout_.dims.data();
  args.steps = steps_.data();
  fn_(&args);
}

namespace {

// Why `layout` is not of the structure `code_layout` (with the outputs it
// sums, `sums` / `inner_sums`) was generated for, or "".
std::string StructureMismatch(const EwLayout& code_layout, const std::vector<bool>& sums,
                              const std::vector<bool>& inner_sums, const EwLayout& layout) {
  std::ostringstream os;
  if (layout.rank != code_layout.rank || layout.inputs.size() != code_layout.inputs.size() ||
      layout.outputs.size() != code_layout.outputs.size()) {
    return "rank or operand count differs";
  }
  const int rank = layout.rank;
  auto pattern = [&](const EwOperand& a, const EwOperand& b, const char* kind, size_t k) {
    if (a.elem != b.elem) os << kind << k << " element type differs; ";
    for (int d = 0; d < rank; ++d) {
      if ((a.strides[d] == 0) != (b.strides[d] == 0)) os << kind << k << " stride " << d << " is 0 in one only; ";
    }
  };
  for (size_t k = 0; k < layout.inputs.size(); ++k) pattern(code_layout.inputs[k], layout.inputs[k], "in", k);
  for (size_t k = 0; k < layout.outputs.size(); ++k) {
    pattern(code_layout.outputs[k], layout.outputs[k], "out", k);
    const int o = static_cast<int>(k);
    if (!sums[k] && layout.IsReduction(o)) os << "out" << k << " would be a sum; ";
    if (!inner_sums[k] && layout.outputs[k].strides[rank - 1] == 0 && layout.dims[rank - 1] > 1) {
      os << "out" << k << " would be summed over the inner dim; ";
    }
  }
  return os.str();
}

}  // namespace

std::shared_ptr<FusedElementwiseKernel> FusedElementwiseKernel::Resized(EwLayout layout, std::string* why) const {
  KILN_CHECK(code_ != nullptr, "jit kernel '", name_, "': Resized before Create");
  auto fail = [&](const std::string& reason) -> std::shared_ptr<FusedElementwiseKernel> {
    if (why != nullptr) *why = "jit kernel '" + name_ + "' made for " + code_->layout.ToString() + " cannot serve " +
                               layout.ToString() + ": " + reason;
    return nullptr;
  };
  try {
    layout.Validate();
  } catch (const Error& e) {
    return fail(e.what());
  }
  const std::string mismatch = StructureMismatch(code_->layout, code_->sums, code_->inner_sums, layout);
  if (!mismatch.empty()) return fail(mismatch);
  std::shared_ptr<FusedElementwiseKernel> k(new FusedElementwiseKernel(name_, program_, std::move(layout), isa_));
  k->fused_ops_ = fused_ops_;
  k->code_ = code_;
  k->fn_ = fn_;
  k->deterministic_ = deterministic_;
  k->bf16_store_ = bf16_store_;
  k->SetSteps();
  return k;
}

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
  auto code = std::make_shared<Code>();
  code->jit = MakeEwGenerator(name_, plan, isa_, bf16_store_);
  code->jit->Create();
  code->layout = layout_;
  for (size_t k = 0; k < layout_.outputs.size(); ++k) {
    code->sums.push_back(layout_.IsReduction(static_cast<int>(k)));
    code->inner_sums.push_back(layout_.IsInnerReduction(static_cast<int>(k)));
  }
  code->num_spills = plan.num_spills;
  code->num_vector_regs = pool;
  fn_ = code->jit->fn<EwKernelFn>();
  code_ = std::move(code);
  SetSteps();
}

const uint8_t* FusedElementwiseKernel::code() const { return code_ ? code_->jit->getCode() : nullptr; }
size_t FusedElementwiseKernel::code_size() const { return code_ ? code_->jit->getSize() : 0; }

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
    if (Sums(k)) {  // always f32 (EwLayout::Validate)
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
    if (layout_.outputs[k].strides[0] == 0 && d0 > 1 && Sums(k)) partial.push_back(k);
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
    const EwKernelArgs args{inputs, outputs, 0, d0, layout_.dims.data(), steps_.data()};
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
    const EwKernelArgs args{inputs, outs[c].data(), bounds[c], bounds[c + 1], layout_.dims.data(), steps_.data()};
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
  os << "] code=" << code_size() << "B regs=" << num_vector_regs() << " spills=" << num_spills();
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
