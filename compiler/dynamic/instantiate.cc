#include "compiler/dynamic/instantiate.h"

#include <chrono>
#include <map>

#include "compiler/lowering/trace.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {


// Buffer dims at `values`, each var's checked against shape inference.
std::vector<Dims> BufferDims(const CompiledObject& obj, const std::vector<int64_t>& values,
                             const proto::BlockDesc& block, const std::string& at) {
  const DynamicShape& dyn = *obj.dynamic;
  std::map<std::string, const proto::VarDesc*> vars;
  for (const auto& v : block.vars()) vars[v.name()] = &v;
  std::vector<Dims> out;
  const auto& buffers = obj.program.plan.buffers;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const auto dims = EvalSymDims(dyn.buffer_dims[b], values);
    if (!dims) {
      ThrowUnimplemented("buffer ", buffers[b].name, " ", SymDimsToString(dyn.buffer_dims[b], dyn.symbols),
                         " has no size at ", at);
    }
    auto v = vars.find(buffers[b].name);
    if (v != vars.end() && VarDims(*v->second) != *dims) {
      ThrowUnimplemented("var ", buffers[b].name, " is ", DimsToString(VarDims(*v->second)), " at ", at,
                         ", not ", SymDimsToString(dyn.buffer_dims[b], dyn.symbols), " = ", DimsToString(*dims));
    }
    out.push_back(*dims);
  }
  return out;
}

}  // namespace

std::shared_ptr<const runtime::Kernel> KernelForDims(const runtime::Instruction& ins,
                                                     const runtime::BufferPlan& made_for,
                                                     const std::vector<Dims>& dims, std::string* why) {
  std::vector<Dims> arg_dims;
  bool changed = false;
  for (int a : ins.args) {
    arg_dims.push_back(dims[a]);
    changed = changed || dims[a] != made_for.buffers[a].dims;
  }
  if (!changed || ins.kernel->ReadsDimsAtRunTime()) return ins.kernel;
  return ins.kernel->Resize(arg_dims, why);
}

std::unique_ptr<CompiledObject> Instantiate(const CompiledObject& dynamic, const ShapeSignature& signature,
                                            const proto::BlockDesc& block) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuMs();
  KILN_CHECK(dynamic.dynamic != nullptr, "Instantiate of an object compiled for fixed shapes");
  const DynamicShape& dyn = *dynamic.dynamic;
  const auto values = dyn.Match(signature);
  if (!values) ThrowUnimplemented("signature ", signature.ToString(), " is not ", dyn.SignatureString());
  const std::string at = SymbolValuesString(dyn.symbols, *values);

  auto obj = std::make_unique<CompiledObject>();
  obj->key = dynamic.key;
  obj->signature = signature;
  obj->options = dynamic.options;
  obj->input_names = dynamic.input_names;
  obj->output_names = dynamic.output_names;
  obj->output_dtypes = dynamic.output_dtypes;
  obj->output_alias = dynamic.output_alias;
  obj->output_shape_only = dynamic.output_shape_only;
  obj->lowering = dynamic.lowering;
  obj->unit_fallbacks = dynamic.unit_fallbacks;
  obj->dynamic = dynamic.dynamic;
  obj->instance_of = dynamic.id;
  obj->symbol_values = *values;
  for (const SymDims& d : dyn.output_dims) {
    const auto dims = EvalSymDims(d, *values);
    if (!dims) ThrowUnimplemented("an output ", SymDimsToString(d, dyn.symbols), " has no size at ", at);
    obj->output_dims.push_back(*dims);
  }

  const std::vector<Dims> dims = BufferDims(dynamic, *values, block, at);
  obj->program.plan = dynamic.program.plan;
  for (size_t b = 0; b < dims.size(); ++b) obj->program.plan.buffers[b].dims = dims[b];
  for (const auto& info : obj->program.plan.buffers) {
    // A view shares its root's memory: the two must keep one size.
    if (info.view_of >= 0 && info.bytes() != obj->program.plan.buffers[info.view_of].bytes()) {
      ThrowUnimplemented("view ", info.name, " and ", obj->program.plan.buffers[info.view_of].name,
                         " differ in size at ", at);
    }
  }
  for (size_t i = 0; i < dynamic.program.instructions.size(); ++i) {
    runtime::Instruction ins = dynamic.program.instructions[i];
    std::string why;
    ins.kernel = KernelForDims(ins, dynamic.program.plan, dims, &why);
    if (!ins.kernel) {
      ThrowUnimplemented("instruction ", i, " (", dynamic.program.instructions[i].kernel->name(), ") at ", at, ": ",
                         why);
    }
    obj->program.instructions.push_back(std::move(ins));
  }
  runtime::PlanArena(obj->program.instructions, &obj->program.plan, obj->options.reuse_buffers);
  obj->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  obj->compile_cpu_ms = ThreadCpuMs() - cpu0;
  obj->compile_phases.push_back({"instantiate", obj->compile_ms, obj->compile_cpu_ms});
  return obj;
}

}  // namespace kiln::jit
