#include "compiler/lowering/trace.h"

namespace kiln::jit {

StepTrace& LoweringTrace::Step(std::string name, std::string why) {
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
