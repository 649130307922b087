#include "compiler/lowering/buffers.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace kiln::jit {
namespace {

class BufferTable {
 public:
  BufferTable(const Cluster& c, const std::vector<EmittedKernel>& kernels, CompiledObject* obj)
      : c_(c), obj_(obj), plan_(obj->program.plan) {
    for (const auto& k : kernels) {
      for (const auto& v : k.new_vars) new_vars_.emplace(v.name(), v);
    }
  }

  // Outputs first (so an in-place update is its output buffer), then inputs.
  void AddIo() {
    const JitSubgraph& sg = c_.subgraph();
    std::map<std::string, int> input_index;
    for (size_t i = 0; i < sg.inputs.size(); ++i) input_index[sg.inputs[i]] = static_cast<int>(i);
    for (size_t o = 0; o < sg.outputs.size(); ++o) {
      // A shape-only output is a temp: only its dims leave the cluster.
      const bool shape_only = std::count(sg.shape_only_outputs.begin(), sg.shape_only_outputs.end(), sg.outputs[o]);
      const auto it = input_index.find(sg.outputs[o]);
      KILN_CHECK(!shape_only || it == input_index.end(), "shape-only output '", sg.outputs[o], "' is also an input");
      const runtime::BufferInfo& info = Add(sg.outputs[o], shape_only ? runtime::BufferRole::kTemp
                                                                       : runtime::BufferRole::kOutput,
                                            shape_only ? -1 : static_cast<int>(o));
      obj_->output_shape_only.push_back(shape_only);
      obj_->output_alias.push_back(it == input_index.end() ? -1 : it->second);
      obj_->output_dims.push_back(info.dims);
      obj_->output_dtypes.push_back(info.dtype);
    }
    for (size_t i = 0; i < sg.inputs.size(); ++i) {
      if (buffer_of_.count(sg.inputs[i])) continue;
      Add(sg.inputs[i], runtime::BufferRole::kInput, static_cast<int>(i)).donatable = c_.IsDonatable(sg.inputs[i]);
    }
  }

  int Get(const std::string& name) {
    auto it = buffer_of_.find(name);
    if (it != buffer_of_.end()) return it->second;
    Add(name, runtime::BufferRole::kTemp, -1);
    return buffer_of_.at(name);
  }

 private:
  runtime::BufferInfo& Add(const std::string& name, runtime::BufferRole role, int io) {
    auto nv = new_vars_.find(name);
    const proto::VarDesc& v = nv != new_vars_.end() ? nv->second : c_.var(name);
    runtime::BufferInfo info;
    info.name = name;
    info.dtype = FromProto(v.dtype());
    info.dims = VarDims(v);
    info.role = role;
    info.io_index = io;
    buffer_of_[name] = static_cast<int>(plan_.buffers.size());
    plan_.buffers.push_back(info);
    return plan_.buffers.back();
  }

  const Cluster& c_;
  CompiledObject* obj_;
  runtime::BufferPlan& plan_;
  std::unordered_map<std::string, proto::VarDesc> new_vars_;
  std::unordered_map<std::string, int> buffer_of_;
};

int Root(const runtime::BufferPlan& plan, int b) {
  while (plan.buffers[b].view_of >= 0) b = plan.buffers[b].view_of;
  return b;
}

// Gives a view's two buffers one memory where nothing else writes either:
// the output becomes a view of the input, or (when the output leaves the
// cluster and the input is a temp) the input lives in the output's memory.
// Elsewhere the view kernel copies.
void AliasViews(const std::vector<int>& view_ins, const std::vector<int>& view_outs, CompiledObject* obj) {
  runtime::BufferPlan& plan = obj->program.plan;
  std::vector<int> writes(plan.buffers.size(), 0);
  for (const auto& ins : obj->program.instructions) {
    for (size_t a = ins.num_inputs; a < ins.args.size(); ++a) ++writes[ins.args[a]];
  }
  for (size_t v = 0; v < view_ins.size(); ++v) {
    const int x = view_ins[v], o = view_outs[v];
    runtime::BufferInfo& xi = plan.buffers[x];
    runtime::BufferInfo& oi = plan.buffers[o];
    if (xi.bytes() != oi.bytes() || xi.dtype != oi.dtype || writes[o] != 1) continue;
    if (writes[x] > (xi.role == runtime::BufferRole::kInput ? 0 : 1)) continue;
    const bool x_in_place = xi.role == runtime::BufferRole::kOutput && obj->output_alias[xi.io_index] >= 0;
    const bool o_in_place = oi.role == runtime::BufferRole::kOutput && obj->output_alias[oi.io_index] >= 0;
    if (x_in_place || o_in_place) continue;
    if (oi.role == runtime::BufferRole::kTemp) {
      oi.view_of = Root(plan, x);
    } else if (xi.role == runtime::BufferRole::kTemp && xi.view_of < 0 && Root(plan, o) != x) {
      xi.view_of = o;
    }
  }
}

// Temps no instruction writes (and no view shares) become dims-only.
void MarkDimsOnly(const std::set<std::string>& data_reads, CompiledObject* obj) {
  runtime::BufferPlan& plan = obj->program.plan;
  std::vector<bool> written(plan.buffers.size(), false);
  for (const auto& ins : obj->program.instructions) {
    for (size_t a = ins.num_inputs; a < ins.args.size(); ++a) written[ins.args[a]] = true;
  }
  for (const auto& info : plan.buffers) {
    if (info.view_of >= 0) written[info.view_of] = written[Root(plan, info.view_of)] = true;
  }
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    runtime::BufferInfo& info = plan.buffers[b];
    if (info.role != runtime::BufferRole::kTemp || info.view_of >= 0 || written[b]) continue;
    // An Error, not a KILN_CHECK: the cluster then runs its framework ops.
    if (data_reads.count(info.name) > 0) {
      ThrowInternal("lowering: var '", info.name, "' is read as data inside the cluster, but no kernel writes it");
    }
    info.dims_only = true;
  }
}

}  // namespace

void BuildProgram(const Cluster& c, const std::vector<EmittedKernel>& kernels,
                  const std::set<std::string>& data_reads, CompiledObject* obj) {
  BufferTable table(c, kernels, obj);
  table.AddIo();
  std::vector<int> view_ins, view_outs;
  for (const EmittedKernel& k : kernels) {
    runtime::Instruction ins;
    ins.kernel = k.kernel;
    ins.num_inputs = k.num_inputs;
    for (const auto& n : k.args) ins.args.push_back(table.Get(n));
    for (const auto& [a, b] : ins.kernel->InplacePairs()) ins.inplace.emplace_back(a, ins.num_inputs + b);
    for (const auto& [a, b] : k.views) {
      view_ins.push_back(ins.args[a]);
      view_outs.push_back(ins.args[ins.num_inputs + b]);
    }
    obj->program.instructions.push_back(std::move(ins));
  }
  if (c.options().reuse_buffers) AliasViews(view_ins, view_outs, obj);
  MarkDimsOnly(data_reads, obj);
  runtime::PlanArena(obj->program.instructions, &obj->program.plan, c.options().reuse_buffers);
}

}  // namespace kiln::jit
