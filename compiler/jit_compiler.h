// JitCompiler: the store of cluster subgraphs (by key) and the cache of their
// compiled objects per (key, shape signature, options). One process-wide
// instance (Instance()); tests construct their own.
//
// Concurrent callers of one signature compile it once (single-flight);
// different signatures compile in parallel. The cache is bounded (LRU). A
// cluster that keeps recompiling for new shapes past the recompile limit is
// compiles no more: a launch with a signature still in the cache runs
// compiled, any other runs the framework ops (Compile returns nullptr), and
// so does every launch of a cluster that fails to compile, of a denied cluster
// and of a cluster whose shadow check failed.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "framework/lru_cache.h"
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
  int64_t step = 0;    // the training step (JitCompiler::SetStep), 0 when unknown
  int64_t launch = 0;  // the cluster's compiled launch, 1-based
  // One line without the cluster's name, e.g. "op #2 'sgd_0' (sgd) writes
  // 'fc0.w' f32[64,10]: max abs error 0.5, max rel error 1, 3 of 640 ...".
  std::string ToString() const;
};

struct JitCompilerOptions {
  size_t cache_capacity = 256;  // compiled objects kept (LRU)
  int recompile_limit = 8;      // distinct signatures a cluster compiles; past them only cached ones run compiled
  CompileOptions compile;
  // Cluster keys (as kiln dump prints them) that never compile: their
  // launches run the subgraph's framework ops (--jit_deny_clusters).
  std::set<std::string> deny_clusters;
  // >= 1: every cache miss of a key that already has a compiled signature
  // logs on stderr what changed, e.g.
  //   kiln jit: cluster c3 recompiles: input x dims [64,784] -> [32,784]
  int verbose = 0;
  // The cluster's name in logs (the tools map keys to c0, c1, ...); the key
  // itself when not set.
  std::function<std::string(const std::string& key)> cluster_name;
  // Called after each successful compile, on the compiling thread and outside
  // the cache lock (cache hits never call it), e.g. to dump the compiled
  // object. Errors it throws are reported on stderr and otherwise ignored.
  std::function<void(const CompiledObject&, const JitSubgraph&)> on_compile;
  ShadowOptions shadow;
  InstructionFault fault_for_testing;
};

// What a compiled launch does besides running its program (BeginLaunch).
struct LaunchChecks {
  bool shadow = false;  // compare with the framework ops this time
  ShadowOptions tolerances;
  int64_t launch = 0;   // the cluster's compiled launch, 1-based (counted while checks are on)
  InstructionFault fault;
};

// What the launches of a compiler's clusters did (counted by launch_op/).
struct LaunchStats {
  int64_t launches = 0;
  int64_t donated = 0;              // in-place updates on the input's own buffer
  int64_t copy_protected = 0;       // in-place updates that copied a shared buffer first
  int64_t framework_fallbacks = 0;  // launches run through the subgraph's framework ops
  int64_t inputs_donated = 0;       // dying inputs whose memory held the cluster's temps
  int64_t inputs_kept = 0;          // dying inputs shared elsewhere: their temps got a block of their own
};

struct JitStats {
  int64_t compiles = 0;
  int64_t hits = 0;
  int64_t evictions = 0;
  int64_t failures = 0;      // compile errors (cluster ran through framework ops)
  int64_t unit_fallbacks = 0;  // units that could not be compiled and ran framework kernels alone
  int64_t fallback_calls = 0;  // calls answered with nullptr
  int64_t denied_calls = 0;    // of those, calls for a denied cluster (deny_clusters or a failed shadow check)
  int64_t shadow_checks = 0;   // launches compared with the framework ops
  std::vector<ShadowFailure> shadow_failures;  // clusters denied by a failed check, in order
  double compile_ms = 0.0;
  std::map<std::string, double> compile_ms_per_key;
  std::map<std::string, int64_t> compiles_per_key;
  LaunchStats launch;
};

enum class LaunchEvent { kLaunch, kDonated, kCopyProtected, kFrameworkFallback, kInputDonated, kInputKept };

class JitCompiler {
 public:
  static JitCompiler& Instance();
  explicit JitCompiler(JitCompilerOptions options = {});

  // Replaces the options (the tool edge calls this once, from flags).
  void Configure(const JitCompilerOptions& options);
  JitCompilerOptions options() const;

  // Stores the subgraph; returns its key (its fingerprint). Idempotent.
  std::string AddSubgraph(const JitSubgraph& subgraph);
  // Throws NotFound for an unknown key.
  const JitSubgraph& GetSubgraph(const std::string& key) const;
  std::vector<std::string> Keys() const;

  // The compiled object for these input shapes, compiled on first use; nullptr
  // when the cluster runs through the framework ops instead.
  std::shared_ptr<const CompiledObject> Compile(const std::string& key, const ShapeSignature& signature);
  // Starts a compiled launch of `key`: counts it for the cluster and says
  // whether it is shadow-checked. Lock-free while shadow checks and the test
  // fault are off.
  LaunchChecks BeginLaunch(const std::string& key);
  // Denies `failure.key` after a failed shadow check: Compile returns nullptr
  // for it from now on. The first failure of a cluster is reported on stderr
  // and kept in stats(); returns false for a cluster already denied.
  bool DenyAfterShadowFailure(ShadowFailure failure);
  // The training step running now, for reports (0: unknown). Thread-safe.
  void SetStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  // The test fault (JitCompilerOptions::fault_for_testing), or an empty function.
  InstructionFault fault_for_testing() const;
  // A live compiled object by its id (executor launch mode), or nullptr.
  std::shared_ptr<const CompiledObject> FindById(uint64_t id) const;

  // Entries in the cache (finished or being compiled), and live objects
  // findable by id: both bounded (by cache_capacity, and by twice it plus
  // the objects still held elsewhere).
  size_t cache_size() const;
  size_t ids_tracked() const;
  // The compiled objects in the cache now (finished compiles), oldest use first.
  std::vector<std::shared_ptr<const CompiledObject>> CachedObjects() const;

  JitStats stats() const;
  // Per-instruction timing of this compiler's programs (--jit_profile):
  // profiler() is nullptr until profiling is on; launches pass it to the runner.
  void EnableProfiling(bool on) { profiling_ = on; }
  runtime::Profiler* profiler() { return profiling_ ? &profiler_ : nullptr; }
  const runtime::Profiler& profile() const { return profiler_; }
  // Counts one launch event (thread-safe, lock-free).
  void Count(LaunchEvent event) { launch_counts_[static_cast<size_t>(event)].fetch_add(1, std::memory_order_relaxed); }
  // Zeroes the statistics (ResetLaunchStats: only the launch counters);
  // compiled objects stay.
  void ResetStats();
  void ResetLaunchStats();
  // Drops compiled objects and statistics (subgraphs stay).
  void ClearCache();

 private:
  struct CacheKey {
    std::string key;
    ShapeSignature signature;
    CompileOptions options;
    bool operator==(const CacheKey& o) const {
      return key == o.key && signature == o.signature && options == o.options;
    }
    size_t Hash() const;
  };
  struct CacheKeyHash {
    size_t operator()(const CacheKey& k) const { return k.Hash(); }
  };
  using Future = std::shared_future<std::shared_ptr<const CompiledObject>>;

  // Under mu_: a cached future for `ck`, or the future of a compile of it
  // in flight (a hit), or nullopt after claiming it in `in_flight_` for this
  // caller to check and fill (a miss); `give_up` set for a miss of a
  // cluster that has reached its recompile limit.
  std::optional<Future> LookupLocked(const CacheKey& ck, const Future& mine, bool* give_up);
  // Under mu_, once the claimed signature passed CheckSignature: counts it
  // toward the recompile limit and caches its future (in flight no more).
  void CommitLocked(const CacheKey& ck, const JitSubgraph& subgraph, const Future& mine);
  // Lowers outside the lock; nullptr (and a stderr line) when it fails.
  std::shared_ptr<const CompiledObject> Build(const CacheKey& ck, const JitSubgraph& subgraph);
  // Throws InvalidArgument (shape inference's message, naming the op, and
  // the cluster) when an op of the cluster rejects the shapes of
  // `signature`; other errors of shape inference are left to the compile.
  void CheckSignature(const std::string& key, const JitSubgraph& subgraph, const ShapeSignature& signature) const;
  // Drops the claim of a signature CheckSignature rejected.
  void ForgetSignature(const CacheKey& ck);
  // Counts the compile and registers the object for FindById; returns the
  // on_compile hook to call (empty when none or the compile failed).
  std::function<void(const CompiledObject&, const JitSubgraph&)> Register(
      const CacheKey& ck, const std::shared_ptr<const CompiledObject>& obj);

  mutable std::mutex mu_;
  JitCompilerOptions options_;
  std::map<std::string, JitSubgraph> subgraphs_;
  LruCache<CacheKey, Future, CacheKeyHash> cache_;
  // Signatures claimed by a caller that checks their shapes before they are
  // counted or cached: a rejected one never evicts an object nor counts
  // toward the limit; a caller asking for it meanwhile waits on its future.
  std::unordered_map<CacheKey, Future, CacheKeyHash> in_flight_;
  // key -> hashes of the signatures it compiled: at most recompile_limit
  // each, a few bytes apiece (the hash is 64 bits: a collision would only
  // count two signatures as one).
  std::map<std::string, std::unordered_set<size_t>> signatures_seen_;
  std::map<std::string, ShapeSignature> last_signature_;  // key -> signature of its latest miss (for logs)
  std::set<std::string> given_up_;  // keys past the recompile limit (reported)
  std::set<std::string> shadow_denied_;  // keys whose shadow check failed
  std::map<std::string, int64_t> compiled_launches_;  // key -> launches counted by BeginLaunch
  std::unordered_map<uint64_t, std::weak_ptr<const CompiledObject>> by_id_;
  JitStats stats_;
  uint64_t next_id_ = 1;  // CompiledObject::id, unique in this compiler
  std::array<std::atomic<int64_t>, 6> launch_counts_{};
  std::atomic<bool> profiling_{false};
  std::atomic<bool> launch_checks_on_{false};  // shadow.every > 0 or a test fault
  std::atomic<int64_t> step_{0};
  runtime::Profiler profiler_;
};

}  // namespace kiln::jit
