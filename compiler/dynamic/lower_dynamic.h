// Compiling a cluster once for every value of some input dims (issue 32).
//
// LowerDynamic lowers the cluster at the launch's shapes, as Lower does, and
// again at probe values of the symbols: with k symbols, at the 2^k points of
// a grid (each symbol at its value v and at 2v) and at a check point (3v).
// The lowerings must agree on everything but sizes (the same instructions,
// kernels, buffers, views, roles); then every buffer dim is fitted as a
// polynomial in the symbols (compiler/dynamic/sym_dim.h), and every kernel
// whose arguments change size must take the grid's other sizes (it reads
// dims at run time, or Resize gives it). The object is the lowering at the
// launch's shapes with that symbolic description; instances for other
// values come from Instantiate (compiler/dynamic/instantiate.h).
//
// Anything that does not hold (a step that fires at one size and not at
// another, a dim that is not a polynomial, a kernel fixed to its sizes)
// leaves the object specialised: LowerDynamic returns the lowering at the
// launch's shapes without `dynamic`, and the reason in `why`. An error of
// that lowering itself propagates, as Lower's does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"

namespace kiln::jit {

// Symbols for the dims that differ between `before` and `after` (same number
// of inputs, dtypes and ranks; else none): dims that changed from the same old
// value to the same new value are one symbol. Named N (a dim 0) or S, then
// N2, S2, ... Positions of `keep` (an earlier object's symbols) that still
// hold one value in `after` stay symbols too.
std::vector<Symbol> SymbolsForChange(const ShapeSignature& before, const ShapeSignature& after,
                                     const std::vector<Symbol>& keep = {});

// Symbols for the input dims the subgraph declares -1 (--jit_dynamic=on):
// those with one value in `signature` are one symbol.
std::vector<Symbol> SymbolsForDeclared(const JitSubgraph& subgraph, const ShapeSignature& signature);

std::unique_ptr<CompiledObject> LowerDynamic(const std::string& key, const JitSubgraph& subgraph,
                                             const ShapeSignature& signature, const std::vector<Symbol>& symbols,
                                             const CompileOptions& options, const OpRegistry& registry,
                                             std::string* why);

}  // namespace kiln::jit
