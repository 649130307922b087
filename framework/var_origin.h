// Which program last wrote each persistable var of a scope (Variable::origin)
// and the rule that follows from it: a startup program never overwrites a
// value another program wrote (trained, or initialised: two models sharing a
// name) or one that came from outside (fed, loaded, set). It keeps the value,
// and its caller warns. The same startup program run again over values only
// it wrote (nothing trained them since) initialises them again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "framework/scope.h"

namespace kiln {

// An op of a startup program that initialises a persistable var: the first
// op of the block to touch the var writes it without reading it.
struct Initialiser {
  int op = 0;
  std::string var;
};
std::vector<Initialiser> InitialiserOps(const proto::BlockDesc& block);

// The persistable vars the ops of `block` write, each once.
std::vector<std::string> PersistableWrites(const proto::BlockDesc& block);

struct KeptVars {
  std::vector<int> skipped_ops;   // ascending: ops all of whose vars are kept
  std::vector<std::string> kept;  // in `initialisers` order
};

// For startup program `program_id` about to run over `scope`: the
// initialisers of vars the scope holds with another origin. Throws
// InvalidArgument naming the var when such a value's dims or dtype differ
// from the block's declaration (two programs sharing a name with other
// shapes: keeping it would train the wrong shape silently).
KeptVars KeptByScope(const proto::BlockDesc& block, const std::vector<Initialiser>& initialisers, int64_t program_id,
                     const Scope& scope);

// After program `program_id` ran: it is the origin of each of `vars` that
// holds a value, except those in `kept`.
void MarkWritten(Scope& scope, const std::vector<std::string>& vars, const std::vector<std::string>& kept,
                 int64_t program_id);

}  // namespace kiln
