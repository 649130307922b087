// JitRuntime: one JIT as the jit_launch op sees it: a compile cache
// (compiler/compile_cache.h), the launch services (launch_op/launch_services.h)
// and the launch mode. The ops it launches are registered with it
// (RegisterJitOps(registry, runtime), launch_op/jit_launch_op.h). The command
// line and the Python package use DefaultJit() (launch_op/default_jit.h);
// a test makes its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "compiler/compile_cache.h"
#include "launch_op/launch_services.h"

namespace kiln::jit {

// kRuntime runs a compiled object's instruction list through runtime::Runner;
// kExecutor turns it into a program of jit_kernel ops run by the Executor.
enum class LaunchMode { kRuntime, kExecutor };
// "runtime" | "executor"; throws InvalidArgument otherwise.
LaunchMode ParseLaunchMode(const std::string& name);

// Everything the tool edge sets from the --jit_* flags, in one struct; the
// runtime hands each part to its owner.
struct JitOptions {
  size_t cache_capacity = 256;  // compiled objects kept (LRU)
  int recompile_limit = 8;      // distinct signatures a cluster compiles; past them only cached ones run compiled
  DynamicPolicy dynamic = DynamicPolicy::kAuto;  // CompileCacheOptions::dynamic (--jit_dynamic)
  CompileOptions compile;
  std::set<std::string> deny_clusters;  // LaunchOptions::deny_clusters
  int verbose = 0;                      // CompileCacheOptions::verbose
  std::function<std::string(const std::string& key)> cluster_name;
  std::function<void(const CompiledObject&, const JitSubgraph&)> on_compile;
  ShadowOptions shadow;
  InstructionFault fault_for_testing;
  LaunchMode launch_mode = LaunchMode::kRuntime;
  bool profile = false;  // --jit_profile
  LogSink log;           // stderr when not set
};

// The runtime's statistics: the cache's, the checks' and the launches'.
struct JitStats {
  int64_t compiles = 0;
  int64_t hits = 0;
  int64_t evictions = 0;
  int64_t failures = 0;        // compile errors (cluster ran through framework ops)
  int64_t unit_fallbacks = 0;  // units that could not be compiled and ran framework kernels alone
  int64_t fallback_calls = 0;  // calls answered with no compiled object
  int64_t denied_calls = 0;    // of those, calls for a denied cluster (deny_clusters or a failed shadow check)
  int64_t shadow_checks = 0;   // launches compared with the framework ops
  std::vector<ShadowFailure> shadow_failures;  // clusters denied by a failed check, in order
  int64_t dynamic_compiles = 0;  // CacheStats' dynamic shape counts
  int64_t dynamic_failures = 0;
  int64_t instances = 0;
  int64_t guard_failures = 0;
  double instance_ms = 0.0;
  double compile_ms = 0.0;
  double compile_cpu_ms = 0.0;
  std::map<std::string, double> compile_ms_per_key;
  std::map<std::string, int64_t> compiles_per_key;
  LaunchStats launch;
};

class JitRuntime {
 public:
  explicit JitRuntime(JitOptions options = {});

  // Replaces the options (the tool edge calls this from flags).
  void Configure(const JitOptions& options);
  JitOptions options() const;

  CompileCache& cache() { return cache_; }
  const CompileCache& cache() const { return cache_; }
  LaunchServices& launch() { return launch_; }
  const LaunchServices& launch() const { return launch_; }
  LaunchMode launch_mode() const { return mode_.load(std::memory_order_relaxed); }
  // Sets JitOptions::launch_mode alone.
  void SetLaunchMode(LaunchMode mode);

  // The compiled object for a launch of `key` with these input shapes, or
  // nullptr when the cluster runs through the framework ops (denied, past
  // its recompile limit, or failed to compile).
  std::shared_ptr<const CompiledObject> Compile(const std::string& key, const ShapeSignature& signature);

  // Executor-mode programs alive (each belongs to a compiled object: bounded
  // by the cache and the objects launches still hold). The counter is shared
  // with the programs, which may outlive the runtime.
  int64_t executor_programs_alive() const { return executor_programs_->load(); }
  const std::shared_ptr<std::atomic<int64_t>>& executor_programs() const { return executor_programs_; }

  JitStats stats() const;
  // Zeroes the statistics; compiled objects stay.
  void ResetStats();
  // Drops compiled objects, denials and statistics (subgraphs stay).
  void ClearCache();

 private:
  mutable std::mutex mu_;
  JitOptions options_;
  CompileCache cache_;
  LaunchServices launch_;
  std::atomic<LaunchMode> mode_{LaunchMode::kRuntime};
  std::shared_ptr<std::atomic<int64_t>> executor_programs_ = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<int64_t> fallback_calls_{0};  // denied calls (the cache counts its own)
};

}  // namespace kiln::jit
