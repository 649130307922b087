// What the program harnesses check on a parsed program, as `kiln run` treats
// a program file: ValidateProgram, then (when it validates) the production
// pass pipeline (recompute_pass, build_jit_pass, inplace_pass) with every
// var kept, whose output must validate again. Validation may refuse with
// kiln::Error; a pass refusing a valid program or producing an invalid one
// is a finding. Each input gets a JIT of its own (tests/test_jit.h) to hold
// the subgraphs and to know jit_launch.
#pragma once

#include "framework/validate.h"
#include "passes/pipeline.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/test_jit.h"

namespace kiln::fuzz {

inline void CheckProgram(const proto::ProgramDesc& program) {
  ValidateProgram(program);
  test::TestJit jit;
  PipelineOptions o = jit.Pipeline(BuildJitPassOptions{});
  o.recompute = o.inplace = true;
  proto::ProgramDesc out;
  try {
    out = RunPipeline(program, o, jit.registry());
  } catch (const Error& e) {
    Finding(std::string("the pass pipeline refused a valid program: ") + e.what());
  }
  try {
    ValidateProgram(out, jit.registry());
  } catch (const Error& e) {
    Finding(std::string("the pass pipeline made a valid program invalid: ") + e.what());
  }
}

}  // namespace kiln::fuzz
