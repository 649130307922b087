// LaunchServices: what the launches of one JIT runtime share besides the
// compile cache: the deny list (--jit_deny_clusters and clusters whose shadow
// check failed), the shadow-check schedule, the test fault, the profiler,
// the launch counters and the training step for reports. Owned by a
// JitRuntime (launch_op/jit_runtime.h); a test may make its own.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "compiler/compile_cache.h"
#include "compiler/compiled_object.h"
#include "runtime/profiler.h"

namespace kiln::jit {

// Online shadow checking (--jit_shadow_every): a checked launch also runs the
// cluster's framework ops on copies of its inputs and compares the outputs.
// An element fails when |jit - framework| > atol + rtol * |framework|, when
// exactly one of the two is NaN, or when they are not the same infinity.
struct ShadowOptions {
  int every = 0;  // check launches 1, 1+every, 1+2*every, ... of each cluster; 0: never
  double rtol = 1e-3;
  double atol = 1e-5;
};

// Test only (no flag reaches it): called after instruction `i` of every
// compiled launch with the instruction's buffers, before any other check, to
// make a kernel wrong on purpose.
using InstructionFault =
    std::function<void(const CompiledObject& obj, size_t i, const runtime::BufferView* args)>;

// A failed shadow check: the output that is furthest beyond the tolerance.
struct ShadowFailure {
  std::string key;
  std::string op;     // the first op of the cluster that writes `var`, e.g. "op #2 'sgd_0' (sgd)"
  std::string var;
  std::string shape;  // "f32[64,10]"
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;  // |jit - framework| / |framework| over elements where framework != 0
  int64_t mismatches = 0;      // elements beyond the tolerance
  int64_t numel = 0;
  std::string first_mismatch;  // "flat index 5: jit 1.5, framework 0.25"
  // Largest difference on `var` between the framework's oneDNN and reference
  // kernels (launch_op/shadow_check.h), -1 when not measured.
  double framework_spread = -1.0;
  int64_t step = 0;    // the training step (LaunchServices::SetStep), 0 when unknown
  int64_t launch = 0;  // the cluster's compiled launch, 1-based
  // One line without the cluster's name, e.g. "op #2 'sgd_0' (sgd) writes
  // 'fc0.w' f32[64,10]: max abs error 0.5, max rel error 1, 3 of 640 ...".
  std::string ToString() const;
};

struct LaunchOptions {
  // Cluster keys (as kiln dump prints them) that never compile: their
  // launches run the subgraph's framework ops (--jit_deny_clusters).
  std::set<std::string> deny_clusters;
  ShadowOptions shadow;
  InstructionFault fault_for_testing;
  bool profile = false;  // --jit_profile
  // The cluster's name in reports; the key itself when not set.
  std::function<std::string(const std::string& key)> cluster_name;
  LogSink log;
};

// What a compiled launch does besides running its program (BeginLaunch).
struct LaunchChecks {
  bool shadow = false;  // compare with the framework ops this time
  ShadowOptions tolerances;
  int64_t launch = 0;   // the cluster's compiled launch, 1-based (counted while checks are on)
  InstructionFault fault;
};

// What the launches of a runtime's clusters did (counted by launch_op/).
struct LaunchStats {
  int64_t launches = 0;
  int64_t donated = 0;              // in-place updates on the input's own buffer
  int64_t copy_protected = 0;       // in-place updates that copied a shared buffer first
  int64_t framework_fallbacks = 0;  // launches run through the subgraph's framework ops
  int64_t inputs_donated = 0;       // dying inputs whose memory held the cluster's temps
  int64_t inputs_kept = 0;          // dying inputs shared elsewhere: their temps got a block of their own
};

// The deny list's and the shadow checks' statistics.
struct CheckStats {
  int64_t denied_calls = 0;   // launches of a denied cluster (deny_clusters or a failed shadow check)
  int64_t shadow_checks = 0;  // launches compared with the framework ops
  std::vector<ShadowFailure> shadow_failures;  // clusters denied by a failed check, in order
};

enum class LaunchEvent { kLaunch, kDonated, kCopyProtected, kFrameworkFallback, kInputDonated, kInputKept };

class LaunchServices {
 public:
  explicit LaunchServices(LaunchOptions options = {});

  void Configure(const LaunchOptions& options);
  LaunchOptions options() const;

  // True for a denied cluster, counting the call; lock-free while nothing is
  // denied.
  bool Denied(const std::string& key);
  // Starts a compiled launch of `key`: counts it for the cluster and says
  // whether it is shadow-checked. Lock-free while shadow checks and the test
  // fault are off.
  LaunchChecks BeginLaunch(const std::string& key);
  // Denies `failure.key` after a failed shadow check: Denied is true for it
  // from now on. The first failure of a cluster is logged and kept in
  // stats(); returns false for a cluster already denied.
  bool DenyAfterShadowFailure(ShadowFailure failure);
  // The training step running now, for reports (0: unknown). Thread-safe.
  void SetStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  // The test fault (LaunchOptions::fault_for_testing), or an empty function.
  InstructionFault fault_for_testing() const;

  // Per-instruction timing of the runtime's programs (--jit_profile):
  // profiler() is nullptr until profiling is on; launches pass it to the runner.
  runtime::Profiler* profiler() { return profiling_ ? &profiler_ : nullptr; }
  const runtime::Profiler& profile() const { return profiler_; }
  // Counts one launch event (thread-safe, lock-free).
  void Count(LaunchEvent event) { counts_[static_cast<size_t>(event)].fetch_add(1, std::memory_order_relaxed); }
  LaunchStats launch_stats() const;
  CheckStats check_stats() const;
  // Zeroes the launch counters.
  void ResetCounters();
  // Zeroes the counters and the check statistics.
  void ResetStats();
  // Forgets the clusters denied by shadow checks and the launch numbers too.
  void Clear();

 private:
  void UpdateFlagsLocked();

  mutable std::mutex mu_;
  LaunchOptions options_;
  std::set<std::string> shadow_denied_;               // keys whose shadow check failed
  std::map<std::string, int64_t> compiled_launches_;  // key -> launches counted by BeginLaunch
  CheckStats stats_;
  std::array<std::atomic<int64_t>, 6> counts_{};
  std::atomic<bool> profiling_{false};
  std::atomic<bool> checks_on_{false};  // shadow.every > 0 or a test fault
  std::atomic<bool> any_denied_{false};  // deny_clusters or shadow_denied_ not empty
  std::atomic<int64_t> step_{0};
  runtime::Profiler profiler_;
};

}  // namespace kiln::jit
