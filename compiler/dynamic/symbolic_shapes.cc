#include "compiler/dynamic/symbolic_shapes.h"

#include "compiler/lowering/cluster.h"
#include "framework/op_desc.h"

namespace kiln::jit {

ShapeSignature SignatureAt(const ShapeSignature& signature, const std::vector<Symbol>& symbols,
                           const std::vector<int64_t>& point) {
  ShapeSignature s = signature;
  for (size_t j = 0; j < symbols.size(); ++j) {
    for (const auto& [in, axis] : symbols[j].positions) s.inputs.at(in).dims.at(axis) = point[j];
  }
  return s;
}

std::vector<std::vector<int64_t>> ProbeValues(const ShapeSignature& signature, const std::vector<Symbol>& symbols) {
  std::vector<std::vector<int64_t>> values;
  for (const Symbol& s : symbols) {
    const auto [in, axis] = s.positions.front();
    const int64_t v = signature.inputs.at(in).dims.at(axis);
    if (v < 1) ThrowUnimplemented("symbol ", s.name, " is ", v, " here; a dynamic compile starts from a size >= 1");
    values.push_back({v, 2 * v, 3 * v});
  }
  return values;
}

SymDims FitDimsAt(const std::vector<Dims>& grid, const Dims& check, const std::vector<std::vector<int64_t>>& values,
                  const std::vector<Symbol>& symbols, std::string* why) {
  SymDims out;
  why->clear();
  for (size_t d = 0; d < check.size(); ++d) {
    std::vector<int64_t> at;
    for (const Dims& g : grid) at.push_back(g.at(d));
    const auto fit = FitSymDim(at, values, check[d]);
    if (fit) {
      out.push_back(*fit);
      continue;
    }
    *why = "dim " + std::to_string(d) + " is not a polynomial in the symbols: ";
    for (size_t m = 0; m < at.size(); ++m) {
      *why += std::to_string(at[m]) + " at " + SymbolValuesString(symbols, GridPoint(values, m)) + ", ";
    }
    *why += std::to_string(check[d]) + " at " + SymbolValuesString(symbols, CheckPoint(values));
    return {};
  }
  return out;
}

std::vector<SymbolicVar> InferSymbolicShapes(const JitSubgraph& subgraph, const ShapeSignature& signature,
                                             const std::vector<Symbol>& symbols, const OpRegistry& registry) {
  const std::vector<std::vector<int64_t>> values = ProbeValues(signature, symbols);
  std::vector<std::vector<int64_t>> points;
  for (uint32_t m = 0; m < (1u << symbols.size()); ++m) points.push_back(GridPoint(values, m));
  points.push_back(CheckPoint(values));
  std::vector<proto::BlockDesc> blocks;  // one per point, the check point last
  for (const auto& point : points) {
    try {
      blocks.push_back(InferConcreteShapes(subgraph, SignatureAt(signature, symbols, point), registry));
    } catch (const Error& e) {
      const std::string at = symbols.empty() ? "" : " at " + SymbolValuesString(symbols, point);
      ThrowUnimplemented("shape inference", at, " failed: ", e.what());
    }
  }
  const proto::BlockDesc& base = blocks.front();
  for (const proto::BlockDesc& b : blocks) {
    bool same = b.vars_size() == base.vars_size();
    for (int v = 0; same && v < base.vars_size(); ++v) same = b.vars(v).name() == base.vars(v).name();
    if (!same) ThrowUnimplemented("shape inference declares other vars at other values of the symbols");
  }
  std::vector<SymbolicVar> out;
  for (int v = 0; v < base.vars_size(); ++v) {
    SymbolicVar var;
    var.name = base.vars(v).name();
    var.dtype = FromProto(base.vars(v).dtype());
    var.at_base = VarDims(base.vars(v));
    std::vector<Dims> grid;
    for (size_t p = 0; p + 1 < blocks.size(); ++p) grid.push_back(VarDims(blocks[p].vars(v)));
    const Dims check = VarDims(blocks.back().vars(v));
    bool same_rank = check.size() == var.at_base.size();
    for (const Dims& g : grid) same_rank = same_rank && g.size() == check.size();
    if (same_rank) {
      var.dims = FitDimsAt(grid, check, values, symbols, &var.why);
    } else {
      var.why = "its rank differs between " + SymbolValuesString(symbols, points.front()) + " and other values";
    }
    out.push_back(std::move(var));
  }
  return out;
}

std::string SymbolicVarString(const SymbolicVar& var, const std::vector<Symbol>& symbols) {
  const std::string dtype = DataTypeName(var.dtype);
  if (var.why.empty()) return dtype + SymDimsToString(var.dims, symbols);
  return dtype + DimsToString(var.at_base) + " (not symbolic: " + var.why + ")";
}

}  // namespace kiln::jit
