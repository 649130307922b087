// Scope and Variable: named storage for tensors while programs run. A child
// scope sees its parent's variables; lookups walk up the chain.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kiln {

class Variable {
 public:
  explicit Variable(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  Tensor* GetMutable() { return &tensor_; }
  const Tensor& Get() const { return tensor_; }
  // The program that last wrote the value (an id its runner gives each
  // program; framework/var_origin.h); 0 when it came from outside (fed,
  // loaded, set).
  int64_t origin() const { return origin_; }
  void set_origin(int64_t program_id) { origin_ = program_id; }

 private:
  std::string name_;
  Tensor tensor_;
  int64_t origin_ = 0;
};

class Scope {
 public:
  Scope() : generation_(NextGeneration()) {}
  explicit Scope(const Scope* parent) : parent_(parent), generation_(NextGeneration()) {}
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // Returns the variable named `name` in this scope or an ancestor, creating it
  // here when none exists.
  Variable* Var(const std::string& name);
  // Finds in this scope or an ancestor; nullptr when absent.
  Variable* FindVar(const std::string& name) const;
  // Finds in this scope only.
  Variable* FindLocalVar(const std::string& name) const;
  // Like FindVar but throws NotFound naming the variable.
  Variable* GetVar(const std::string& name) const;
  // Tensor of an existing variable (throws NotFound when absent).
  Tensor* GetTensor(const std::string& name) const { return GetVar(name)->GetMutable(); }

  void EraseVar(const std::string& name);
  std::vector<std::string> LocalVarNames() const;
  const Scope* parent() const { return parent_; }
  // A number no other scope, and no earlier state of this one, has had: new
  // at construction and after each EraseVar. Pointers to this scope's
  // variables taken at one generation stay valid while it lasts (an
  // execution plan binds to a scope by it, not by address, which a new scope
  // may reuse).
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  static uint64_t NextGeneration();

  const Scope* parent_ = nullptr;
  std::atomic<uint64_t> generation_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Variable>> vars_;
};

}  // namespace kiln
