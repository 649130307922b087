#include "compiler/jit_compiler.h"

#include <atomic>
#include <chrono>
#include <cstdio>

#include "compiler/lower.h"

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

}  // namespace

JitCompiler& JitCompiler::Instance() {
  static JitCompiler* instance = new JitCompiler();
  return *instance;
}

JitCompiler::JitCompiler(JitCompilerOptions options) : options_(std::move(options)) {}

void JitCompiler::Configure(const JitCompilerOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
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

std::shared_ptr<const CompiledObject> JitCompiler::Compile(const std::string& key, const ShapeSignature& signature) {
  std::promise<std::shared_ptr<const CompiledObject>> promise;
  const JitSubgraph* subgraph = nullptr;
  CacheKey ck;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto sit = subgraphs_.find(key);
    if (sit == subgraphs_.end()) ThrowNotFound("jit: no cluster with compilation_key '", key, "'");
    if (given_up_.count(key)) {
      ++stats_.fallback_calls;
      return nullptr;
    }
    ck = CacheKey{key, signature, options_.compile};
    auto it = cache_.find(ck);
    if (it != cache_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      Future f = it->second.future;
      // Waits outside the lock for a compile still in flight (single-flight).
      lock.unlock();
      auto obj = f.get();
      lock.lock();
      if (!obj) ++stats_.fallback_calls;
      return obj;
    }
    auto& seen = signatures_seen_[key];
    if (static_cast<int>(seen.size()) >= options_.recompile_limit) {
      given_up_.insert(key);
      ++stats_.fallback_calls;
      std::fprintf(stderr,
                   "kiln jit: cluster %s recompiled for %zu shape signatures (limit %d, --jit_recompile_limit); "
                   "newest %s; it runs through the framework ops from now on\n",
                   key.c_str(), seen.size(), options_.recompile_limit, signature.ToString().c_str());
      return nullptr;
    }
    if (options_.verbose >= 1) {
      auto last = last_signature_.find(key);
      if (last != last_signature_.end()) {
        const std::string name = options_.cluster_name ? options_.cluster_name(key) : key;
        const bool seen_before = seen.count(signature.ToString()) > 0;
        std::fprintf(stderr, "kiln jit: cluster %s recompiles: %s\n", name.c_str(),
                     SignatureChange(sit->second, last->second, signature, seen_before).c_str());
      }
    }
    last_signature_[key] = signature;
    seen.insert(signature.ToString());
    lru_.push_front(ck);
    cache_[ck] = Entry{promise.get_future().share(), lru_.begin()};
    subgraph = &sit->second;
  }

  std::shared_ptr<const CompiledObject> result;
  double ms = 0;
  try {
    std::unique_ptr<CompiledObject> obj = Lower(key, *subgraph, signature, ck.options);
    {
      std::lock_guard<std::mutex> lock(mu_);
      obj->id = next_id_++;
    }
    ms = obj->compile_ms;
    result = std::move(obj);
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln jit: cluster %s cannot be compiled for %s: %s; it runs through the framework ops\n",
                 key.c_str(), signature.ToString().c_str(), e.what());
  }
  promise.set_value(result);

  std::function<void(const CompiledObject&, const JitSubgraph&)> on_compile;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result) {
      ++stats_.compiles;
      ++stats_.compiles_per_key[key];
      stats_.unit_fallbacks += static_cast<int64_t>(result->unit_fallbacks.size());
      stats_.compile_ms += ms;
      stats_.compile_ms_per_key[key] += ms;
      by_id_[result->id] = result;
      on_compile = options_.on_compile;
    } else {
      ++stats_.failures;
    }
    while (cache_.size() > options_.cache_capacity && !lru_.empty()) {
      cache_.erase(lru_.back());
      lru_.pop_back();
      ++stats_.evictions;
    }
  }
  if (on_compile) {
    try {
      on_compile(*result, *subgraph);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln jit: after compiling cluster %s: %s\n", key.c_str(), e.what());
    }
  }
  return result;
}

std::shared_ptr<const CompiledObject> JitCompiler::FindById(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<const CompiledObject>> JitCompiler::CachedObjects() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const CompiledObject>> out;
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    const Future& f = cache_.at(*it).future;
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
  cache_.clear();
  lru_.clear();
  signatures_seen_.clear();
  last_signature_.clear();
  given_up_.clear();
  by_id_.clear();
  stats_ = JitStats();
  for (auto& c : launch_counts_) c = 0;
}

}  // namespace kiln::jit
