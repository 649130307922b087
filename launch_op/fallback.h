// How a cluster runs when it has no compiled object (a signature past
// --jit_recompile_limit, a denied cluster, a failed compile): its own
// framework ops, which should cost what the same program costs with the JIT
// off.
//
// Most ops in a cluster are the ones the program had, on the kernels JIT off
// uses. fused_attention and fused_attention_grad are not: attention_fusion_pass
// makes them only with the JIT on, and their framework kernels are scalar
// references (the fast kernels are the compiler's). A fallback that ran those
// measured 6x the JIT-off step on the transformer. The fallback's registry
// runs them on the compiler's tiled kernels (compiler/kernels/attention),
// f32, on the JIT's ISA; other dtypes and a grad without dOut keep the
// reference kernel. The execution plan of each cluster's ops is prepared
// once and reused.
//
// The shadow check does not use the fallback's registry: it compares
// compiled kernels against the reference ones (RunClusterOps).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/executor.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"
#include "framework/scope.h"
#include "launch_op/jit_runtime.h"

namespace kiln::jit {

// A copy of every op `base` holds now but the JIT's own (jit_launch,
// jit_kernel), with the fused attention ops (when there) on the tiled
// kernels for `isa`.
std::unique_ptr<OpRegistry> MakeFallbackRegistry(const OpRegistry& base, Isa isa);

// The cluster's own framework ops over a fresh scope holding `inputs` (in
// the subgraph's input order; shared, or deep copies with `copy_inputs`);
// the scope holds the outputs afterwards. `plan`: one prepared for the
// subgraph by `exec` before, else prepared here.
std::unique_ptr<Scope> RunClusterOps(const JitSubgraph& sg, const std::vector<Tensor>& inputs, bool copy_inputs,
                                     const Executor& exec, ExecutionPlan* plan = nullptr);

// The fallback of the clusters of one JIT: its registry, made at the first
// fallback from the registry the launch op is in (so that it holds every op
// registered by then) for the JIT's ISA, and one prepared plan per cluster. Thread-safe: a
// cluster falling back on several threads at once prepares a plan for each
// thread that finds the cached one in use.
class FallbackOps {
 public:
  std::unique_ptr<Scope> Run(const std::string& key, const JitSubgraph& sg, const std::vector<Tensor>& inputs,
                             const ExecutorOptions& options, const OpRegistry& base, const JitRuntime& jit);

 private:
  struct CachedPlan {
    std::mutex mu;
    std::unique_ptr<ExecutionPlan> plan;
  };
  std::once_flag once_;
  std::unique_ptr<OpRegistry> registry_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<CachedPlan>> plans_;
};

}  // namespace kiln::jit
