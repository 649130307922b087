// What the lowering did to one cluster, step by step, for the dump's
// lowering.txt: each step with why it stands where it does and what it
// matched, the units it all became, and the units that fell back.
#pragma once

#include <list>
#include <string>
#include <vector>

namespace kiln::jit {

struct StepTrace {
  std::string name;  // the constant its header declares (kDeadOpsStep, ...), which its units carry too
  std::string why;  // the reason for its place in the pipeline
  std::vector<std::string> matched;
  void Match(std::string what) { matched.push_back(std::move(what)); }
};

class LoweringTrace {
 public:
  // Starts the record of the next step (references stay valid).
  StepTrace& Step(std::string name, std::string why);
  // Forgets the steps (the driver runs them again after a fallback).
  void ClearSteps() { steps_.clear(); }
  void AddFallback(std::string line) { fallbacks_.push_back(std::move(line)); }
  void SetUnits(std::vector<std::string> lines) { units_ = std::move(lines); }
  const std::vector<std::string>& fallbacks() const { return fallbacks_; }
  // The whole record as text.
  std::string ToString() const;

 private:
  std::list<StepTrace> steps_;
  std::vector<std::string> fallbacks_;
  std::vector<std::string> units_;
};

}  // namespace kiln::jit
