// What the JIT compiler produces for one cluster and one shape signature:
// a runtime::Program (instructions + buffer plan) plus the facts the launch op
// needs to bind the framework's tensors to it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "compiler/dynamic/sym_dim.h"
#include "framework/onednn/settings.h"
#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::jit {

// dtype and dims of one cluster input.
struct InputSpec {
  DataType dtype = DataType::kFP32;
  Dims dims;
  bool operator==(const InputSpec& o) const { return dtype == o.dtype && dims == o.dims; }
};

struct ShapeSignature {
  std::vector<InputSpec> inputs;
  bool operator==(const ShapeSignature& o) const { return inputs == o.inputs; }
  size_t Hash() const;
  // "(f32[64,784], f32[784,128])"
  std::string ToString() const;
};

struct CompileOptions {
  // The host's (DefaultIsa): code for an ISA the CPU lacks cannot run.
  Isa isa = DefaultIsa();
  bool use_onednn = true;          // anchors through oneDNN kernels
  bool fuse_elementwise = true;    // elementwise groups as generated kernels
  bool reuse_buffers = true;       // arena plan reuses dead intermediates
  // Results independent of the thread count (--deterministic): generated
  // kernels split sums over rows into chunks fixed by the shape
  // (FusedElementwiseKernel::set_deterministic); oneDNN primitives are
  // created for and run on one thread (onednn::Settings::deterministic).
  bool deterministic = false;
  // What oneDNN matmuls and convolutions multiply in (--amp): the fused
  // matmul, matmul+sgd and fused conv kernels are created with it, and a
  // framework op the cluster runs (a matmul_grad, a conv2d_grad) gets it in
  // its ExecContext.
  ComputeType amp_compute = ComputeType::kF32;
  // Framework ops the cluster runs take oneDNN's slow implementations
  // (onednn::Settings::allow_slow_impls; tests only). The JIT's own oneDNN
  // kernels take whatever implementation oneDNN has.
  bool allow_slow_impls = false;
  // The oneDNN settings the cluster's kernels are created and run with.
  onednn::Settings OneDnnSettings() const {
    onednn::Settings s;
    s.allow_slow_impls = allow_slow_impls;
    s.deterministic = deterministic;
    s.amp_compute = amp_compute;
    return s;
  }
  bool operator==(const CompileOptions& o) const {
    return isa == o.isa && use_onednn == o.use_onednn && fuse_elementwise == o.fuse_elementwise &&
           reuse_buffers == o.reuse_buffers && deterministic == o.deterministic &&
           amp_compute == o.amp_compute && allow_slow_impls == o.allow_slow_impls;
  }
  size_t Hash() const;
};

// How the compile cache treats a cluster whose input dims change
// (--jit_dynamic): kOff compiles every shape signature on its own; kAuto
// compiles the first one specialised and, when dims change, compiles once
// more with the changed dims symbolic (one object for every value of them);
// kOn makes the dims the program declares -1 symbolic from the first compile.
enum class DynamicPolicy : uint8_t { kOff, kAuto, kOn };
const char* DynamicPolicyName(DynamicPolicy p);
// Throws InvalidArgument naming the flag for a value other than off, auto, on.
DynamicPolicy ParseDynamicPolicy(const std::string& s);

// What makes a compiled object serve every value of some input dims: its
// symbols and, for each buffer of its program and each output, the dims as
// polynomials in them (compiler/dynamic/sym_dim.h). Shared by the object and
// the instances made from it for concrete shapes (compiler/dynamic/instantiate.h).
struct DynamicShape {
  std::vector<Symbol> symbols;
  // The signature with -1 at every symbol's positions.
  ShapeSignature symbolic;
  std::vector<SymDims> buffer_dims;  // program.plan.buffers[b].dims
  std::vector<SymDims> output_dims;  // output_dims[o]
  // The symbols' values when `sig` has the symbolic signature's dtypes, ranks
  // and static dims and each symbol one value at all its positions.
  std::optional<std::vector<int64_t>> Match(const ShapeSignature& sig) const;
  // "(f32[64,S,1], i64[64,S,1])".
  std::string SignatureString() const;
  // "S = ids dim 1, targets dim 1" (the first three positions of each
  // symbol, then how many more).
  std::string SymbolsString(const std::vector<std::string>& input_names) const;
};

// Something a layer above the compiler builds from a compiled object and keeps
// with it (the executor launch mode's program of jit_kernel ops): it lives
// and dies with the object, so the cache's bound covers it too.
class CompiledObjectAttachment {
 public:
  virtual ~CompiledObjectAttachment() = default;
};

struct CompiledObject {
  uint64_t id = 0;  // unique in the process
  std::string key;
  ShapeSignature signature;
  CompileOptions options;
  runtime::Program program;
  std::vector<std::string> input_names;   // jit_launch X order
  std::vector<std::string> output_names;  // jit_launch Out order
  std::vector<Dims> output_dims;
  std::vector<DataType> output_dtypes;
  // For each output, the input with the same var name (an in-place update), or -1.
  std::vector<int> output_alias;
  // For each output: computed in the arena and handed out without a buffer
  // (JitSubgraph::shape_only_outputs).
  std::vector<bool> output_shape_only;
  // Set when the object serves every value of some input dims: on the
  // object compiled with them symbolic and on each instance made from it.
  std::shared_ptr<const DynamicShape> dynamic;
  uint64_t instance_of = 0;             // an instance: the id of the object it was made from
  std::vector<int64_t> symbol_values;   // an instance: the values of dynamic->symbols
  double compile_ms = 0.0;      // wall time of Lower()
  double compile_cpu_ms = 0.0;  // the compiling thread's CPU time in it (what holds on a loaded machine)
  // Where that time went, in order (timing): "cluster" (the cluster's
  // shapes), "pending" (a unit per op), each lowering step, "var uses",
  // "emit <unit kind>" (generated code for ew_group, oneDNN primitives for
  // onednn_*, ...), "trace", "plan" (the buffer plan and the instruction
  // list).
  struct Phase {
    std::string name;
    double wall_ms = 0.0;
    double cpu_ms = 0.0;
  };
  std::vector<Phase> compile_phases;
  // What each lowering step matched (compiler/lower.h), for lowering.txt.
  std::string lowering;
  // Units that could not be compiled and fell back alone, one line each
  // (kind, ops, step, reason).
  std::vector<std::string> unit_fallbacks;

  // Instructions with their argument buffers, then the buffer plan.
  std::string Listing() const;

  // The attachment, made by `make` on the first call (thread-safe).
  std::shared_ptr<const CompiledObjectAttachment> Attachment(
      const std::function<std::shared_ptr<const CompiledObjectAttachment>()>& make) const;

 private:
  mutable std::mutex attachment_mu_;
  mutable std::shared_ptr<const CompiledObjectAttachment> attachment_;
};

}  // namespace kiln::jit
