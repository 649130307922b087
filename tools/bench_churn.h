// Shape churn: one training step for each batch size of a seeded permutation
// of 1..N, with what the process keeps measured along the way: the JIT's
// compiled-object cache and its by-id map, the executor-mode programs, the
// oneDNN primitive cache, the caching allocator and the resident set. Every
// one of them must stay bounded however many sizes a run sees
// (`kiln bench --bench_what churn`, tests/bench_churn_test.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/executor.h"
#include "framework/models/models.h"
#include "framework/op_registry.h"
#include "launch_op/jit_runtime.h"

namespace kiln::tools {

struct ChurnPoint {
  int64_t sizes_seen = 0;
  double rss_mib = 0.0;              // VmRSS now
  double heap_in_use_mib = 0.0;      // malloc's bytes in use (mallinfo2), live data only
  size_t jit_cache_entries = 0;      // CompileCache::cache_size()
  size_t jit_ids_tracked = 0;        // CompileCache::ids_tracked()
  int64_t executor_programs = 0;     // JitRuntime::executor_programs_alive()
  size_t primitive_cache_entries = 0;
  size_t allocator_held_bytes = 0;   // live + cached blocks
  int64_t jit_compiles = 0;
  int64_t jit_evictions = 0;
  int64_t framework_fallbacks = 0;   // launches that ran the framework ops
};

struct ChurnOptions {
  int64_t sizes = 10000;            // batch sizes 1..sizes, each once
  std::vector<int64_t> checkpoints;  // after how many sizes to measure (the end always)
  uint64_t seed = 1;                // of the order and the data
  // After every step (its batch size and loss), e.g. to check the caches.
  std::function<void(int64_t batch, float loss)> on_step;
};

// Runs `program` (the model's training program after the pass pipeline; its
// startup has not run) over the sizes on seeded random data, its ops from
// `registry`; the JIT figures are those of `jit`, the runtime the registry's
// jit_launch ops are bound to.
std::vector<ChurnPoint> RunChurn(const Model& model, const proto::ProgramDesc& program, const ChurnOptions& options,
                                 const ExecutorOptions& exec_options, const jit::JitRuntime& jit,
                                 const OpRegistry& registry);

// The resident set of this process in MiB (/proc/self/status VmRSS), 0 when
// it cannot be read.
double CurrentRssMib();

// kiln bench --bench_what churn: RunChurn of --model's training program with
// the flags' pipeline and JIT settings over --bench_churn_sizes sizes,
// measured at 1k, 5k, 10k, ... sizes, on jit::DefaultJit(); one JSON line.
int BenchChurn();

}  // namespace kiln::tools
