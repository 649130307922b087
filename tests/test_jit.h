// A JIT of the test's own: a runtime (launch_op/jit_runtime.h) and a
// registry holding every built-in op plus jit_launch and jit_kernel bound to
// that runtime. A test runs its jitted programs through Executor(options,
// registry()) and transforms them with Pipeline(), so it shares no cache,
// counters, options or launch mode with other tests or with jit::DefaultJit().
#pragma once

#include <string>
#include <utility>

#include "framework/executor.h"
#include "framework/op_registry.h"
#include "launch_op/jit_launch_op.h"
#include "launch_op/jit_runtime.h"
#include "passes/pipeline.h"

namespace kiln::test {

class TestJit {
 public:
  explicit TestJit(jit::JitOptions options = {}) : runtime_(std::move(options)) {
    RegisterAllOps(registry_);
    jit::RegisterJitOps(registry_, runtime_);
  }
  TestJit(const TestJit&) = delete;
  TestJit& operator=(const TestJit&) = delete;

  jit::JitRuntime& runtime() { return runtime_; }
  jit::JitRuntime* operator->() { return &runtime_; }
  const OpRegistry& registry() const { return registry_; }
  Executor executor(ExecutorOptions options = {}) const { return Executor(options, registry_); }

  // build_jit_pass alone with `options`, storing its subgraphs in this
  // runtime's cache; the other passes can be turned on.
  PipelineOptions Pipeline(const BuildJitPassOptions& options, BuildJitReport* report = nullptr) {
    PipelineOptions o;
    o.build_jit = true;
    o.config.build_jit = options;
    o.config.jit_sink = [this](const JitSubgraph& sg) { return runtime_.cache().AddSubgraph(sg); };
    o.config.build_jit_report = report;
    return o;
  }
  proto::ProgramDesc ApplyBuildJit(const proto::ProgramDesc& program, const BuildJitPassOptions& options,
                                   BuildJitReport* report = nullptr) {
    return RunPipeline(program, Pipeline(options, report), registry_);
  }

 private:
  jit::JitRuntime runtime_;  // before registry_: the registered ops refer to it
  OpRegistry registry_;
};

}  // namespace kiln::test
