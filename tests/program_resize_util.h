// Dynamic shapes in the tests of the lowering steps: a case compiled for one
// shape, its kernels resized (runtime::Kernel::Resize) to the buffers of the
// same case compiled for another, run against the reference kernels there.
// This is what a compiled object serving several shapes does (issue 32),
// kernel by kernel.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/lowering_test_util.h"

namespace kiln::test {

// `target`'s program with each kernel replaced by `made`'s (the same
// instruction, compiled for other shapes) resized to `target`'s argument
// dims, or kept as it is when it reads dims at run time. Instructions whose
// kernel refuses keep `target`'s kernel; their "name: why" go to `refused`.
// Returns the names of the kernels taken from `made`.
inline std::set<std::string> ResizeInto(const jit::CompiledObject& made, const jit::CompiledObject& target,
                                        runtime::Program* program, std::vector<std::string>* refused) {
  *program = target.program;
  std::set<std::string> taken;
  const auto& from = made.program.instructions;
  auto& to = program->instructions;
  if (from.size() != to.size()) {
    ADD_FAILURE() << "the two shapes compile to " << from.size() << " and " << to.size() << " instructions";
    return taken;
  }
  for (size_t i = 0; i < to.size(); ++i) {
    const runtime::Kernel& k = *from[i].kernel;
    if (k.name() != to[i].kernel->name() || from[i].args.size() != to[i].args.size()) {
      ADD_FAILURE() << "instruction " << i << " is " << k.name() << " and " << to[i].kernel->name();
      continue;
    }
    std::vector<Dims> dims;
    for (int b : to[i].args) dims.push_back(program->plan.buffers[b].dims);
    std::string why;
    std::shared_ptr<const runtime::Kernel> r = k.ReadsDimsAtRunTime() ? from[i].kernel : k.Resize(dims, &why);
    if (r == nullptr) {
      refused->push_back(why);
      continue;
    }
    to[i].kernel = r;
    taken.insert(k.name());
  }
  return taken;
}

// Compiles `made` and each of `others` (the same ops at other shapes); runs
// `made`'s kernels resized to each other shape against the reference
// kernels; EXPECTs every kernel whose name begins with one of `prefixes` to
// have resized.
inline void CheckResizedPrograms(const LoweringCase& made, const std::vector<LoweringCase>& others,
                                 const std::vector<std::string>& prefixes, double atol = 1e-5, double rtol = 1e-5) {
  const auto from = LowerCase(made);
  for (const LoweringCase& c : others) {
    const auto target = LowerCase(c);
    runtime::Program program;
    std::vector<std::string> refused;
    const std::set<std::string> taken = ResizeInto(*from, *target, &program, &refused);
    for (const std::string& p : prefixes) {
      int named = 0;
      for (const auto& ins : target->program.instructions) {
        if (ins.kernel->name().rfind(p, 0) != 0) continue;
        ++named;
        EXPECT_EQ(taken.count(ins.kernel->name()), 1u) << c.name << ": " << ins.kernel->name() << " did not resize";
      }
      EXPECT_GT(named, 0) << c.name << ": no kernel named " << p << "_*\n" << target->Listing();
    }
    std::string all;
    for (const std::string& r : refused) all += "\n  refused: " + r;
    SCOPED_TRACE(c.name + ": " + std::to_string(taken.size()) + " kernels resized" + all);
    CheckProgramNumerics(c, *target, program, atol, rtol);
  }
}

}  // namespace kiln::test
