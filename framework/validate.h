// Build-time checks of a program: every op is registered, its slots and
// attributes match its entry, every argument is a declared var, and shape
// inference agrees with the declared dims (-1 matches anything).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"

namespace kiln {

// Name -> var of a block, for shape inference over every op of a block: one
// hash lookup per argument where FindVarDesc scans the vars (which made
// inferring a block of N ops O(N^2)). The first declaration of a name wins,
// as with FindVarDesc. Vars may be appended to the block while the index is
// in use (it catches up); they must not be removed or reordered.
class BlockVarIndex {
 public:
  explicit BlockVarIndex(proto::BlockDesc* block) : block_(block) {}
  proto::VarDesc* Find(std::string_view name);  // nullptr when not declared

 private:
  proto::BlockDesc* block_;
  int indexed_ = 0;
  std::unordered_map<std::string, int> pos_;
};

// Throws InvalidArgument / NotFound naming the op (index and type), the slot
// or var, and what was expected. A var's dims must be positive or -1, with
// at most 2^60 elements.
void ValidateProgram(const proto::ProgramDesc& program, const OpRegistry& registry = OpRegistry::Global());

// Runs compile-time InferShape of op `op_index` in `block`. Outputs that are
// not declared yet are declared with the inferred dims/dtype when
// `declare_outputs`; declared ones must be compatible. Used by builders.
void InferShapeAtBuild(proto::BlockDesc* block, int op_index, bool declare_outputs,
                       const OpRegistry& registry = OpRegistry::Global());
// The same, looking vars up through `index` (built on `block`), for a caller
// that infers many ops of one block.
void InferShapeAtBuild(proto::BlockDesc* block, int op_index, bool declare_outputs, const OpRegistry& registry,
                       BlockVarIndex* index);

}  // namespace kiln
