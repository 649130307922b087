// Machine code for fused elementwise kernels: one EwProgram over one EwLayout
// becomes one Xbyak-generated function that reads each input once and writes
// each output once per iteration point, on AVX-512 (zmm, k-masked tails) or
// AVX2+FMA (ymm, vmaskmovps tails).
//
// Usage:
//   FusedElementwiseKernel k("fused_ew_0", program, layout);  // best ISA
//   k.set_fused_ops({"elementwise_add", "relu"});
//   k.Create();                          // generates code; throws kiln::Error
//   k.Run(inputs, outputs);              // all of the space, multi-threaded
//   auto k2 = k.Resized(other_layout, &why);  // the same code at other sizes
//
// Register allocation: SSA values get vector registers by a Belady allocator
// over the straight-line loop body (evict the value used furthest ahead).
// Programs with more live values than registers never fail: evicted values go
// to 64-byte stack slots (constants and loads that are not needed after the
// first store are re-read from memory instead). num_spills() reports it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/ew/ew_layout.h"
#include "framework/ew/ew_program.h"
#include "compiler/codegen/isa.h"

namespace kiln::jit {


// The generated function's one argument, read with offsetof. It covers
// iteration dim 0 from `begin` to `end` (all of the inner dims); for a rank-1
// layout that is a range of elements. The code bakes no size: it reads the
// dims and the operands' steps here, so that one function serves every
// layout of the structure it was generated for (FusedElementwiseKernel::Resized).
struct EwKernelArgs {
  const void* const* inputs;  // [layout.inputs.size()] base pointers (float, bf16 or bool by the operand's elem)
  void* const* outputs;       // [layout.outputs.size()] base pointers
  int64_t begin;
  int64_t end;
  const int64_t* dims = nullptr;  // [kEwMaxRank] the layout's dims
  // [(inputs + outputs) * kEwMaxRank] bytes per operand (inputs, then
  // outputs): [l], 0 <= l <= rank-2, from the last row under one index of
  // dim l to the first row under the next; [kEwMaxRank-1], from one dim-0
  // index to the next (the offset of `begin` is begin times it).
  const int64_t* steps = nullptr;
};

// How a kernel rounds f32 values into bf16 outputs. Both give the same bits
// (framework/bf16.h); kVcvtneps2bf16 needs AVX-512 with AVX512_BF16, the
// integer sequence runs on every ISA. kAuto takes the instruction where the
// CPU has it.
enum class Bf16Store : uint8_t { kAuto, kVcvtneps2bf16, kIntegerSequence };
const char* Bf16StoreName(Bf16Store s);
using EwKernelFn = void (*)(const EwKernelArgs*);

class JitKernel;  // compiler/codegen/jit_kernel.h (Xbyak; only generator sources include it)

class FusedElementwiseKernel {
 public:
  // Multi-threaded Run splits work only when the space has at least this many
  // elements (and gives each thread at least half of it).
  static constexpr int64_t kParallelMinElements = 64 * 1024;
  // Chunks of a deterministic kernel with sums over dim 0, whatever the
  // thread count (fewer for small spaces).
  static constexpr int64_t kDeterministicChunks = 8;

  FusedElementwiseKernel(std::string name, EwProgram program, EwLayout layout, Isa isa = HostIsa());
  ~FusedElementwiseKernel();
  FusedElementwiseKernel(const FusedElementwiseKernel&) = delete;
  FusedElementwiseKernel& operator=(const FusedElementwiseKernel&) = delete;

  // Validates the layout and program (kInvalidArgument), checks that the CPU
  // has the ISA (kUnimplemented), allocates registers and generates code.
  // Each output summed over the inner dim holds an accumulator register: at
  // most 6 such outputs on AVX2 and 22 on AVX-512 (kUnimplemented beyond; the
  // lowering splits the group).
  void Create();
  bool created() const { return fn_ != nullptr; }

  // Runs the whole space. Reduction outputs are overwritten with their sums.
  // Outputs may share a buffer with an input only when they have the same
  // strides and the output is not a reduction (in-place update). num_threads
  // 0 = omp_get_max_threads(). Elementwise outputs are bitwise identical for
  // every thread count; outputs summed over dim 0 add up per-chunk partials
  // in chunk order, with one chunk per thread, so they agree to rounding;
  // deterministic kernels cut those into chunks fixed by the shape
  // (at most kDeterministicChunks), so they are bitwise identical too.
  // Pointers are to floats, to uint16 bf16 bits for bf16 operands, to
  // bools (bytes 0/1) for bool ones.
  void Run(const void* const* inputs, void* const* outputs, int num_threads = 0) const;
  // All operands f32.
  void Run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs, int num_threads = 0) const;
  // Calls the generated code once for dim-0 range [args.begin, args.end)
  // (args.dims and args.steps are set to this kernel's).
  // Reduction outputs are ACCUMULATED into (+=): the caller zeroes them.
  void Call(EwKernelArgs args) const;

  // The same generated code over `layout`, a layout of the structure this
  // kernel was created for: the same rank, operand count and element types,
  // the same zero / nonzero pattern of every stride, and no output a sum
  // where this kernel's is not (an output this kernel sums may be summed
  // over dims of size 1: a sum of one term), nor an output whose inner
  // stride is 0 without an inner sum spanning more than one element.
  // nullptr, with the reason in `why`, when the code cannot compute it.
  // The copy shares the code and the settings (name, fused ops,
  // deterministic); this kernel must be created.
  std::shared_ptr<FusedElementwiseKernel> Resized(EwLayout layout, std::string* why) const;

  const std::string& name() const { return name_; }
  Isa isa() const { return isa_; }
  const EwProgram& program() const { return program_; }
  const EwLayout& layout() const { return layout_; }
  // The ops of the source graph this kernel computes (for dumps).
  const std::vector<std::string>& fused_ops() const { return fused_ops_; }
  void set_fused_ops(std::vector<std::string> ops) { fused_ops_ = std::move(ops); }
  // Results independent of the thread count (see Run).
  void set_deterministic(bool on) { deterministic_ = on; }
  // Before Create(): how bf16 outputs are rounded (kAuto by default;
  // Create() throws kUnimplemented for an instruction the CPU lacks).
  void set_bf16_store(Bf16Store s) { bf16_store_ = s; }
  Bf16Store bf16_store() const { return bf16_store_; }
  bool deterministic() const { return deterministic_; }

  // Generated bytes, for disassembly in dumps (valid after Create()).
  const uint8_t* code() const;
  size_t code_size() const;
  // Values moved to stack slots by the allocator, vector registers it had.
  int num_spills() const;
  int num_vector_regs() const;
  // "kernel NAME isa=avx512 ops=[a,b] code=1234B regs=26 spills=0\n layout\n program".
  std::string ToString() const;

 private:
  struct Code;  // the generated function and the structure it serves (ew_codegen.cc)

  // Fills steps_ from layout_ (the sizes the code reads).
  void SetSteps();
  // Output k is summed (zeroed by Run, accumulated by the code).
  bool Sums(int output) const;

  std::string name_;
  EwProgram program_;
  EwLayout layout_;
  Isa isa_;
  std::vector<std::string> fused_ops_;
  std::shared_ptr<const Code> code_;
  EwKernelFn fn_ = nullptr;
  std::vector<int64_t> steps_;  // EwKernelArgs::steps of layout_
  bool deterministic_ = false;
  Bf16Store bf16_store_ = Bf16Store::kAuto;
};

}  // namespace kiln::jit
