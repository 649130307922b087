// What the program harnesses check on a parsed program, as `kiln run` treats
// a program file: ValidateProgram, then (when it validates) the production
// pass pipeline (recompute_pass, build_jit_pass, inplace_pass) with every
// var kept, whose output must validate again. Validation may refuse with
// kiln::Error; a pass refusing a valid program or producing an invalid one
// is a finding.
#pragma once

#include "launch_op/default_jit.h"
#include "framework/validate.h"
#include "launch_op/jit_launch_op.h"
#include "passes/pipeline.h"
#include "tests/fuzz/fuzz_util.h"

namespace kiln::fuzz {

inline void CheckProgram(const proto::ProgramDesc& program) {
  static const bool registered = [] {
    jit::RegisterJitOps(OpRegistry::GlobalForRegistration(), jit::DefaultJit());
    return true;
  }();
  (void)registered;
  ValidateProgram(program);
  PipelineOptions o;
  o.recompute = o.build_jit = o.inplace = true;
  o.config.jit_sink = [](const JitSubgraph& sg) { return jit::DefaultJit().cache().AddSubgraph(sg); };
  proto::ProgramDesc out;
  try {
    out = RunPipeline(program, o);
  } catch (const Error& e) {
    Finding(std::string("the pass pipeline refused a valid program: ") + e.what());
  }
  try {
    ValidateProgram(out);
  } catch (const Error& e) {
    Finding(std::string("the pass pipeline made a valid program invalid: ") + e.what());
  }
}

}  // namespace kiln::fuzz
