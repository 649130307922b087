// JitCompiler: the store of cluster subgraphs (by key) and the cache of their
// compiled objects per (key, shape signature, options). One process-wide
// instance (Instance()); tests construct their own.
//
// Concurrent callers of one signature compile it once (single-flight);
// different signatures compile in parallel. The cache is bounded (LRU). A
// cluster that keeps recompiling for new shapes past the recompile limit is
// reported once and runs through the framework ops from then on, as does a
// cluster that fails to compile (Compile returns nullptr).
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

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "framework/lru_cache.h"
#include "runtime/profiler.h"

namespace kiln::jit {

struct JitCompilerOptions {
  size_t cache_capacity = 256;  // compiled objects kept (LRU)
  int recompile_limit = 8;      // distinct signatures per cluster before giving up
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
  int64_t denied_calls = 0;    // of those, calls for a denied cluster (deny_clusters)
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
  // A live compiled object by its id (executor launch mode), or nullptr.
  std::shared_ptr<const CompiledObject> FindById(uint64_t id) const;

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

  // Under mu_: a cached future for `ck` (a hit), or nullopt after reserving
  // the entry this caller must fill (a miss); `give_up` set when the cluster
  // is past its recompile limit.
  std::optional<Future> LookupLocked(const CacheKey& ck, const JitSubgraph& subgraph, const Future& mine,
                                     bool* give_up);
  // Lowers outside the lock; nullptr (and a stderr line) when it fails.
  std::shared_ptr<const CompiledObject> Build(const CacheKey& ck, const JitSubgraph& subgraph);
  // Counts the compile and registers the object for FindById; returns the
  // on_compile hook to call (empty when none or the compile failed).
  std::function<void(const CompiledObject&, const JitSubgraph&)> Register(
      const CacheKey& ck, const std::shared_ptr<const CompiledObject>& obj);

  mutable std::mutex mu_;
  JitCompilerOptions options_;
  std::map<std::string, JitSubgraph> subgraphs_;
  LruCache<CacheKey, Future, CacheKeyHash> cache_;
  std::map<std::string, std::set<std::string>> signatures_seen_;  // key -> signatures compiled
  std::map<std::string, ShapeSignature> last_signature_;  // key -> signature of its latest miss (for logs)
  std::set<std::string> given_up_;  // keys past the recompile limit
  std::unordered_map<uint64_t, std::weak_ptr<const CompiledObject>> by_id_;
  JitStats stats_;
  uint64_t next_id_ = 1;  // CompiledObject::id, unique in this compiler
  std::array<std::atomic<int64_t>, 6> launch_counts_{};
  std::atomic<bool> profiling_{false};
  runtime::Profiler profiler_;
};

}  // namespace kiln::jit
