#include "launch_op/jit_runtime.h"

#include "framework/error.h"

namespace kiln::jit {
namespace {

CompileCacheOptions CacheOptionsOf(const JitOptions& o) {
  CompileCacheOptions c;
  c.cache_capacity = o.cache_capacity;
  c.recompile_limit = o.recompile_limit;
  c.dynamic = o.dynamic;
  c.compile = o.compile;
  c.verbose = o.verbose;
  c.cluster_name = o.cluster_name;
  c.on_compile = o.on_compile;
  c.log = o.log;
  return c;
}

LaunchOptions LaunchOptionsOf(const JitOptions& o) {
  LaunchOptions l;
  l.deny_clusters = o.deny_clusters;
  l.shadow = o.shadow;
  l.fault_for_testing = o.fault_for_testing;
  l.profile = o.profile;
  l.cluster_name = o.cluster_name;
  l.log = o.log;
  return l;
}

}  // namespace

LaunchMode ParseLaunchMode(const std::string& name) {
  if (name == "runtime") return LaunchMode::kRuntime;
  if (name == "executor") return LaunchMode::kExecutor;
  ThrowInvalidArgument("unknown --jit_launch_mode '", name, "': expected runtime or executor");
}

JitRuntime::JitRuntime(JitOptions options)
    : options_(std::move(options)),
      cache_(CacheOptionsOf(options_)),
      launch_(LaunchOptionsOf(options_)),
      mode_(options_.launch_mode) {}

void JitRuntime::Configure(const JitOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
  cache_.Configure(CacheOptionsOf(options));
  launch_.Configure(LaunchOptionsOf(options));
  mode_ = options.launch_mode;
}

JitOptions JitRuntime::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

void JitRuntime::SetLaunchMode(LaunchMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.launch_mode = mode;
  mode_ = mode;
}

std::shared_ptr<const CompiledObject> JitRuntime::Compile(const std::string& key, const ShapeSignature& signature) {
  if (launch_.Denied(key)) {
    cache_.GetSubgraph(key);  // an unknown key is an error before it is a denied one
    ++fallback_calls_;
    return nullptr;
  }
  return cache_.Compile(key, signature);
}

JitStats JitRuntime::stats() const {
  const CacheStats c = cache_.stats();
  CheckStats checks = launch_.check_stats();
  JitStats s;
  s.compiles = c.compiles;
  s.hits = c.hits;
  s.evictions = c.evictions;
  s.failures = c.failures;
  s.unit_fallbacks = c.unit_fallbacks;
  s.fallback_calls = c.fallback_calls + fallback_calls_.load();
  s.denied_calls = checks.denied_calls;
  s.shadow_checks = checks.shadow_checks;
  s.shadow_failures = std::move(checks.shadow_failures);
  s.dynamic_compiles = c.dynamic_compiles;
  s.dynamic_failures = c.dynamic_failures;
  s.instances = c.instances;
  s.guard_failures = c.guard_failures;
  s.instance_ms = c.instance_ms;
  s.compile_ms = c.compile_ms;
  s.compile_cpu_ms = c.compile_cpu_ms;
  s.compile_ms_per_key = c.compile_ms_per_key;
  s.compiles_per_key = c.compiles_per_key;
  s.launch = launch_.launch_stats();
  return s;
}

void JitRuntime::ResetStats() {
  cache_.ResetStats();
  launch_.ResetStats();
  fallback_calls_ = 0;
}

void JitRuntime::ClearCache() {
  cache_.Clear();
  launch_.Clear();
  fallback_calls_ = 0;
}

}  // namespace kiln::jit
