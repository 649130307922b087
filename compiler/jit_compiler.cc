#include "compiler/jit_compiler.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>

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

std::string Number(double v) {
  std::ostringstream os;
  os << std::setprecision(3) << v;
  return os.str();
}

}  // namespace

std::string ShadowFailure::ToString() const {
  return op + " writes '" + var + "' " + shape + ": max abs error " + Number(max_abs_error) + ", max rel error " +
         Number(max_rel_error) + ", " + std::to_string(mismatches) + " of " + std::to_string(numel) +
         " elements beyond the tolerance (first at " + first_mismatch + ")" +
         (framework_spread >= 0 ? "; the framework's oneDNN and reference kernels differ by up to " +
                                      Number(framework_spread) + " there"
                                : "");
}

JitCompiler& JitCompiler::Instance() {
  static JitCompiler* instance = new JitCompiler();
  return *instance;
}

JitCompiler::JitCompiler(JitCompilerOptions options)
    : options_(std::move(options)), cache_(options_.cache_capacity) {
  launch_checks_on_ = options_.shadow.every > 0 || options_.fault_for_testing != nullptr;
}

size_t JitCompiler::CacheKey::Hash() const {
  size_t h = 0;
  HashCombineString(h, key);
  HashCombine(h, signature.Hash());
  HashCombine(h, options.Hash());
  return h;
}

void JitCompiler::Configure(const JitCompilerOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
  stats_.evictions += static_cast<int64_t>(cache_.set_capacity(options.cache_capacity));
  launch_checks_on_ = options.shadow.every > 0 || options.fault_for_testing != nullptr;
}

JitCompilerOptions JitCompiler::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

std::string JitCompiler::AddSubgraph(const JitSubgraph& subgraph) {
  const std::string key = JitSubgraphFingerprint(subgraph);
  std::lock_guard<std::mutex> lock(mu_);
  subgraphs_.emplace(key, subgraph);
  return key;
}

const JitSubgraph& JitCompiler::GetSubgraph(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = subgraphs_.find(key);
  if (it == subgraphs_.end()) ThrowNotFound("jit: no cluster with compilation_key '", key, "'");
  return it->second;  // entries are never erased, so the reference stays valid
}

std::vector<std::string> JitCompiler::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> keys;
  for (const auto& kv : subgraphs_) keys.push_back(kv.first);
  return keys;
}

std::optional<JitCompiler::Future> JitCompiler::LookupLocked(const CacheKey& ck, const Future& mine,
                                                              bool* give_up) {
  *give_up = false;
  if (const Future* f = cache_.Find(ck)) {
    ++stats_.hits;
    return *f;
  }
  if (auto it = in_flight_.find(ck); it != in_flight_.end()) {
    ++stats_.hits;
    return it->second;
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
      std::fprintf(stderr,
                   "kiln jit: cluster %s reached %zu shape signatures (limit %d, --jit_recompile_limit); newest %s; "
                   "it compiles no more: new signatures run through the framework ops, cached ones stay "
                   "compiled\n",
                   ck.key.c_str(), seen.size(), options_.recompile_limit, ck.signature.ToString().c_str());
    }
    return std::nullopt;
  }
  in_flight_.emplace(ck, mine);
  return std::nullopt;
}

void JitCompiler::CommitLocked(const CacheKey& ck, const JitSubgraph& subgraph, const Future& mine) {
  in_flight_.erase(ck);
  auto& seen = signatures_seen_[ck.key];
  auto last = last_signature_.find(ck.key);
  if (options_.verbose >= 1 && last != last_signature_.end()) {
    const std::string name = options_.cluster_name ? options_.cluster_name(ck.key) : ck.key;
    const bool seen_before = seen.count(ck.signature.Hash()) > 0;
    std::fprintf(stderr, "kiln jit: cluster %s recompiles: %s\n", name.c_str(),
                 SignatureChange(subgraph, last->second, ck.signature, seen_before).c_str());
  }
  last_signature_[ck.key] = ck.signature;
  seen.insert(ck.signature.Hash());
  stats_.evictions += static_cast<int64_t>(cache_.Insert(ck, mine));
}

void JitCompiler::ForgetSignature(const CacheKey& ck) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(ck);
}

void JitCompiler::CheckSignature(const std::string& key, const JitSubgraph& subgraph,
                                 const ShapeSignature& signature) const {
  try {
    InferConcreteShapes(subgraph, signature);
  } catch (const Error& e) {
    // An op's shape check (InvalidArgument) is the caller's; anything else
    // is the compiler's, and the compile fails and falls back as before.
    if (e.code() != ErrorCode::kInvalidArgument) return;
    std::function<std::string(const std::string&)> cluster_name;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cluster_name = options_.cluster_name;
    }
    const std::string name = cluster_name ? cluster_name(key) : key;
    ThrowInvalidArgument(e.what(), " [op numbers count the ops of JIT cluster ", name, "]");
  }
}

std::shared_ptr<const CompiledObject> JitCompiler::Build(const CacheKey& ck, const JitSubgraph& subgraph) {
  TraceSpan span("compile", "compile " + ck.key);
  span.Arg("signature", ck.signature.ToString());
  try {
    std::unique_ptr<CompiledObject> obj = Lower(ck.key, subgraph, ck.signature, ck.options);
    std::lock_guard<std::mutex> lock(mu_);
    obj->id = next_id_++;
    return obj;
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln jit: cluster %s cannot be compiled for %s: %s; it runs through the framework ops\n",
                 ck.key.c_str(), ck.signature.ToString().c_str(), e.what());
    return nullptr;
  }
}

std::function<void(const CompiledObject&, const JitSubgraph&)> JitCompiler::Register(
    const CacheKey& ck, const std::shared_ptr<const CompiledObject>& obj) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!obj) {
    ++stats_.failures;
    return nullptr;
  }
  ++stats_.compiles;
  ++stats_.compiles_per_key[ck.key];
  stats_.compile_ms += obj->compile_ms;
  stats_.compile_ms_per_key[ck.key] += obj->compile_ms;
  stats_.unit_fallbacks += static_cast<int64_t>(obj->unit_fallbacks.size());
  by_id_[obj->id] = obj;
  // Objects evicted and released leave expired entries: drop them now and
  // then, so the map stays bounded under shape churn.
  if (by_id_.size() > 2 * cache_.capacity() + 64) {
    for (auto it = by_id_.begin(); it != by_id_.end();) it = it->second.expired() ? by_id_.erase(it) : std::next(it);
  }
  return options_.on_compile;
}

std::shared_ptr<const CompiledObject> JitCompiler::Compile(const std::string& key, const ShapeSignature& signature) {
  std::promise<std::shared_ptr<const CompiledObject>> promise;
  const Future mine = promise.get_future().share();
  const JitSubgraph* subgraph = nullptr;
  CacheKey ck;
  std::optional<Future> hit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto sit = subgraphs_.find(key);
    if (sit == subgraphs_.end()) ThrowNotFound("jit: no cluster with compilation_key '", key, "'");
    subgraph = &sit->second;  // entries are never erased
    if (options_.deny_clusters.count(key) || shadow_denied_.count(key)) {
      ++stats_.fallback_calls;
      ++stats_.denied_calls;
      return nullptr;
    }
    ck = CacheKey{key, signature, options_.compile};
    bool give_up = false;
    hit = LookupLocked(ck, mine, &give_up);
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
  try {
    CheckSignature(key, *subgraph, signature);
  } catch (...) {
    ForgetSignature(ck);
    promise.set_value(nullptr);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    CommitLocked(ck, *subgraph, mine);
  }
  std::shared_ptr<const CompiledObject> result = Build(ck, *subgraph);
  // Registered before the waiters wake: a waiter may look the object up by
  // id at once (the executor launch mode's jit_kernel ops do).
  const auto on_compile = Register(ck, result);
  promise.set_value(result);
  if (on_compile) {
    try {
      on_compile(*result, *subgraph);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln jit: after compiling cluster %s: %s\n", ck.key.c_str(), e.what());
    }
  }
  return result;
}

LaunchChecks JitCompiler::BeginLaunch(const std::string& key) {
  if (!launch_checks_on_.load(std::memory_order_relaxed)) return {};
  std::lock_guard<std::mutex> lock(mu_);
  LaunchChecks c;
  c.launch = ++compiled_launches_[key];
  c.fault = options_.fault_for_testing;
  c.tolerances = options_.shadow;
  c.shadow = options_.shadow.every > 0 && (c.launch - 1) % options_.shadow.every == 0;
  if (c.shadow) ++stats_.shadow_checks;
  return c;
}

bool JitCompiler::DenyAfterShadowFailure(ShadowFailure failure) {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!shadow_denied_.insert(failure.key).second) return false;
    name = options_.cluster_name ? options_.cluster_name(failure.key) : failure.key;
    stats_.shadow_failures.push_back(failure);
  }
  const std::string where = failure.step > 0 ? "at step " + std::to_string(failure.step) + " (launch " +
                                                   std::to_string(failure.launch) + " of the cluster)"
                                             : "at launch " + std::to_string(failure.launch) + " of the cluster";
  const std::string cluster = name == failure.key ? name : name + " (key " + failure.key + ")";
  std::fprintf(stderr,
               "kiln jit: shadow check failed for cluster %s %s: %s; the cluster runs on framework kernels from "
               "now on\n",
               cluster.c_str(), where.c_str(), failure.ToString().c_str());
  return true;
}

InstructionFault JitCompiler::fault_for_testing() const {
  if (!launch_checks_on_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  return options_.fault_for_testing;
}

size_t JitCompiler::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

size_t JitCompiler::ids_tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.size();
}

std::shared_ptr<const CompiledObject> JitCompiler::FindById(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<const CompiledObject>> JitCompiler::CachedObjects() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const CompiledObject>> out;
  for (auto it = std::make_reverse_iterator(cache_.end()); it != std::make_reverse_iterator(cache_.begin()); ++it) {
    const Future& f = it->second;
    if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
    if (auto obj = f.get()) out.push_back(obj);
  }
  return out;
}

JitStats JitCompiler::stats() const {
  JitStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  auto count = [this](LaunchEvent e) { return launch_counts_[static_cast<size_t>(e)].load(); };
  s.launch = {count(LaunchEvent::kLaunch),           count(LaunchEvent::kDonated),
              count(LaunchEvent::kCopyProtected),    count(LaunchEvent::kFrameworkFallback),
              count(LaunchEvent::kInputDonated),     count(LaunchEvent::kInputKept)};
  return s;
}

void JitCompiler::ResetStats() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = JitStats();
  }
  ResetLaunchStats();
}

void JitCompiler::ResetLaunchStats() {
  for (auto& c : launch_counts_) c = 0;
}

void JitCompiler::ClearCache() {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.Clear();
  signatures_seen_.clear();
  last_signature_.clear();
  given_up_.clear();
  shadow_denied_.clear();
  compiled_launches_.clear();
  by_id_.clear();
  stats_ = JitStats();
  for (auto& c : launch_counts_) c = 0;
}

}  // namespace kiln::jit
