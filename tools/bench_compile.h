// kiln bench --bench_what compile (tools/bench_compile.cc): how long the JIT
// takes to compile each cluster of --model's training program at
// --batch_size, and where that time goes (CompiledObject::compile_phases:
// the lowering steps, code generation, oneDNN primitive creation, the
// buffer plan). tools/bench/scaling.py runs it for docs/benchmarks.md.
#pragma once

#include <cstdint>

#include "framework/models/models.h"
#include "framework/tensor.h"

namespace kiln::tools {

// A batch of `rows` seeded random rows for `model`: features uniform in
// [0, 1) (token ids uniform over the vocabulary for a token model), labels
// uniform over the classes (the last dim of the probabilities).
struct RandomBatch {
  Tensor features, labels;
};
RandomBatch MakeRandomBatch(const Model& model, int64_t rows, uint64_t seed);

// Runs one training step with the JIT on (every cluster compiles once, in a
// process that has compiled nothing) and prints one JSON line: each compile
// with its cluster, op count, milliseconds and phases, and the totals.
int BenchCompile();

}  // namespace kiln::tools
