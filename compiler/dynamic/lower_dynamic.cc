#include "compiler/dynamic/lower_dynamic.h"

#include <functional>
#include <map>
#include <typeinfo>

#include "compiler/dynamic/instantiate.h"
#include "compiler/dynamic/symbolic_shapes.h"
#include "compiler/lower.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

// Names symbols by their first position: N for a dim 0, S otherwise; the
// second of a name gets a 2, and so on.
void NameSymbols(std::vector<Symbol>* symbols) {
  std::map<std::string, int> used;
  for (Symbol& s : *symbols) {
    const std::string base = s.positions.front().second == 0 ? "N" : "S";
    const int n = ++used[base];
    s.name = n == 1 ? base : base + std::to_string(n);
  }
}

bool SameLayout(const ShapeSignature& a, const ShapeSignature& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (a.inputs[i].dtype != b.inputs[i].dtype || a.inputs[i].dims.size() != b.inputs[i].dims.size()) return false;
  }
  return true;
}

// Throws Unimplemented naming the first difference other than sizes.
void CheckSameStructure(const CompiledObject& a, const CompiledObject& b, const std::string& where) {
  auto differ = [&](const std::string& what) {
    ThrowUnimplemented("the lowering differs at ", where, ": ", what);
  };
  const auto& ia = a.program.instructions;
  const auto& ib = b.program.instructions;
  if (ia.size() != ib.size()) differ(std::to_string(ia.size()) + " instructions, then " + std::to_string(ib.size()));
  for (size_t i = 0; i < ia.size(); ++i) {
    const runtime::Kernel& ka = *ia[i].kernel;
    const runtime::Kernel& kb = *ib[i].kernel;
    if (ka.name() != kb.name() || typeid(ka) != typeid(kb) || ia[i].args != ib[i].args ||
        ia[i].num_inputs != ib[i].num_inputs || ia[i].inplace != ib[i].inplace) {
      differ("instruction " + std::to_string(i) + " is " + ka.name() + ", then " + kb.name());
    }
  }
  const auto& ba = a.program.plan.buffers;
  const auto& bb = b.program.plan.buffers;
  if (ba.size() != bb.size()) differ(std::to_string(ba.size()) + " buffers, then " + std::to_string(bb.size()));
  for (size_t i = 0; i < ba.size(); ++i) {
    const auto& x = ba[i];
    const auto& y = bb[i];
    if (x.name != y.name || x.dtype != y.dtype || x.role != y.role || x.io_index != y.io_index ||
        x.donatable != y.donatable || x.view_of != y.view_of || x.dims_only != y.dims_only ||
        x.dims.size() != y.dims.size()) {
      differ("buffer %" + std::to_string(i) + " is " + x.name + ", then " + y.name);
    }
  }
  if (a.output_alias != b.output_alias || a.output_shape_only != b.output_shape_only ||
      a.output_dtypes != b.output_dtypes || a.unit_fallbacks.size() != b.unit_fallbacks.size()) {
    differ("the outputs or the units that fell back");
  }
}

// Fits dims read by `get` from the grid objects and the check object.
SymDims FitDims(const std::vector<const CompiledObject*>& grid, const CompiledObject& check,
                const std::vector<std::vector<int64_t>>& values,
                const std::function<const Dims&(const CompiledObject&)>& get, const std::string& what,
                const std::vector<Symbol>& symbols) {
  std::vector<Dims> at;
  for (const CompiledObject* o : grid) at.push_back(get(*o));
  std::string why;
  SymDims out = FitDimsAt(at, get(check), values, symbols, &why);
  if (!why.empty()) ThrowUnimplemented(what, " ", why);
  return out;
}

// "# symbolic shapes of the cluster's vars:" and a line a var ("#   x
// f32[N,64]"), for lowering.txt.
std::string VarShapesText(const JitSubgraph& subgraph, const ShapeSignature& signature,
                          const std::vector<Symbol>& symbols, const OpRegistry& registry) {
  std::string text = "# symbolic shapes of the cluster's vars:\n";
  for (const SymbolicVar& v : InferSymbolicShapes(subgraph, signature, symbols, registry)) {
    text += "#   " + v.name + " " + SymbolicVarString(v, symbols) + "\n";
  }
  return text;
}

// Every kernel whose argument dims differ at `probe` must take them.
void CheckKernelsResize(const CompiledObject& base, const CompiledObject& probe, const std::string& where) {
  std::vector<Dims> dims;
  for (const auto& info : probe.program.plan.buffers) dims.push_back(info.dims);
  for (size_t i = 0; i < base.program.instructions.size(); ++i) {
    const runtime::Instruction& ins = base.program.instructions[i];
    std::string why;
    if (!KernelForDims(ins, base.program.plan, dims, &why)) {
      ThrowUnimplemented("instruction ", i, " (", ins.kernel->name(), ") cannot take the sizes at ", where, ": ", why);
    }
  }
}

}  // namespace

std::vector<Symbol> SymbolsForChange(const ShapeSignature& before, const ShapeSignature& after,
                                     const std::vector<Symbol>& keep) {
  if (!SameLayout(before, after)) return {};
  std::map<std::pair<int64_t, int64_t>, Symbol> groups;  // (old, new) -> positions
  std::vector<std::pair<int64_t, int64_t>> order;
  std::map<std::pair<int, int>, bool> taken;
  for (size_t i = 0; i < after.inputs.size(); ++i) {
    for (size_t d = 0; d < after.inputs[i].dims.size(); ++d) {
      const std::pair<int64_t, int64_t> change{before.inputs[i].dims[d], after.inputs[i].dims[d]};
      if (change.first == change.second) continue;
      if (!groups.count(change)) order.push_back(change);
      groups[change].positions.emplace_back(static_cast<int>(i), static_cast<int>(d));
      taken[{static_cast<int>(i), static_cast<int>(d)}] = true;
    }
  }
  std::vector<Symbol> symbols;
  for (const auto& c : order) symbols.push_back(groups[c]);
  for (const Symbol& k : keep) {
    Symbol s;
    int64_t value = -1;
    bool one_value = true;
    for (const auto& p : k.positions) {
      if (taken.count(p) || p.first >= static_cast<int>(after.inputs.size()) ||
          p.second >= static_cast<int>(after.inputs[p.first].dims.size())) {
        continue;
      }
      const int64_t v = after.inputs[p.first].dims[p.second];
      one_value = one_value && (value < 0 || v == value);
      value = v;
      s.positions.push_back(p);
    }
    if (one_value && !s.positions.empty()) symbols.push_back(s);
  }
  if (symbols.size() > static_cast<size_t>(kMaxSymbols)) return {};
  NameSymbols(&symbols);
  return symbols;
}

std::vector<Symbol> SymbolsForDeclared(const JitSubgraph& subgraph, const ShapeSignature& signature) {
  std::map<std::string, const proto::VarDesc*> vars;
  for (const auto& v : subgraph.block.vars()) vars[v.name()] = &v;
  std::map<int64_t, Symbol> by_value;
  std::vector<int64_t> order;
  for (size_t i = 0; i < subgraph.inputs.size() && i < signature.inputs.size(); ++i) {
    auto it = vars.find(subgraph.inputs[i]);
    if (it == vars.end()) continue;
    const Dims declared = VarDims(*it->second);
    const Dims& dims = signature.inputs[i].dims;
    if (declared.size() != dims.size()) continue;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (declared[d] >= 0) continue;
      if (!by_value.count(dims[d])) order.push_back(dims[d]);
      by_value[dims[d]].positions.emplace_back(static_cast<int>(i), static_cast<int>(d));
    }
  }
  std::vector<Symbol> symbols;
  for (int64_t v : order) symbols.push_back(by_value[v]);
  if (symbols.size() > static_cast<size_t>(kMaxSymbols)) return {};
  NameSymbols(&symbols);
  return symbols;
}

namespace {

// Makes `base` (the lowering at `signature`) the object for every value of
// `symbols`, or throws the reason it cannot be.
void MakeDynamic(CompiledObject* base, const std::string& key, const JitSubgraph& subgraph,
                 const ShapeSignature& signature, const std::vector<Symbol>& symbols, const CompileOptions& options,
                 const OpRegistry& registry) {
  if (symbols.empty() || symbols.size() > static_cast<size_t>(kMaxSymbols)) {
    ThrowUnimplemented("a dynamic compile takes 1 to ", kMaxSymbols, " symbols, not ", symbols.size());
  }
  const std::vector<std::vector<int64_t>> values = ProbeValues(signature, symbols);
  std::vector<std::unique_ptr<CompiledObject>> probes;
  std::vector<const CompiledObject*> grid{base};
  double probe_ms = 0.0, probe_cpu_ms = 0.0;
  auto lower_at = [&](const std::vector<int64_t>& point) {
    const std::string where = SymbolValuesString(symbols, point);
    try {
      probes.push_back(Lower(key, subgraph, SignatureAt(signature, symbols, point), options, registry));
    } catch (const Error& e) {
      ThrowUnimplemented("the lowering at ", where, " failed: ", e.what());
    }
    CheckSameStructure(*base, *probes.back(), where);
    probe_ms += probes.back()->compile_ms;
    probe_cpu_ms += probes.back()->compile_cpu_ms;
    return probes.back().get();
  };
  for (uint32_t m = 1; m < (1u << symbols.size()); ++m) grid.push_back(lower_at(GridPoint(values, m)));
  const CompiledObject* check = lower_at(CheckPoint(values));
  CheckKernelsResize(*base, *grid[1], SymbolValuesString(symbols, GridPoint(values, 1)));

  auto dyn = std::make_shared<DynamicShape>();
  dyn->symbols = symbols;
  dyn->symbolic = signature;
  for (const Symbol& s : symbols) {
    for (const auto& [in, axis] : s.positions) dyn->symbolic.inputs[in].dims[axis] = -1;
  }
  const auto& buffers = base->program.plan.buffers;
  for (size_t b = 0; b < buffers.size(); ++b) {
    dyn->buffer_dims.push_back(FitDims(
        grid, *check, values, [b](const CompiledObject& o) -> const Dims& { return o.program.plan.buffers[b].dims; },
        "buffer " + buffers[b].name, symbols));
  }
  for (size_t o = 0; o < base->output_dims.size(); ++o) {
    dyn->output_dims.push_back(FitDims(
        grid, *check, values, [o](const CompiledObject& x) -> const Dims& { return x.output_dims[o]; },
        "output " + base->output_names[o], symbols));
  }
  const std::string at = SymbolValuesString(symbols, GridPoint(values, 0));
  base->lowering = "# compiled once for every " + dyn->SignatureString() + " (" +
                   dyn->SymbolsString(subgraph.inputs) + "); the steps below are those at " + at + "\n" +
                   VarShapesText(subgraph, signature, symbols, registry) + base->lowering;
  base->dynamic = std::move(dyn);
  base->compile_phases.push_back({"probe lowerings", probe_ms, probe_cpu_ms});
  base->compile_ms += probe_ms;
  base->compile_cpu_ms += probe_cpu_ms;
}

}  // namespace

std::unique_ptr<CompiledObject> LowerDynamic(const std::string& key, const JitSubgraph& subgraph,
                                             const ShapeSignature& signature, const std::vector<Symbol>& symbols,
                                             const CompileOptions& options, const OpRegistry& registry,
                                             std::string* why) {
  std::unique_ptr<CompiledObject> base = Lower(key, subgraph, signature, options, registry);
  try {
    MakeDynamic(base.get(), key, subgraph, signature, symbols, options, registry);
  } catch (const Error& e) {
    base->dynamic = nullptr;
    if (why != nullptr) *why = e.what();
  }
  return base;
}

}  // namespace kiln::jit
