// What decomposition_fusion_pass's two matchers (LayerNorm/GELU in
// decomposition_fusion_pass.cc, attention in decomposition_fusion_attention.cc)
// ask of the graph: an op's single input or output, its type and resolved
// attributes, and whether a var is an f32 intermediate the pattern may
// consume. Internal to the pass.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "framework/ir/graph.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "passes/decomposition_fusion_pass.h"

namespace kiln::decomposition_fusion {

class GraphMatcher {
 public:
  GraphMatcher(const ir::Graph& g, const DecompositionFusionPassOptions& o, const OpRegistry& r)
      : g_(g), options_(o), registry_(r) {}

 protected:
  ir::NodeId In(ir::NodeId op, std::string_view slot) const { return Single(g_.InputSlot(op, slot)); }
  ir::NodeId Out(ir::NodeId op, std::string_view slot) const { return Single(g_.OutputSlot(op, slot)); }
  static ir::NodeId Single(const std::vector<ir::NodeId>& args) { return args.size() == 1 ? args[0] : ir::kNoNode; }

  // An op of `type` that is not a recompute copy.
  bool Is(ir::NodeId op, std::string_view type) const {
    return g_.op(op).type() == type && !HasOpRole(g_.op(op), kOpRoleRecompute);
  }
  template <typename T>
  T Attr(ir::NodeId op, const std::string& name) const {
    return std::get<T>(ResolveAttrs(registry_.Get(g_.op(op).type()), g_.op(op), -1).at(name));
  }
  bool F32(ir::NodeId v) const {
    return v != ir::kNoNode && g_.IsDeclared(v) && g_.var(v).dtype() == proto::FP32;
  }
  // Declared f32, not persistable, not kept, its name written once.
  bool Intermediate(ir::NodeId v) const {
    if (!F32(v)) return false;
    const proto::VarDesc& d = g_.var(v);
    return !d.persistable() && !options_.keep_vars.count(d.name()) && g_.VarVersions(d.name()).size() == 1;
  }

  const ir::Graph& g_;
  const DecompositionFusionPassOptions& options_;
  const OpRegistry& registry_;
};

}  // namespace kiln::decomposition_fusion
