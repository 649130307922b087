// The symbolic shape of every var of a cluster (issue 32): f32[N,S,128].
//
// Shape inference runs at the probe points of the symbols (each symbol at
// its value v, at 2v, and at 3v for the check; sym_dim.h), and every dim of
// every var is fitted as a polynomial in the symbols. So the symbols go
// through every op's InferShape as they are written, with no second shape
// function per op: products (reshape's -1), sums (concat), divisions by
// constants (a stride-2 pool over an even size), equalities between
// symbols (elementwise ops). A dim that is no such polynomial at these
// values (a stride-2 pool over an odd size) is reported, with the values it
// took, and the lowering keeps such a cluster specialised.
#pragma once

#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "compiler/dynamic/sym_dim.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"

namespace kiln::jit {

// `signature` with each symbol's positions set to its value in `point`.
ShapeSignature SignatureAt(const ShapeSignature& signature, const std::vector<Symbol>& symbols,
                           const std::vector<int64_t>& point);

// The three probe values of each symbol, {v, 2v, 3v} with v its value in
// `signature` (at its first position). Throws Unimplemented for a v < 1.
std::vector<std::vector<int64_t>> ProbeValues(const ShapeSignature& signature, const std::vector<Symbol>& symbols);

// Fits one dims list: `grid[m]` at GridPoint(values, m), `check` at the
// check point (the same rank). Empty `why` on success; otherwise `why` names
// the first dim that fails and the values it took.
SymDims FitDimsAt(const std::vector<Dims>& grid, const Dims& check, const std::vector<std::vector<int64_t>>& values,
                  const std::vector<Symbol>& symbols, std::string* why);

struct SymbolicVar {
  std::string name;
  DataType dtype = DataType::kFP32;
  SymDims dims;     // when `why` is empty
  Dims at_base;     // the dims at the signature's values
  std::string why;  // why the dims are no polynomial in the symbols
};

// Every var of the cluster in the order shape inference declares them (the
// inputs, then each op's outputs). Throws Unimplemented naming the probe
// point where shape inference fails, with its message.
std::vector<SymbolicVar> InferSymbolicShapes(const JitSubgraph& subgraph, const ShapeSignature& signature,
                                             const std::vector<Symbol>& symbols,
                                             const OpRegistry& registry = OpRegistry::Global());

// "f32[N,S,128]"; for a var that did not fit, its dims at the signature and
// the reason: "f32[2,5] (not symbolic: dim 1 ...)".
std::string SymbolicVarString(const SymbolicVar& var, const std::vector<Symbol>& symbols);

}  // namespace kiln::jit
