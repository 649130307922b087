// Random valid training programs for the JIT differential fuzzer
// (fuzz_jit_program.cc), decoded from the fuzzer's bytes.
//
// A table of op families (elementwise, activation, matmul, reduce, softmax,
// layer_norm, batch_norm, reshape2/transpose2, concat/split/slice, conv2d and
// pool2d, lookup_table, ...) each builds ops within its op's contract: shapes
// and attributes drawn from the bytes, operands from the vars built so far or
// new fed inputs and parameters. Sometimes the program gets a loss,
// append_backward and optimizer updates (sgd, momentum or adam, in place, as
// training programs do).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"
#include "tests/fuzz/fuzz_util.h"

namespace kiln::fuzz {

struct RandomProgram {
  proto::ProgramDesc startup;
  proto::ProgramDesc main;
  std::vector<std::pair<std::string, Tensor>> feeds;
  // The vars compared between JIT off and on: the program's outputs, the
  // loss, the gradients and the updated parameters.
  std::vector<std::string> fetches;
  std::vector<std::string> families;  // families of the ops built, in order
  // Why shape inference refused ops the generator built (the ops are left out).
  std::vector<std::string> rejected;
  bool backward = false;
};

// The op families the generator knows, by name.
const std::vector<std::string>& FamilyNames();

// Decodes `in` into a program of at least one op; an empty `main` (no block)
// when nothing could be built.
RandomProgram BuildRandomProgram(FuzzInput& in);

}  // namespace kiln::fuzz
