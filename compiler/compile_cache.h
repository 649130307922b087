// CompileCache: the store of cluster subgraphs (by key) and the cache of their
// compiled objects per (key, shape signature, compile options). Whoever runs
// programs owns one (launch_op/jit_runtime.h); a test makes its own.
//
// Concurrent callers of one signature compile it once (single-flight);
// different signatures compile in parallel. The cache is bounded (LRU). A
// cluster that keeps recompiling for new shapes past the recompile limit
// compiles no more: a call with a signature still in the cache gets the
// compiled object, any other gets nullptr (the launch runs the framework ops),
// and so does every call for a cluster that fails to compile. Denying
// clusters is the launch's business (launch_op/launch_services.h).
#pragma once

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
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "framework/lru_cache.h"

namespace kiln::jit {

// Where the JIT's one-line reports go (recompiles, compile failures, the
// recompile limit, failed shadow checks); without one, stderr.
using LogSink = std::function<void(const std::string& line)>;
// Writes `line` and a newline to `sink`, or to stderr when it is empty.
void LogLine(const LogSink& sink, const std::string& line);

struct CompileCacheOptions {
  size_t cache_capacity = 256;  // compiled objects kept (LRU)
  int recompile_limit = 8;      // distinct signatures a cluster compiles; past them only cached ones run compiled
  // Whether a cluster whose input dims change compiles once for every value
  // of them (compiler/dynamic/lower_dynamic.h); instances of such an object
  // for new values are not compiles and do not count toward the limit.
  DynamicPolicy dynamic = DynamicPolicy::kAuto;
  CompileOptions compile;
  // >= 1: every cache miss of a key that already has a compiled signature
  // logs what changed, e.g.
  //   kiln jit: cluster c3 recompiles: input x dims [64,784] -> [32,784]
  int verbose = 0;
  // The cluster's name in logs (the tools map keys to c0, c1, ...); the key
  // itself when not set.
  std::function<std::string(const std::string& key)> cluster_name;
  // Called after each successful compile, on the compiling thread and outside
  // the cache lock (cache hits never call it), e.g. to dump the compiled
  // object. Errors it throws are logged and otherwise ignored.
  std::function<void(const CompiledObject&, const JitSubgraph&)> on_compile;
  LogSink log;
};

struct CacheStats {
  int64_t compiles = 0;
  int64_t hits = 0;
  int64_t evictions = 0;
  int64_t failures = 0;        // compile errors (cluster ran through framework ops)
  int64_t unit_fallbacks = 0;  // units that could not be compiled and ran framework kernels alone
  int64_t fallback_calls = 0;  // calls answered with nullptr
  int64_t dynamic_compiles = 0;   // of the compiles, those for every value of some dims
  int64_t dynamic_failures = 0;   // dynamic compiles that could not be made (the shape compiled specialised)
  int64_t instances = 0;          // objects made from a dynamic one for new values (no compile)
  int64_t guard_failures = 0;     // new values a dynamic object could not serve (the shape compiled specialised)
  double instance_ms = 0.0;
  double compile_ms = 0.0;
  double compile_cpu_ms = 0.0;  // the compiling threads' CPU time (CompiledObject::compile_cpu_ms)
  std::map<std::string, double> compile_ms_per_key;
  std::map<std::string, int64_t> compiles_per_key;
};

class CompileCache {
 public:
  explicit CompileCache(CompileCacheOptions options = {});

  // Replaces the options (a smaller capacity evicts at once).
  void Configure(const CompileCacheOptions& options);
  CompileCacheOptions options() const;

  // Stores the subgraph; returns its key (its fingerprint). Idempotent.
  std::string AddSubgraph(const JitSubgraph& subgraph);
  // Throws NotFound for an unknown key.
  const JitSubgraph& GetSubgraph(const std::string& key) const;
  std::vector<std::string> Keys() const;
  // "c3" for a key the cluster_name option knows, else the key.
  std::string ClusterName(const std::string& key) const;

  // The compiled object for these input shapes, compiled on first use; nullptr
  // when the cluster runs through the framework ops instead.
  std::shared_ptr<const CompiledObject> Compile(const std::string& key, const ShapeSignature& signature);
  // A live compiled object by its id (executor launch mode), or nullptr.
  std::shared_ptr<const CompiledObject> FindById(uint64_t id) const;

  // Entries in the cache (finished or being compiled), and live objects
  // findable by id: both bounded (by cache_capacity, and by twice it plus
  // the objects still held elsewhere).
  size_t cache_size() const;
  size_t ids_tracked() const;
  // The compiled objects in the cache now (finished compiles), oldest use first.
  std::vector<std::shared_ptr<const CompiledObject>> CachedObjects() const;

  CacheStats stats() const;
  void ResetStats();  // compiled objects stay
  // Drops compiled objects and statistics (subgraphs stay).
  void Clear();

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
  // A miss that a dynamic object of the key serves sets `parent` to it
  // (even past the limit: instances are not compiles).
  std::optional<Future> LookupLocked(const CacheKey& ck, const Future& mine, bool* give_up,
                                     std::shared_ptr<const CompiledObject>* parent);
  // Under mu_: the newest dynamic object of ck's key that serves its
  // signature (same options, the signature matches), or nullptr.
  std::shared_ptr<const CompiledObject> DynamicParentLocked(const CacheKey& ck) const;
  // Under mu_, after a compile asked for every value of `symbols`
  // (compiler/dynamic/lower_dynamic.h): keeps `obj` as the key's dynamic
  // object, or (when it came out specialised, for the reason `why`)
  // remembers not to try those symbols again; counts and logs either.
  void NoteDynamicLocked(const CacheKey& ck, const JitSubgraph& subgraph, const std::vector<Symbol>& symbols,
                         const std::shared_ptr<const CompiledObject>& obj, const std::string& why);
  // Under mu_, for a miss about to compile: the symbols the policy makes
  // symbolic for it (none: compile specialised).
  std::vector<Symbol> SymbolsLocked(const CacheKey& ck, const JitSubgraph& subgraph) const;
  // The instance of `parent` for ck's signature, cached and registered; nullptr
  // (logged with --jit_verbose) when a guard fails.
  std::shared_ptr<const CompiledObject> TryInstance(const CacheKey& ck, const CompiledObject& parent,
                                                    const proto::BlockDesc& block, const Future& mine);
  // Under mu_, once the claimed signature passed CheckSignature: counts it
  // toward the recompile limit and caches its future (in flight no more).
  void CommitLocked(const CacheKey& ck, const JitSubgraph& subgraph, const Future& mine);
  // Lowers outside the lock; nullptr (and a log line) when it fails.
  std::shared_ptr<const CompiledObject> Build(const CacheKey& ck, const JitSubgraph& subgraph,
                                             const std::vector<Symbol>& symbols);
  // Throws InvalidArgument (shape inference's message, naming the op, and
  // the cluster) when an op of the cluster rejects the shapes of
  // `signature`; other errors of shape inference are left to the compile.
  // Returns the block with concrete shapes (empty when inference failed
  // otherwise).
  std::optional<proto::BlockDesc> CheckSignature(const std::string& key, const JitSubgraph& subgraph,
                                                 const ShapeSignature& signature) const;
  // Drops the claim of a signature CheckSignature rejected.
  void ForgetSignature(const CacheKey& ck);
  // Under mu_: makes `obj` findable by id (FindById), keeping the map bounded.
  void TrackLocked(const std::shared_ptr<const CompiledObject>& obj);
  // Counts the compile and registers the object for FindById; returns the
  // on_compile hook to call (empty when none or the compile failed) and sets
  // `log` to the log sink.
  std::function<void(const CompiledObject&, const JitSubgraph&)> Register(
      const CacheKey& ck, const std::shared_ptr<const CompiledObject>& obj, LogSink* log);

  mutable std::mutex mu_;
  CompileCacheOptions options_;
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
  // key -> its objects compiled for every value of some dims, newest last
  // (a few per key: one per set of symbols).
  std::map<std::string, std::vector<std::shared_ptr<const CompiledObject>>> dynamic_;
  // key -> symbol positions -> dynamic compiles of them that could not be
  // made. They are tried once more at another value (a first try at a size
  // of 1, where steps such as batch_one fire, fails where a later one would
  // not), then never again.
  std::map<std::string, std::map<std::string, int>> dynamic_failed_;
  std::unordered_map<uint64_t, std::weak_ptr<const CompiledObject>> by_id_;
  CacheStats stats_;
  uint64_t next_id_ = 1;  // CompiledObject::id, unique in this cache
};

}  // namespace kiln::jit
