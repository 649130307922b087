#include "launch_op/jit_launch_op.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include "framework/executor.h"
#include "framework/op_registry.h"
#include "launch_op/fallback.h"
#include "launch_op/nan_check.h"
#include "launch_op/shadow_check.h"
#include "runtime/runner.h"

namespace kiln::jit {
namespace {

// What the ops of one RegisterJitOps call launch through: the runtime, the
// registry that holds its jit_kernel op (executor launch mode) and the
// fallback's registry.
struct JitOps {
  JitRuntime& jit;
  const OpRegistry& registry;
  std::shared_ptr<FallbackOps> fallback;
};

// The cluster's framework ops on the caller's buffers (inputs shared, outputs
// shared back), with the fallback's kernels.
void RunFallback(ExecContext& ctx, const std::string& key, const JitOps& ops) {
  const JitSubgraph& sg = ops.jit.cache().GetSubgraph(key);
  LaunchServices& launch = ops.jit.launch();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < sg.inputs.size(); ++i) inputs.push_back(ctx.InputMeta("X", i));
  ExecutorOptions options;
  options.check_nan_inf = ctx.check_nan_inf();
  options.onednn = ctx.onednn();  // the settings of the run that launched it
  const auto local = ops.fallback->Run(key, sg, inputs, options, ops.registry, ops.jit);
  inputs.clear();
  for (size_t o = 0; o < sg.outputs.size(); ++o) *ctx.Output("Out", o) = local->GetVar(sg.outputs[o])->Get();
  launch.Count(LaunchEvent::kFrameworkFallback);
}

// Deep copies of a launch's inputs for its shadow check. Taken before the
// compiled run: that run updates inputs in place (optimizer updates) and
// takes over the buffers of dying inputs.
std::vector<Tensor> CopyInputs(ExecContext& ctx) {
  std::vector<Tensor> copies(ctx.InputCount("X"));
  for (size_t i = 0; i < copies.size(); ++i) copies[i].CopyFrom(ctx.InputMeta("X", i));
  return copies;
}

std::vector<const Tensor*> OutputsIn(const Scope& scope, const JitSubgraph& sg) {
  std::vector<const Tensor*> out;
  for (const auto& name : sg.outputs) out.push_back(&scope.GetVar(name)->Get());
  return out;
}

// After a compiled launch: its outputs against the framework ops' on the
// copies (each run on copies of its own: the ops update inputs in place), and
// when they differ, once more with the framework's spread between its oneDNN
// and its reference kernels (shadow_check.h).
// On a mismatch the cluster is reported and denied, and this launch's
// outputs are replaced by the framework's, so the run goes on as if the
// cluster had never been compiled.
void ShadowCheck(ExecContext& ctx, JitRuntime& jit, const CompiledObject& obj, const std::vector<Tensor>& copies,
                 const LaunchChecks& checks) {
  const JitSubgraph& sg = jit.cache().GetSubgraph(obj.key);
  ExecutorOptions options;  // the kernels a run without the JIT would use
  options.use_onednn = obj.options.use_onednn;
  options.onednn = obj.options.OneDnnSettings();
  const auto local = RunClusterOps(sg, copies, /*copy_inputs=*/true, Executor(options));
  std::vector<const Tensor*> got;
  for (size_t o = 0; o < sg.outputs.size(); ++o) got.push_back(obj.output_shape_only[o] ? nullptr : ctx.Output("Out", o));
  const std::vector<const Tensor*> want = OutputsIn(*local, sg);
  std::optional<ShadowFailure> failure = FindShadowFailure(sg, got, want, checks.tolerances);
  if (!failure) return;
  options.use_onednn = !options.use_onednn;  // the other kernels: other summation orders
  const auto alt = RunClusterOps(sg, copies, /*copy_inputs=*/true, Executor(options));
  failure = FindShadowFailure(sg, got, want, checks.tolerances, OutputsIn(*alt, sg));
  if (!failure) return;
  failure->key = obj.key;
  failure->step = jit.launch().step();
  failure->launch = checks.launch;
  jit.launch().DenyAfterShadowFailure(std::move(*failure));
  for (size_t o = 0; o < sg.outputs.size(); ++o) *ctx.Output("Out", o) = *want[o];
  jit.launch().Count(LaunchEvent::kFrameworkFallback);
}

// What runs after each instruction: the test fault, then --check_nan_inf.
runtime::InstructionHook AfterInstruction(const CompiledObject& obj, const CompileCache& cache, bool check_nan_inf,
                                          InstructionFault fault) {
  runtime::InstructionHook check = check_nan_inf ? NanInfCheck(obj, cache.GetSubgraph(obj.key)) : nullptr;
  if (!fault) return check;
  return [&obj, fault = std::move(fault), check = std::move(check)](size_t i, const runtime::BufferView* args) {
    fault(obj, i, args);
    if (check) check(i, args);
  };
}

// Executor launch mode: the instruction list as a program of jit_kernel ops,
// kept with its compiled object (so the cache bounds it). A prepared plan
// binds the vars of one scope, so launches of one object through it take
// turns on its scope.
struct ExecutorModeProgram : CompiledObjectAttachment {
  explicit ExecutorModeProgram(std::shared_ptr<std::atomic<int64_t>> alive) : alive(std::move(alive)) { ++*this->alive; }
  ~ExecutorModeProgram() override { --*alive; }
  std::shared_ptr<std::atomic<int64_t>> alive;  // JitRuntime::executor_programs()
  proto::ProgramDesc program;
  std::unique_ptr<ExecutionPlan> plan;
  mutable std::mutex mu;
  mutable Scope scope;
};

std::shared_ptr<const CompiledObjectAttachment> BuildExecutorProgram(const CompiledObject& obj, const JitOps& ops) {
  auto p = std::make_shared<ExecutorModeProgram>(ops.jit.executor_programs());
  proto::BlockDesc* block = p->program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  const auto& bufs = obj.program.plan.buffers;
  for (const auto& b : bufs) {
    proto::VarDesc* v = block->add_vars();
    v->set_name(b.name);
    v->set_dtype(ToProto(b.dtype));
    for (int64_t d : b.dims) v->add_dims(d);
    // Inputs and outputs are the caller's buffers: never freed here.
    v->set_persistable(b.role != runtime::BufferRole::kTemp);
  }
  for (size_t i = 0; i < obj.program.instructions.size(); ++i) {
    const auto& ins = obj.program.instructions[i];
    std::vector<std::string> in, out;
    for (size_t k = 0; k < ins.args.size(); ++k) {
      (static_cast<int>(k) < ins.num_inputs ? in : out).push_back(bufs[ins.args[k]].name);
    }
    *block->add_ops() = OpBuilder("jit_kernel")
                            .In("X", in)
                            .Out("Out", out)
                            .Attr("object_id", static_cast<int64_t>(obj.id))
                            .Attr("instruction", static_cast<int64_t>(i))
                            .Build();
  }
  p->plan = Executor({}, ops.registry).Prepare(p->program, 0, {});
  return p;
}

void RunThroughExecutor(const CompiledObject& obj, const std::vector<void*>& ins, const std::vector<void*>& outs,
                        bool check_nan_inf, const JitOps& ops) {
  const auto p = std::static_pointer_cast<const ExecutorModeProgram>(
      obj.Attachment([&obj, &ops] { return BuildExecutorProgram(obj, ops); }));
  std::lock_guard<std::mutex> lock(p->mu);
  // A dims-only temp (BufferInfo::dims_only) gets its dims without data, as
  // the runtime binds it as nullptr; the other temps are the ops' own.
  for (const auto& b : obj.program.plan.buffers) {
    if (b.role == runtime::BufferRole::kTemp && !b.dims_only) continue;
    void* data = b.dims_only ? nullptr : b.role == runtime::BufferRole::kInput ? ins[b.io_index] : outs[b.io_index];
    p->scope.Var(b.name)->GetMutable()->ShareExternalData(data, b.dtype, b.dims);
  }
  ExecutorOptions options;
  options.check_nan_inf = check_nan_inf;  // jit_kernel checks inside its instruction
  Executor(options, ops.registry).Run(*p->plan, p->scope);
}

void JitKernelKernel(ExecContext& ctx, JitRuntime& jit) {
  const auto obj = jit.cache().FindById(static_cast<uint64_t>(ctx.Attr<int64_t>("object_id")));
  if (!obj) ctx.Fail("compiled object ", ctx.Attr<int64_t>("object_id"), " is no longer cached");
  const size_t i = static_cast<size_t>(ctx.Attr<int64_t>("instruction"));
  const runtime::Instruction& ins = obj->program.instructions.at(i);
  std::vector<void*> data;
  // InputMeta: a cluster input read only for its shape arrives without data.
  for (size_t k = 0; k < ctx.InputCount("X"); ++k) data.push_back(const_cast<void*>(ctx.InputMeta("X", k).raw_data()));
  for (size_t k = 0; k < ctx.OutputCount("Out"); ++k) {
    const auto& info = obj->program.plan.buffers[ins.args[ins.num_inputs + k]];
    Tensor* t = ctx.Output("Out", k);
    if (t->use_count() > 1) t->Clear();
    t->Resize(info.dims);
    data.push_back(t->raw_mutable_data(info.dtype));
  }
  runtime::Runner::RunInstruction(
      obj->program, i, data, jit.launch().profiler(),
      AfterInstruction(*obj, jit.cache(), ctx.check_nan_inf(), jit.launch().fault_for_testing()));
}

// A dying input (the plan's donors) is donated when this var alone owns its
// buffer; otherwise the runner gives its temps a block of their own. The
// launch takes over the buffer of every input that dies in it and that its
// var alone holds: the var keeps its dims (shape-only) and the runner frees
// the buffer after its last use inside the launch.
void TakeDyingInputs(ExecContext& ctx, const runtime::BufferPlan& plan, LaunchServices& launch,
                     std::vector<bool>* donate, std::vector<std::shared_ptr<Allocation>>* owned) {
  const size_t n_in = ctx.InputCount("X");
  donate->assign(n_in, false);
  owned->assign(n_in, nullptr);
  for (const auto& b : plan.buffers) {
    if (b.role != runtime::BufferRole::kInput || !b.donatable) continue;
    const size_t i = static_cast<size_t>(b.io_index);
    Variable* var = ctx.InputVar("X", i);
    Tensor* t = var == nullptr ? nullptr : var->GetMutable();
    const bool take = t != nullptr && t->initialized() && t->use_count() == 1 && t->allocation()->owned();
    (*donate)[i] = take;
    if (take) {
      (*owned)[i] = t->allocation();
      t->ReleaseBuffer();
    }
    launch.Count(take ? LaunchEvent::kInputDonated : LaunchEvent::kInputKept);
  }
}

// Binds the outputs of a launch of `obj` (see the header): their data
// pointers, null for an output the runner allocates when it is first written
// (runtime mode) and for one handed out without data.
std::vector<void*> BindOutputs(ExecContext& ctx, const CompiledObject& obj, JitRuntime& jit) {
  std::vector<void*> outs(obj.output_names.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    Tensor* t = ctx.Output("Out", o);
    if (obj.output_shape_only[o]) {
      // Computed in the arena; later ops read only its dims.
      t->ShareExternalData(nullptr, obj.output_dtypes[o], obj.output_dims[o]);
      continue;
    }
    if (obj.output_alias[o] >= 0) {
      // In-place update of an input: donate its buffer when nobody else holds it.
      if (t->use_count() > 1) {
        Tensor fresh;
        fresh.CopyFrom(*t);
        *t = fresh;
        jit.launch().Count(LaunchEvent::kCopyProtected);
      } else {
        jit.launch().Count(LaunchEvent::kDonated);
      }
      outs[o] = t->raw_data();
      continue;
    }
    if (t->use_count() > 1) t->Clear();  // never write into a buffer someone shares
    t->Resize(obj.output_dims[o]);
    t->set_dtype(obj.output_dtypes[o]);
    // In runtime mode the runner asks for it when it is about to be written.
    if (jit.launch_mode() == LaunchMode::kExecutor) outs[o] = t->raw_mutable_data(obj.output_dtypes[o]);
  }
  return outs;
}

void RunCompiled(ExecContext& ctx, const CompiledObject& obj, const JitOps& ops, const std::vector<void*>& ins,
                 InstructionFault fault) {
  JitRuntime& jit = ops.jit;
  const std::vector<void*> outs = BindOutputs(ctx, obj, jit);
  if (jit.launch_mode() == LaunchMode::kExecutor) {
    RunThroughExecutor(obj, ins, outs, ctx.check_nan_inf(), ops);  // its jit_kernel ops apply the fault
    return;
  }
  auto allocate_output = [&ctx, &obj](int o) {
    return ctx.Output("Out", static_cast<size_t>(o))->raw_mutable_data(obj.output_dtypes[o]);
  };
  std::vector<bool> donate;
  std::vector<std::shared_ptr<Allocation>> owned;
  TakeDyingInputs(ctx, obj.program.plan, jit.launch(), &donate, &owned);
  runtime::Runner::Run(obj.program, ins, outs, donate, std::move(owned), allocate_output, jit.launch().profiler(),
                       AfterInstruction(obj, jit.cache(), ctx.check_nan_inf(), std::move(fault)));
  // An output no instruction writes (none today) still gets its buffer.
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!obj.output_shape_only[o] && !ctx.Output("Out", o)->initialized()) allocate_output(static_cast<int>(o));
  }
}

// An input that holds no data is named as the cluster's op that reads it
// reports it without the JIT, not as jit_launch's X.
[[noreturn]] void FailUnwritten(const JitSubgraph& sg, const std::string& cluster_name, const std::string& var) {
  const std::string cluster = " [op numbers count the ops of JIT cluster " + cluster_name + "]";
  for (int i = 0; i < sg.block.ops_size(); ++i) {
    for (const auto& slot : sg.block.ops(i).inputs()) {
      for (const auto& a : slot.args()) {
        if (a != var) continue;
        ThrowInvalidArgument(OpLabel(sg.block.ops(i), i), ": input ", slot.name(), " ('", var,
                             "') holds no data: it is read before any op writes it and was not fed (a parameter: run its startup program or load a checkpoint first)", cluster);
      }
    }
  }
  ThrowInvalidArgument("input '", var, "' of JIT cluster ", cluster_name, " holds no data");
}

void JitLaunchKernel(ExecContext& ctx, const JitOps& ops) {
  JitRuntime& jit = ops.jit;
  jit.launch().Count(LaunchEvent::kLaunch);
  const std::string& key = ctx.Attr<std::string>("compilation_key");
  ShapeSignature sig;
  const size_t n_in = ctx.InputCount("X");
  std::vector<void*> ins(n_in);
  const auto& shape_only = ctx.Attr<std::vector<std::string>>("shape_only_inputs");
  for (size_t i = 0; i < n_in; ++i) {
    // Inputs the cluster reads only for their shape may have no buffer (the
    // executor released it): they are bound as null.
    const bool meta = std::find(shape_only.begin(), shape_only.end(), ctx.InputName("X", i)) != shape_only.end();
    const Variable* var = ctx.InputVar("X", i);
    if (var == nullptr || !(meta ? var->Get().has_shape() : var->Get().initialized())) {
      FailUnwritten(jit.cache().GetSubgraph(key), jit.cache().ClusterName(key), ctx.InputName("X", i));
    }
    const Tensor& t = meta ? ctx.InputMeta("X", i) : ctx.Input("X", i);
    sig.inputs.push_back({t.dtype(), t.dims()});
    ins[i] = const_cast<void*>(t.raw_data());
  }
  const auto obj = jit.Compile(key, sig);
  if (!obj) {
    RunFallback(ctx, key, ops);
    return;
  }
  const size_t n_out = ctx.OutputCount("Out");
  if (n_out != obj->output_names.size()) {
    ctx.Fail("has ", n_out, " outputs, cluster ", key, " produces ", obj->output_names.size());
  }
  LaunchChecks checks = jit.launch().BeginLaunch(key);
  std::vector<Tensor> copies;
  if (checks.shadow) copies = CopyInputs(ctx);
  RunCompiled(ctx, *obj, ops, ins, std::move(checks.fault));
  if (checks.shadow) ShadowCheck(ctx, jit, *obj, copies, checks);
}

}  // namespace

void RegisterJitOps(OpRegistry& registry, JitRuntime& runtime) {
  if (registry.Find("jit_launch") != nullptr) return;
  OpInfo launch;
  launch.type = "jit_launch";
  launch.doc = "Runs a JIT cluster (compilation_key) through its compiled object";
  launch.inputs = {{"X", /*duplicable=*/true, /*dispensable=*/true}};
  launch.outputs = {{"Out", true, true}};
  launch.attrs = {{"compilation_key", AttrKind::kString, std::nullopt},
                  {"shape_only_inputs", AttrKind::kStrings, Attribute(std::vector<std::string>{})}};
  launch.no_need_buffer_vars = [](const proto::OpDesc& op) {
    for (const auto& a : op.attrs()) {
      if (a.name() == "shape_only_inputs") return std::vector<std::string>(a.strings().begin(), a.strings().end());
    }
    return std::vector<std::string>{};
  };
  const JitOps ops{runtime, registry, std::make_shared<FallbackOps>()};
  launch.reference_kernel = [ops](ExecContext& ctx) { JitLaunchKernel(ctx, ops); };
  registry.Add(std::move(launch));

  OpInfo kernel;
  kernel.type = "jit_kernel";
  kernel.doc = "One instruction of a compiled JIT cluster (executor launch mode)";
  kernel.inputs = {{"X", true, true}};
  kernel.outputs = {{"Out", true, true}};
  kernel.attrs = {{"object_id", AttrKind::kInt, std::nullopt}, {"instruction", AttrKind::kInt, std::nullopt}};
  kernel.reference_kernel = [&runtime](ExecContext& ctx) { JitKernelKernel(ctx, runtime); };
  registry.Add(std::move(kernel));
}

}  // namespace kiln::jit
