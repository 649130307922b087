#include "framework/scope.h"

namespace kiln {

Variable* Scope::Var(const std::string& name) {
  if (Variable* v = FindVar(name)) return v;
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = vars_[name];
  if (!slot) slot = std::make_unique<Variable>(name);
  return slot.get();
}

Variable* Scope::FindLocalVar(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : it->second.get();
}

Variable* Scope::FindVar(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_) {
    if (Variable* v = s->FindLocalVar(name)) return v;
  }
  return nullptr;
}

Variable* Scope::GetVar(const std::string& name) const {
  Variable* v = FindVar(name);
  if (v == nullptr) ThrowNotFound("variable '", name, "' is not in the scope");
  return v;
}

void Scope::EraseVar(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (vars_.erase(name) > 0) generation_.store(NextGeneration(), std::memory_order_release);
}

uint64_t Scope::NextGeneration() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::string> Scope::LocalVarNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& kv : vars_) names.push_back(kv.first);
  return names;
}

}  // namespace kiln
