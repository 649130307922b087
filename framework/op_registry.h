// The op registry: one OpInfo per op type. Filled by explicit Register*Ops
// calls from one place (RegisterAllOps), never by static initialisers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/operator.h"

namespace kiln {

class OpRegistry {
 public:
  // The process-wide registry with every built-in op (reference and oneDNN kernels).
  static const OpRegistry& Global();
  // The same registry, for layers above framework/ (launch_op/) to add their
  // ops at start-up, before anything runs. Not for use while programs run.
  static OpRegistry& GlobalForRegistration();

  OpInfo& Add(OpInfo info);  // aborts on a duplicate type (programming error)
  const OpInfo* Find(std::string_view type) const;
  OpInfo* FindMutable(std::string_view type);
  // Throws NotFound: "unknown op type 'relo'; did you mean 'relu'?".
  const OpInfo& Get(std::string_view type) const;
  std::vector<std::string> Types() const;  // sorted

 private:
  std::map<std::string, std::unique_ptr<OpInfo>, std::less<>> ops_;
};

// True for an op that updates parameters in place (sgd, momentum, adam: the
// ops whose JIT lowering is kOptimizer); `Param` names what it updates.
bool IsParameterUpdate(const proto::OpDesc& op, const OpRegistry& registry = OpRegistry::Global());

// Registers every built-in op with its reference kernel, then attaches the
// oneDNN kernels.
void RegisterAllOps(OpRegistry& registry);

}  // namespace kiln
