// A small training program run step by step over fed batches, the way the
// JIT-against-framework tests of model ops compare runs: the same program
// (or its jitted form) from the same startup program, the losses of every
// step and the values of chosen vars after the last one.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "tests/test_jit.h"

namespace kiln::test {

struct TrainNet {
  std::string name;  // for the test's messages
  proto::ProgramDesc startup, train;
  std::vector<std::map<std::string, Tensor>> steps;  // the feeds of each step
  std::string loss;
  std::vector<std::string> compared;  // vars read back after the last step
};

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, Tensor> vars;  // `compared`, after the last step
};

// Runs `program` (n.train or a transformed copy) once per step of `n`, its
// ops from `registry` (a TestJit's for a jitted program). The compared vars
// are fetch targets too: the executor would otherwise reuse the buffers of
// intermediates (gradients) once their last reader ran.
inline TrainRun TrainSteps(const TrainNet& n, const proto::ProgramDesc& program,
                           const OpRegistry& registry = OpRegistry::Global()) {
  Scope scope;
  Executor({}, registry).RunProgram(n.startup, scope);
  Executor exec({}, registry);
  std::set<std::string> keep(n.compared.begin(), n.compared.end());
  keep.insert(n.loss);
  auto plan = exec.Prepare(program, 0, keep);
  TrainRun r;
  for (const auto& feeds : n.steps) {
    for (const auto& [name, t] : feeds) FeedTensor(program.blocks(0), scope, name, t);
    exec.Run(*plan, scope);
    r.losses.push_back(scope.GetVar(n.loss)->Get().data<float>()[0]);
  }
  for (const std::string& v : n.compared) r.vars[v].CopyFrom(scope.GetVar(v)->Get());
  return r;
}

inline int CountOps(const proto::ProgramDesc& p, const std::string& type) {
  int count = 0;
  for (const auto& op : p.blocks(0).ops()) count += op.type() == type;
  return count;
}

// The fixture of these tests: a JIT of the test's own (tests/test_jit.h),
// made fresh for each test; its programs run through jit_.registry().
class JitTrainTest : public ::testing::Test {
 protected:
  TestJit jit_;
};

}  // namespace kiln::test
