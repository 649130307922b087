#include "compiler/lowering/trace.h"

#include <ctime>

namespace kiln::jit {

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

void PhaseClock::Begin(std::string name) {
  End();
  current_ = std::move(name);
  start_ = std::chrono::steady_clock::now();
  start_cpu_ = ThreadCpuMs();
}

void PhaseClock::End() {
  if (current_.empty()) return;
  Add(current_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(),
      ThreadCpuMs() - start_cpu_);
  current_.clear();
}

void PhaseClock::Add(const std::string& name, double wall_ms, double cpu_ms) {
  for (PhaseTime& p : phases_) {
    if (p.name == name) {
      p.wall_ms += wall_ms;
      p.cpu_ms += cpu_ms;
      return;
    }
  }
  phases_.push_back(PhaseTime{name, wall_ms, cpu_ms});
}

StepTrace& LoweringTrace::Step(std::string name, std::string why) {
  clock_.Begin(name);
  steps_.push_back(StepTrace{std::move(name), std::move(why), {}});
  return steps_.back();
}

std::string LoweringTrace::ToString() const {
  std::string out;
  int n = 0;
  for (const StepTrace& s : steps_) {
    out += std::to_string(++n) + ". " + s.name + ": " + s.why + "\n";
    if (s.matched.empty()) out += "   (did not fire)\n";
    for (const auto& m : s.matched) out += "   matched " + m + "\n";
  }
  out += "units:\n";
  for (const auto& u : units_) out += "  " + u + "\n";
  out += "fell back:\n";
  if (fallbacks_.empty()) out += "  (nothing: every unit compiled)\n";
  for (const auto& f : fallbacks_) out += "  " + f + "\n";
  return out;
}

}  // namespace kiln::jit
