// Tests' way into the JIT: the production pipeline (passes/pipeline.h) with
// build_jit_pass storing its subgraphs in jit::DefaultJit(), as
// tools/pipeline_setup.h wires it for the tools.
#pragma once

#include "launch_op/default_jit.h"
#include "passes/pipeline.h"

namespace kiln::test {

// build_jit_pass alone with `options`; the others can be turned on.
inline PipelineOptions JitPipeline(const BuildJitPassOptions& options, BuildJitReport* report = nullptr) {
  PipelineOptions o;
  o.build_jit = true;
  o.config.build_jit = options;
  o.config.jit_sink = [](const JitSubgraph& sg) { return jit::DefaultJit().cache().AddSubgraph(sg); };
  o.config.build_jit_report = report;
  return o;
}

inline proto::ProgramDesc ApplyBuildJit(const proto::ProgramDesc& program, const BuildJitPassOptions& options,
                                        BuildJitReport* report = nullptr) {
  return RunPipeline(program, JitPipeline(options, report));
}

}  // namespace kiln::test
