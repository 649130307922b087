#include "compiler/compile_cache.h"

#include <set>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "compiler/dynamic/lower_dynamic.h"
#include "compiler/lower.h"
#include "compiler/lowering/cluster.h"
#include "framework/hash.h"
#include "framework/trace.h"

namespace kiln::jit {
namespace {

// What differs between two signatures of one cluster, input by input.
std::string SignatureChange(const JitSubgraph& subgraph, const ShapeSignature& before, const ShapeSignature& after,
                            bool seen_before) {
  if (seen_before) return "signature " + after.ToString() + " was compiled before (evicted, or options changed)";
  if (before.inputs.size() != after.inputs.size()) return before.ToString() + " -> " + after.ToString();
  std::string out;
  for (size_t i = 0; i < after.inputs.size(); ++i) {
    const InputSpec& a = before.inputs[i];
    const InputSpec& b = after.inputs[i];
    if (a == b) continue;
    const std::string name = i < subgraph.inputs.size() ? subgraph.inputs[i] : "#" + std::to_string(i);
    if (!out.empty()) out += ", ";
    out += "input " + name;
    if (a.dtype != b.dtype) out += std::string(" dtype ") + DataTypeName(a.dtype) + " -> " + DataTypeName(b.dtype);
    if (a.dims != b.dims) out += " dims " + DimsToString(a.dims) + " -> " + DimsToString(b.dims);
  }
  return out.empty() ? "compile options changed" : out;
}

// The limit warning's summary of a new signature against the last one
// compiled: the distinct dim changes (old -> new) and how many inputs they
// touch, with the first such input in full, so that the line stays short
// however many inputs a cluster has ("dims 128 -> 144 in 12 of 31 inputs,
// first features [16,128,64] -> [16,144,64]").
std::string LimitChange(const JitSubgraph& subgraph, const ShapeSignature& before, const ShapeSignature& after) {
  if (before.inputs.size() != after.inputs.size()) return "another number of inputs";
  std::set<std::string> changes;
  int changed = 0;
  std::string first;
  for (size_t i = 0; i < after.inputs.size(); ++i) {
    const InputSpec& a = before.inputs[i];
    const InputSpec& b = after.inputs[i];
    if (a == b) continue;
    if (changed++ == 0) {
      first = (i < subgraph.inputs.size() ? subgraph.inputs[i] : "#" + std::to_string(i)) + " " +
              DataTypeName(a.dtype) + DimsToString(a.dims) + " -> " + DataTypeName(b.dtype) + DimsToString(b.dims);
    }
    if (a.dtype != b.dtype) changes.insert(std::string("dtype ") + DataTypeName(a.dtype) + " -> " + DataTypeName(b.dtype));
    if (a.dims.size() != b.dims.size()) {
      changes.insert("rank " + std::to_string(a.dims.size()) + " -> " + std::to_string(b.dims.size()));
      continue;
    }
    for (size_t d = 0; d < a.dims.size(); ++d) {
      if (a.dims[d] != b.dims[d]) changes.insert(std::to_string(a.dims[d]) + " -> " + std::to_string(b.dims[d]));
    }
  }
  if (changed == 0) return "compile options changed";
  std::string out = "dims ";
  size_t n = 0;
  for (const std::string& c : changes) {
    if (n == 3) {
      out += ", ... (" + std::to_string(changes.size() - n) + " more)";
      break;
    }
    out += (n++ ? ", " : "") + c;
  }
  return out + " in " + std::to_string(changed) + " of " + std::to_string(after.inputs.size()) +
         " inputs, first " + first;
}

}  // namespace

void LogLine(const LogSink& sink, const std::string& line) {
  if (sink) {
    sink(line);
    return;
  }
  std::fputs((line + "\n").c_str(), stderr);
}

CompileCache::CompileCache(CompileCacheOptions options)
    : options_(std::move(options)), cache_(options_.cache_capacity) {}

size_t CompileCache::CacheKey::Hash() const {
  size_t h = 0;
  HashCombineString(h, key);
  HashCombine(h, signature.Hash());
  HashCombine(h, options.Hash());
  return h;
}

void CompileCache::Configure(const CompileCacheOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
  stats_.evictions += static_cast<int64_t>(cache_.set_capacity(options.cache_capacity));
}

CompileCacheOptions CompileCache::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

std::string CompileCache::AddSubgraph(const JitSubgraph& subgraph) {
  const std::string key = JitSubgraphFingerprint(subgraph);
  std::lock_guard<std::mutex> lock(mu_);
  subgraphs_.emplace(key, subgraph);
  return key;
}

const JitSubgraph& CompileCache::GetSubgraph(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = subgraphs_.find(key);
  if (it == subgraphs_.end()) ThrowNotFound("jit: no cluster with compilation_key '", key, "'");
  return it->second;  // entries are never erased, so the reference stays valid
}

std::vector<std::string> CompileCache::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> keys;
  for (const auto& kv : subgraphs_) keys.push_back(kv.first);
  return keys;
}

std::optional<CompileCache::Future> CompileCache::LookupLocked(const CacheKey& ck, const Future& mine,
                                                              bool* give_up,
                                                              std::shared_ptr<const CompiledObject>* parent) {
  *give_up = false;
  if (const Future* f = cache_.Find(ck)) {
    ++stats_.hits;
    return *f;
  }
  if (auto it = in_flight_.find(ck); it != in_flight_.end()) {
    ++stats_.hits;
    return it->second;
  }
  if (auto d = DynamicParentLocked(ck)) {
    *parent = std::move(d);
    in_flight_.emplace(ck, mine);
    return std::nullopt;
  }
  auto& seen = signatures_seen_[ck.key];
  // Past the limit the cluster compiles no more, but the signatures it has in
  // the cache keep running compiled: under shape churn the common shapes stay
  // fast, and the cache and the seen set stay bounded. (Claims in flight are
  // not counted: callers racing with new signatures may pass the limit by
  // their number.)
  if (static_cast<int>(seen.size()) >= options_.recompile_limit) {
    *give_up = true;
    if (given_up_.insert(ck.key).second) {
      const std::string name = options_.cluster_name ? options_.cluster_name(ck.key) : ck.key;
      auto last = last_signature_.find(ck.key);
      auto sub = subgraphs_.find(ck.key);
      const std::string change = last == last_signature_.end() || sub == subgraphs_.end()
                                     ? ck.signature.ToString()
                                     : LimitChange(sub->second, last->second, ck.signature);
      LogLine(options_.log, "kiln jit: cluster " + name + (name == ck.key ? "" : " (" + ck.key + ")") +
                                " reached its limit of " +
                                std::to_string(options_.recompile_limit) +
                                " shape signatures (--jit_recompile_limit); new ones run through the framework ops: " +
                                change);
    }
    return std::nullopt;
  }
  in_flight_.emplace(ck, mine);
  return std::nullopt;
}

void CompileCache::CommitLocked(const CacheKey& ck, const JitSubgraph& subgraph, const Future& mine) {
  in_flight_.erase(ck);
  auto& seen = signatures_seen_[ck.key];
  auto last = last_signature_.find(ck.key);
  if (options_.verbose >= 1 && last != last_signature_.end()) {
    const std::string name = options_.cluster_name ? options_.cluster_name(ck.key) : ck.key;
    const bool seen_before = seen.count(ck.signature.Hash()) > 0;
    LogLine(options_.log, "kiln jit: cluster " + name + " recompiles: " +
                              SignatureChange(subgraph, last->second, ck.signature, seen_before));
  }
  last_signature_[ck.key] = ck.signature;
  seen.insert(ck.signature.Hash());
  stats_.evictions += static_cast<int64_t>(cache_.Insert(ck, mine));
}

void CompileCache::ForgetSignature(const CacheKey& ck) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(ck);
}

std::optional<proto::BlockDesc> CompileCache::CheckSignature(const std::string& key, const JitSubgraph& subgraph,
                                                             const ShapeSignature& signature) const {
  try {
    return InferConcreteShapes(subgraph, signature);
  } catch (const Error& e) {
    // An op's shape check (InvalidArgument) is the caller's; anything else
    // is the compiler's, and the compile fails and falls back as before.
    if (e.code() != ErrorCode::kInvalidArgument) return std::nullopt;
    ThrowInvalidArgument(e.what(), " [op numbers count the ops of JIT cluster ", ClusterName(key), "]");
  }
}

std::shared_ptr<const CompiledObject> CompileCache::Build(const CacheKey& ck, const JitSubgraph& subgraph,
                                                          const std::vector<Symbol>& symbols) {
  TraceSpan span("compile", "compile " + ck.key);
  span.Arg("signature", ck.signature.ToString());
  LogSink log;
  {
    std::lock_guard<std::mutex> lock(mu_);
    log = options_.log;
  }
  try {
    std::string why;
    std::shared_ptr<CompiledObject> obj = symbols.empty()
                                              ? Lower(ck.key, subgraph, ck.signature, ck.options)
                                              : LowerDynamic(ck.key, subgraph, ck.signature, symbols, ck.options,
                                                             OpRegistry::Global(), &why);
    std::lock_guard<std::mutex> lock(mu_);
    obj->id = next_id_++;
    if (!symbols.empty()) NoteDynamicLocked(ck, subgraph, symbols, obj, why);
    return obj;
  } catch (const Error& e) {
    LogLine(log, "kiln jit: cluster " + ck.key + " cannot be compiled for " + ck.signature.ToString() + ": " +
                     e.what() + "; it runs through the framework ops");
    return nullptr;
  }
}

void CompileCache::TrackLocked(const std::shared_ptr<const CompiledObject>& obj) {
  by_id_[obj->id] = obj;
  // Objects evicted and released leave expired entries: drop them now and
  // then, so the map stays bounded under shape churn.
  if (by_id_.size() > 2 * cache_.capacity() + 64) {
    for (auto it = by_id_.begin(); it != by_id_.end();) it = it->second.expired() ? by_id_.erase(it) : std::next(it);
  }
}

std::function<void(const CompiledObject&, const JitSubgraph&)> CompileCache::Register(
    const CacheKey& ck, const std::shared_ptr<const CompiledObject>& obj, LogSink* log) {
  std::lock_guard<std::mutex> lock(mu_);
  *log = options_.log;
  if (!obj) {
    ++stats_.failures;
    return nullptr;
  }
  ++stats_.compiles;
  ++stats_.compiles_per_key[ck.key];
  stats_.compile_ms += obj->compile_ms;
  stats_.compile_cpu_ms += obj->compile_cpu_ms;
  stats_.compile_ms_per_key[ck.key] += obj->compile_ms;
  stats_.unit_fallbacks += static_cast<int64_t>(obj->unit_fallbacks.size());
  TrackLocked(obj);
  return options_.on_compile;
}

std::shared_ptr<const CompiledObject> CompileCache::Compile(const std::string& key, const ShapeSignature& signature) {
  std::promise<std::shared_ptr<const CompiledObject>> promise;
  const Future mine = promise.get_future().share();
  const JitSubgraph* subgraph = nullptr;
  CacheKey ck;
  std::optional<Future> hit;
  std::shared_ptr<const CompiledObject> parent;  // a dynamic object that may serve the signature
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto sit = subgraphs_.find(key);
    if (sit == subgraphs_.end()) ThrowNotFound("jit: no cluster with compilation_key '", key, "'");
    subgraph = &sit->second;  // entries are never erased
    ck = CacheKey{key, signature, options_.compile};
    bool give_up = false;
    hit = LookupLocked(ck, mine, &give_up, &parent);
    if (give_up) {
      ++stats_.fallback_calls;
      return nullptr;
    }
  }
  if (hit) {
    // Waits outside the lock for a compile still in flight (single-flight).
    auto obj = hit->get();
    if (!obj) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.fallback_calls;
    }
    return obj;
  }
  // A signature the cluster's shape inference rejects (a feed of the wrong
  // batch) is the caller's error: raised here, naming the op, before it is
  // counted toward the recompile limit or cached. Threads waiting on it run
  // the framework ops, which raise the same error.
  std::optional<proto::BlockDesc> block;
  try {
    block = CheckSignature(key, *subgraph, signature);
  } catch (...) {
    ForgetSignature(ck);
    promise.set_value(nullptr);
    throw;
  }
  if (parent && block) {
    if (auto instance = TryInstance(ck, *parent, *block, mine)) {
      promise.set_value(instance);
      return instance;
    }
  }
  std::vector<Symbol> symbols;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A signature a dynamic object could not serve compiles specialised,
    // within the limit like any other.
    if (parent && static_cast<int>(signatures_seen_[key].size()) >= options_.recompile_limit) {
      in_flight_.erase(ck);
      ++stats_.fallback_calls;
      promise.set_value(nullptr);
      return nullptr;
    }
    if (!parent) symbols = SymbolsLocked(ck, *subgraph);
    CommitLocked(ck, *subgraph, mine);
  }
  std::shared_ptr<const CompiledObject> result = Build(ck, *subgraph, symbols);
  // Registered before the waiters wake: a waiter may look the object up by
  // id at once (the executor launch mode's jit_kernel ops do).
  LogSink log;
  const auto on_compile = Register(ck, result, &log);
  promise.set_value(result);
  if (on_compile) {
    try {
      on_compile(*result, *subgraph);
    } catch (const std::exception& e) {
      LogLine(log, "kiln jit: after compiling cluster " + ck.key + ": " + e.what());
    }
  }
  return result;
}

size_t CompileCache::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

size_t CompileCache::ids_tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.size();
}

std::shared_ptr<const CompiledObject> CompileCache::FindById(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<const CompiledObject>> CompileCache::CachedObjects() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const CompiledObject>> out;
  for (auto it = std::make_reverse_iterator(cache_.end()); it != std::make_reverse_iterator(cache_.begin()); ++it) {
    const Future& f = it->second;
    if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
    if (auto obj = f.get()) out.push_back(obj);
  }
  return out;
}

CacheStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CompileCache::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = CacheStats();
}

std::string CompileCache::ClusterName(const std::string& key) const {
  std::function<std::string(const std::string&)> name_of;
  {
    std::lock_guard<std::mutex> lock(mu_);
    name_of = options_.cluster_name;
  }
  return name_of ? name_of(key) : key;
}

void CompileCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.Clear();
  signatures_seen_.clear();
  last_signature_.clear();
  given_up_.clear();
  dynamic_.clear();
  dynamic_failed_.clear();
  by_id_.clear();
  stats_ = CacheStats();
}

}  // namespace kiln::jit
