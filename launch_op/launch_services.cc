#include "launch_op/launch_services.h"

#include <iomanip>
#include <sstream>
#include <utility>

namespace kiln::jit {
namespace {

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

LaunchServices::LaunchServices(LaunchOptions options) { Configure(options); }

void LaunchServices::Configure(const LaunchOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
  profiling_ = options.profile;
  UpdateFlagsLocked();
}

void LaunchServices::UpdateFlagsLocked() {
  checks_on_ = options_.shadow.every > 0 || options_.fault_for_testing != nullptr;
  any_denied_ = !options_.deny_clusters.empty() || !shadow_denied_.empty();
}

LaunchOptions LaunchServices::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

bool LaunchServices::Denied(const std::string& key) {
  if (!any_denied_.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.deny_clusters.count(key) && !shadow_denied_.count(key)) return false;
  ++stats_.denied_calls;
  return true;
}

LaunchChecks LaunchServices::BeginLaunch(const std::string& key) {
  if (!checks_on_.load(std::memory_order_relaxed)) return {};
  std::lock_guard<std::mutex> lock(mu_);
  LaunchChecks c;
  c.launch = ++compiled_launches_[key];
  c.fault = options_.fault_for_testing;
  c.tolerances = options_.shadow;
  c.shadow = options_.shadow.every > 0 && (c.launch - 1) % options_.shadow.every == 0;
  if (c.shadow) ++stats_.shadow_checks;
  return c;
}

bool LaunchServices::DenyAfterShadowFailure(ShadowFailure failure) {
  std::string name;
  LogSink log;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!shadow_denied_.insert(failure.key).second) return false;
    any_denied_ = true;
    name = options_.cluster_name ? options_.cluster_name(failure.key) : failure.key;
    log = options_.log;
    stats_.shadow_failures.push_back(failure);
  }
  const std::string where = failure.step > 0 ? "at step " + std::to_string(failure.step) + " (launch " +
                                                   std::to_string(failure.launch) + " of the cluster)"
                                             : "at launch " + std::to_string(failure.launch) + " of the cluster";
  const std::string cluster = name == failure.key ? name : name + " (key " + failure.key + ")";
  LogLine(log, "kiln jit: shadow check failed for cluster " + cluster + " " + where + ": " + failure.ToString() +
                   "; the cluster runs on framework kernels from now on");
  return true;
}

InstructionFault LaunchServices::fault_for_testing() const {
  if (!checks_on_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  return options_.fault_for_testing;
}

LaunchStats LaunchServices::launch_stats() const {
  auto count = [this](LaunchEvent e) { return counts_[static_cast<size_t>(e)].load(); };
  return {count(LaunchEvent::kLaunch),        count(LaunchEvent::kDonated),
          count(LaunchEvent::kCopyProtected), count(LaunchEvent::kFrameworkFallback),
          count(LaunchEvent::kInputDonated),  count(LaunchEvent::kInputKept)};
}

CheckStats LaunchServices::check_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void LaunchServices::ResetCounters() {
  for (auto& c : counts_) c = 0;
}

void LaunchServices::ResetStats() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = CheckStats();
  }
  ResetCounters();
}

void LaunchServices::Clear() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shadow_denied_.clear();
    compiled_launches_.clear();
    stats_ = CheckStats();
    UpdateFlagsLocked();
  }
  ResetCounters();
}

}  // namespace kiln::jit
