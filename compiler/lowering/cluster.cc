#include "compiler/lowering/cluster.h"

#include <algorithm>
#include <unordered_map>

#include "framework/op_desc.h"
#include "framework/validate.h"

namespace kiln::jit {

proto::BlockDesc InferConcreteShapes(const JitSubgraph& sg, const ShapeSignature& signature,
                                     const OpRegistry& registry) {
  if (signature.inputs.size() != sg.inputs.size()) {
    ThrowInvalidArgument("cluster has ", sg.inputs.size(), " inputs, the signature has ", signature.inputs.size());
  }
  // Inputs get their run-time dims; every other var is declared afresh by
  // shape inference, op by op.
  proto::BlockDesc block = sg.block;
  block.clear_vars();
  // The subgraph's declarations by name (the first of a name, as FindVarDesc).
  std::unordered_map<std::string, const proto::VarDesc*> declared;
  for (const auto& v : sg.block.vars()) declared.emplace(v.name(), &v);
  for (size_t i = 0; i < sg.inputs.size(); ++i) {
    const auto found = declared.find(sg.inputs[i]);
    const proto::VarDesc* v = found == declared.end() ? nullptr : found->second;
    proto::VarDesc* nv = block.add_vars();
    if (v != nullptr) *nv = *v;
    nv->set_name(sg.inputs[i]);
    nv->set_dtype(ToProto(signature.inputs[i].dtype));
    nv->clear_dims();
    for (int64_t d : signature.inputs[i].dims) nv->add_dims(d);
  }
  BlockVarIndex index(&block);
  for (int i = 0; i < block.ops_size(); ++i) InferShapeAtBuild(&block, i, /*declare_outputs=*/true, registry, &index);
  for (const auto& v : block.vars()) {
    for (int64_t d : v.dims()) {
      // The compiler's limit, not the caller's error (CompileCache::CheckSignature
      // raises only InvalidArgument): the cluster runs its framework ops.
      if (d < 0) ThrowUnimplemented("var '", v.name(), "' has no concrete shape (", DimsToString(VarDims(v)), ")");
    }
  }
  return block;
}


Cluster::Cluster(const JitSubgraph& subgraph, const ShapeSignature& signature, const CompileOptions& options,
                 const OpRegistry& registry)
    : subgraph_(subgraph), options_(options), registry_(registry) {
  try {
    block_ = InferConcreteShapes(subgraph, signature, registry);
  } catch (const Error& e) {
    ThrowInvalidArgument("shape inference failed: ", e.what());
  }
  graph_ = ir::Graph::FromBlock(block_);
  for (const auto& v : block_.vars()) vars_[v.name()] = &v;
  inputs_.insert(subgraph.inputs.begin(), subgraph.inputs.end());
  outputs_.insert(subgraph.outputs.begin(), subgraph.outputs.end());
  donatable_.insert(subgraph.donatable_inputs.begin(), subgraph.donatable_inputs.end());
  ops_.resize(block_.ops_size());
  for (ir::NodeId n : graph_.OpNodes()) {
    const int i = static_cast<int>(graph_.OpOrder(n));
    ops_[i].node = n;
    op_of_node_[n] = i;
  }
  auto dims_of = [this](const std::string& v) { return dims(v); };
  auto dtype_of = [this](const std::string& v) { return FromProto(var(v).dtype()); };
  for (int i = 0; i < num_ops(); ++i) {
    OpFacts& f = ops_[i];
    const proto::OpDesc& desc = block_.ops(i);
    f.info = &registry.Get(desc.type());
    f.attrs = ResolveAttrs(*f.info, desc, i);
    f.shape_only = NoNeedBufferVars(*f.info, desc);
    const std::vector<std::string> ins = InputVars(desc), outs = OutputVars(desc);
    f.writes.insert(outs.begin(), outs.end());
    // Only ops whose every arg is f32 or bool are asked: generated kernels
    // hold no other dtype.
    bool ew_dtypes = true;
    for (const auto& a : ins) ew_dtypes = ew_dtypes && IsEwDtype(dtype_of(a));
    for (const auto& a : outs) ew_dtypes = ew_dtypes && IsEwDtype(dtype_of(a));
    if (options.fuse_elementwise && f.info->elementwise && ew_dtypes) {
      f.fragments = f.info->elementwise(EwOpView(desc, f.attrs, dims_of, dtype_of));
    }
    for (const auto& fr : f.fragments) {
      for (const auto& r : fr.reads) f.reads.insert(r.var);
    }
    if (f.fragments.empty()) {
      for (const auto& a : ins) {
        if (!f.shape_only.count(a)) f.reads.insert(a);
      }
    }
  }
  FindDeadOps();
}

void Cluster::FindDeadOps() {
  // The vars whose current value (at the op looked at) a live op or the
  // caller reads as data.
  std::set<std::string> needed(subgraph_.outputs.begin(), subgraph_.outputs.end());
  for (int i = num_ops() - 1; i >= 0; --i) {
    OpFacts& f = ops_[i];
    f.dead = !f.writes.empty() && std::none_of(f.writes.begin(), f.writes.end(), [&](const std::string& v) {
      return needed.count(v) > 0;
    });
    if (f.dead) continue;
    // An op writes the whole of each output: the value before it is needed
    // only if it reads it (in place).
    for (const std::string& v : f.writes) needed.erase(v);
    for (const std::string& v : InputVars(block_.ops(i))) {
      if (!f.shape_only.count(v)) needed.insert(v);
    }
  }
}

std::string Cluster::OpLabel(int i) const { return kiln::OpLabel(block_.ops(i), i); }

std::string Cluster::In(int i, std::string_view slot) const {
  const std::vector<std::string> args = InputArgs(block_.ops(i), slot);
  return args.size() == 1 && args[0] != kEmptyVarName ? args[0] : "";
}

std::string Cluster::Out(int i, std::string_view slot) const {
  const std::vector<std::string> args = OutputArgs(block_.ops(i), slot);
  return args.size() == 1 && args[0] != kEmptyVarName ? args[0] : "";
}

ir::NodeId Cluster::InputNode(int i, const std::string& var) const {
  for (ir::NodeId v : graph_.inputs(ops_[i].node)) {
    if (graph_.VarName(v) == var) return v;
  }
  return ir::kNoNode;
}

ir::NodeId Cluster::OutputNode(int i, const std::string& var) const {
  for (ir::NodeId v : graph_.outputs(ops_[i].node)) {
    if (graph_.VarName(v) == var) return v;
  }
  return ir::kNoNode;
}

std::vector<int> Cluster::DataReaders(ir::NodeId v, const std::string& var) const {
  std::vector<int> out;
  if (v == ir::kNoNode) return out;
  for (ir::NodeId reader : graph_.outputs(v)) {
    const int j = op_of_node_.at(reader);
    if (!ops_[j].dead && ops_[j].reads.count(var)) out.push_back(j);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> Cluster::Consumers(int i, const std::string& var) const { return DataReaders(OutputNode(i, var), var); }

std::vector<int> Cluster::Readers(int i, const std::string& var) const { return DataReaders(InputNode(i, var), var); }

int Cluster::Producer(int i, const std::string& var) const {
  const ir::NodeId v = InputNode(i, var);
  if (v == ir::kNoNode) return -1;
  const ir::NodeId p = graph_.Producer(v);
  return p == ir::kNoNode ? -1 : op_of_node_.at(p);
}

bool Cluster::RewrittenAfter(int i, const std::string& var) const {
  const ir::NodeId v = InputNode(i, var);
  if (v == ir::kNoNode) return false;
  const std::vector<ir::NodeId> versions = graph_.VarVersions(var);
  return !versions.empty() && versions.back() != v;
}

bool Cluster::IsLastWrite(int i, const std::string& var) const {
  const ir::NodeId v = OutputNode(i, var);
  const std::vector<ir::NodeId> versions = graph_.VarVersions(var);
  return v != ir::kNoNode && !versions.empty() && versions.back() == v;
}

bool Cluster::WrittenLaterByOthers(int i, const std::string& var) const {
  const ir::NodeId v = InputNode(i, var);
  const std::vector<ir::NodeId> versions = graph_.VarVersions(var);
  auto it = std::find(versions.begin(), versions.end(), v);
  if (it == versions.end()) return false;
  for (++it; it != versions.end(); ++it) {
    if (graph_.Producer(*it) != ops_[i].node) return true;
  }
  return false;
}

const proto::VarDesc& Cluster::var(const std::string& name) const {
  auto it = vars_.find(name);
  KILN_CHECK(it != vars_.end(), "cluster has no var '", name, "'");
  return *it->second;
}

bool Cluster::Excluded(std::string_view step, int i) const {
  return excluded_.count({std::string(step), i}) > 0;
}

}  // namespace kiln::jit
