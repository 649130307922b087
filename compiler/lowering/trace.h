// What the lowering did to one cluster, step by step, for the dump's
// lowering.txt: each step with why it stands where it does and what it
// matched, the units it all became, and the units that fell back.
#pragma once

#include <chrono>
#include <list>
#include <string>
#include <utility>
#include <vector>

namespace kiln::jit {

struct StepTrace {
  std::string name;  // the constant its header declares (kDeadOpsStep, ...), which its units carry too
  std::string why;  // the reason for its place in the pipeline
  std::vector<std::string> matched;
  void Match(std::string what) { matched.push_back(std::move(what)); }
};

// Where a compile's time goes, by phase (timing: not part of ToString(),
// which goldens compare): wall time and the compiling thread's CPU time (the
// figure that holds on a loaded machine). Begin(name) ends the phase that
// runs and starts `name`; a name seen again adds to its totals, which keep
// their first place.
struct PhaseTime {
  std::string name;
  double wall_ms = 0.0;
  double cpu_ms = 0.0;
};

// The calling thread's CPU time in milliseconds.
double ThreadCpuMs();

class PhaseClock {
 public:
  void Begin(std::string name);
  void End();
  void Add(const std::string& name, double wall_ms, double cpu_ms);
  const std::vector<PhaseTime>& phases() const { return phases_; }

 private:
  std::string current_;
  std::chrono::steady_clock::time_point start_;
  double start_cpu_ = 0.0;
  std::vector<PhaseTime> phases_;
};

class LoweringTrace {
 public:
  // Starts the record of the next step (references stay valid) and its
  // phase of clock().
  StepTrace& Step(std::string name, std::string why);
  PhaseClock& clock() { return clock_; }
  // Forgets the steps (the driver runs them again after a fallback).
  void ClearSteps() { steps_.clear(); }
  void AddFallback(std::string line) { fallbacks_.push_back(std::move(line)); }
  void SetUnits(std::vector<std::string> lines) { units_ = std::move(lines); }
  const std::vector<std::string>& fallbacks() const { return fallbacks_; }
  // The whole record as text.
  std::string ToString() const;

 private:
  PhaseClock clock_;
  std::list<StepTrace> steps_;
  std::vector<std::string> fallbacks_;
  std::vector<std::string> units_;
};

}  // namespace kiln::jit
