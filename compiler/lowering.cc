#include "compiler/lowering.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "compiler/ew_lowering.h"
#include "compiler/op_kernel.h"
#include "framework/validate.h"

namespace kiln::jit {

proto::BlockDesc InferConcreteShapes(const JitSubgraph& sg, const ShapeSignature& signature,
                                     const OpRegistry& registry) {
  if (signature.inputs.size() != sg.inputs.size()) {
    ThrowInvalidArgument("cluster has ", sg.inputs.size(), " inputs, the signature has ", signature.inputs.size());
  }
  // Inputs get their run-time dims; every other var is declared afresh by
  // shape inference, op by op.
  std::set<std::string> inputs(sg.inputs.begin(), sg.inputs.end());
  proto::BlockDesc block = sg.block;
  block.clear_vars();
  for (size_t i = 0; i < sg.inputs.size(); ++i) {
    const proto::VarDesc* v = FindVarDesc(sg.block, sg.inputs[i]);
    proto::VarDesc* nv = block.add_vars();
    if (v != nullptr) *nv = *v;
    nv->set_name(sg.inputs[i]);
    nv->set_dtype(ToProto(signature.inputs[i].dtype));
    nv->clear_dims();
    for (int64_t d : signature.inputs[i].dims) nv->add_dims(d);
  }
  for (int i = 0; i < block.ops_size(); ++i) InferShapeAtBuild(&block, i, /*declare_outputs=*/true, registry);
  for (const auto& v : block.vars()) {
    for (int64_t d : v.dims()) {
      if (d < 0) ThrowInvalidArgument("var '", v.name(), "' has no concrete shape (", DimsToString(VarDims(v)), ")");
    }
  }
  return block;
}

std::unique_ptr<CompiledObject> Lower(const std::string& key, const JitSubgraph& sg, const ShapeSignature& signature,
                                      const CompileOptions& options, const OpRegistry& registry) {
  const auto t0 = std::chrono::steady_clock::now();
  auto obj = std::make_unique<CompiledObject>();
  obj->key = key;
  obj->signature = signature;
  obj->options = options;
  obj->input_names = sg.inputs;
  obj->output_names = sg.outputs;

  proto::BlockDesc block;
  try {
    block = InferConcreteShapes(sg, signature, registry);
  } catch (const Error& e) {
    ThrowInvalidArgument("shape inference failed: ", e.what());
  }

  // One buffer per var. A var that is both an input and an output (an
  // in-place update) is one output buffer: the launch op binds the input's
  // memory (donated) or a protected copy of it there.
  runtime::BufferPlan& plan = obj->program.plan;
  std::map<std::string, int> buffer_of;
  std::map<std::string, int> input_index;
  for (size_t i = 0; i < sg.inputs.size(); ++i) input_index[sg.inputs[i]] = static_cast<int>(i);
  auto add_buffer = [&](const std::string& name, runtime::BufferRole role, int io) {
    const proto::VarDesc* v = FindVarDesc(block, name);
    KILN_CHECK(v != nullptr, "no VarDesc for ", name);
    runtime::BufferInfo info;
    info.name = name;
    info.dtype = FromProto(v->dtype());
    info.dims = VarDims(*v);
    info.role = role;
    info.io_index = io;
    buffer_of[name] = static_cast<int>(plan.buffers.size());
    plan.buffers.push_back(info);
  };
  for (size_t o = 0; o < sg.outputs.size(); ++o) {
    // A shape-only output is a temp: only its dims leave the cluster.
    const bool shape_only = std::find(sg.shape_only_outputs.begin(), sg.shape_only_outputs.end(), sg.outputs[o]) !=
                            sg.shape_only_outputs.end();
    const auto it = input_index.find(sg.outputs[o]);
    KILN_CHECK(!shape_only || it == input_index.end(), "shape-only output '", sg.outputs[o], "' is also an input");
    add_buffer(sg.outputs[o], shape_only ? runtime::BufferRole::kTemp : runtime::BufferRole::kOutput,
               shape_only ? -1 : static_cast<int>(o));
    obj->output_shape_only.push_back(shape_only);
    obj->output_alias.push_back(it == input_index.end() ? -1 : it->second);
    const runtime::BufferInfo& info = plan.buffers.back();
    obj->output_dims.push_back(info.dims);
    obj->output_dtypes.push_back(info.dtype);
  }
  for (size_t i = 0; i < sg.inputs.size(); ++i) {
    if (buffer_of.count(sg.inputs[i])) continue;
    add_buffer(sg.inputs[i], runtime::BufferRole::kInput, static_cast<int>(i));
    plan.buffers.back().donatable = std::find(sg.donatable_inputs.begin(), sg.donatable_inputs.end(),
                                              sg.inputs[i]) != sg.donatable_inputs.end();
  }
  auto buffer = [&](const std::string& name) {
    auto it = buffer_of.find(name);
    if (it == buffer_of.end()) {
      add_buffer(name, runtime::BufferRole::kTemp, -1);
      it = buffer_of.find(name);
    }
    return it->second;
  };

  // Partition: maximal elementwise groups become generated kernels; every
  // other op runs its framework kernel on the bound buffers.
  const std::vector<LoweredUnit> units = PartitionElementwise(block, sg, options, registry);
  for (const LoweredUnit& unit : units) {
    for (const auto& v : unit.new_vars) {
      if (FindVarDesc(block, v.name()) == nullptr) *block.add_vars() = v;
    }
  }
  for (const LoweredUnit& unit : units) {
    runtime::Instruction ins;
    std::vector<std::string> names;
    if (unit.kernel) {
      ins.kernel = unit.kernel;
      names = unit.arg_names;
      ins.num_inputs = unit.num_inputs;
    } else {
      const proto::OpDesc& op = unit.op_override ? *unit.op_override : block.ops(unit.op_index);
      int num_inputs = 0;
      ins.kernel = std::make_shared<FrameworkOpKernel>(op, registry.Get(op.type()), options.use_onednn, &names,
                                                       &num_inputs);
      ins.num_inputs = num_inputs;
    }
    for (const auto& n : names) ins.args.push_back(buffer(n));
    for (const auto& [k, j] : ins.kernel->InplacePairs()) ins.inplace.emplace_back(k, ins.num_inputs + j);
    obj->program.instructions.push_back(std::move(ins));
  }
  runtime::PlanArena(obj->program.instructions, &plan, options.reuse_buffers);
  obj->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return obj;
}

}  // namespace kiln::jit
