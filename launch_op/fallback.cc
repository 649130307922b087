#include "launch_op/fallback.h"

#include <algorithm>
#include <set>
#include <utility>

#include "compiler/kernels/attention/attention_kernels.h"
#include "framework/operator.h"

namespace kiln::jit {
namespace {

bool AllF32(ExecContext& ctx, std::initializer_list<const char*> slots) {
  return std::all_of(slots.begin(), slots.end(),
                     [&](const char* s) { return ctx.Input(s).dtype() == DataType::kFP32; });
}

// Q [..., Sq, D], K [..., Sk, D], V [..., Sk, Dv], as the op's shape
// inference checked them.
AttentionParams ParamsOf(ExecContext& ctx, Isa isa) {
  const Dims& q = ctx.Input("Q").dims();
  const Dims& k = ctx.Input("K").dims();
  const Dims& v = ctx.Input("V").dims();
  const size_t r = q.size();
  AttentionParams p;
  p.shape.heads = Numel(Dims(q.begin(), q.end() - 2));
  p.shape.sq = q[r - 2];
  p.shape.d = q[r - 1];
  p.shape.sk = k[r - 2];
  p.shape.dv = v[r - 1];
  p.scale = ctx.Attr<float>("scale");
  p.causal = ctx.Attr<bool>("causal");
  p.isa = isa;
  return p;
}

float* GradOrNull(ExecContext& ctx, const char* slot) {
  Tensor* t = ctx.OutputOrNull(slot);
  return t == nullptr ? nullptr : t->mutable_data<float>();
}

void UseTiledForward(OpInfo& info, Isa isa) {
  KernelFn reference = std::move(info.reference_kernel);
  info.reference_kernel = [reference, isa](ExecContext& ctx) {
    if (!AllF32(ctx, {"Q", "K", "V"})) return reference(ctx);
    FusedAttentionForward(ParamsOf(ctx, isa), ctx.Input("Q").data<float>(), ctx.Input("K").data<float>(),
                          ctx.Input("V").data<float>(), ctx.Output("Out")->mutable_data<float>(),
                          ctx.Output("LSE")->mutable_data<float>());
  };
}

void UseTiledBackward(OpInfo& info, Isa isa) {
  KernelFn reference = std::move(info.reference_kernel);
  info.reference_kernel = [reference, isa](ExecContext& ctx) {
    // Without dOut every wanted gradient is zero: the reference fills them.
    if (ctx.InputOrNull("Out@GRAD") == nullptr || !AllF32(ctx, {"Q", "K", "V", "Out", "LSE", "Out@GRAD"})) {
      return reference(ctx);
    }
    AttentionGradArgs a;
    a.q = ctx.Input("Q").data<float>();
    a.k = ctx.Input("K").data<float>();
    a.v = ctx.Input("V").data<float>();
    a.out = ctx.Input("Out").data<float>();
    a.lse = ctx.Input("LSE").data<float>();
    a.dout = ctx.Input("Out@GRAD").data<float>();
    a.dq = GradOrNull(ctx, "Q@GRAD");
    a.dk = GradOrNull(ctx, "K@GRAD");
    a.dv = GradOrNull(ctx, "V@GRAD");
    FusedAttentionBackward(ParamsOf(ctx, isa), a);
  };
}

}  // namespace

std::unique_ptr<OpRegistry> MakeFallbackRegistry(const OpRegistry& base, Isa isa) {
  auto registry = std::make_unique<OpRegistry>();
  for (const std::string& type : base.Types()) {
    // A cluster never holds the JIT's own ops, and their kernels hold the
    // launch op's state, which owns this registry: copying them would make
    // a cycle of owners that is never freed.
    if (type == "jit_launch" || type == "jit_kernel") continue;
    registry->Add(base.Get(type));
  }
  if (OpInfo* fwd = registry->FindMutable("fused_attention")) UseTiledForward(*fwd, isa);
  if (OpInfo* grad = registry->FindMutable("fused_attention_grad")) UseTiledBackward(*grad, isa);
  return registry;
}

namespace {

std::unique_ptr<ExecutionPlan> PrepareClusterOps(const JitSubgraph& sg, const Executor& exec) {
  proto::ProgramDesc program;
  *program.add_blocks() = sg.block;
  return exec.Prepare(program, 0, std::set<std::string>(sg.outputs.begin(), sg.outputs.end()));
}

}  // namespace

std::unique_ptr<Scope> RunClusterOps(const JitSubgraph& sg, const std::vector<Tensor>& inputs, bool copy_inputs,
                                     const Executor& exec, ExecutionPlan* plan) {
  auto local = std::make_unique<Scope>();
  for (size_t i = 0; i < sg.inputs.size(); ++i) {
    Tensor* t = local->Var(sg.inputs[i])->GetMutable();
    if (copy_inputs) {
      t->CopyFrom(inputs[i]);
    } else {
      *t = inputs[i];
    }
  }
  std::unique_ptr<ExecutionPlan> own;
  if (plan == nullptr) {
    own = PrepareClusterOps(sg, exec);
    plan = own.get();
  }
  exec.Run(*plan, *local);
  return local;
}

std::unique_ptr<Scope> FallbackOps::Run(const std::string& key, const JitSubgraph& sg,
                                        const std::vector<Tensor>& inputs, const ExecutorOptions& options,
                                        const OpRegistry& base, const JitRuntime& jit) {
  std::call_once(once_, [&] { registry_ = MakeFallbackRegistry(base, jit.options().compile.isa); });
  const Executor exec(options, *registry_);
  std::shared_ptr<CachedPlan> cached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<CachedPlan>& slot = plans_[key];
    if (!slot) slot = std::make_shared<CachedPlan>();
    cached = slot;
  }
  std::unique_lock<std::mutex> in_use(cached->mu, std::try_to_lock);
  if (!in_use.owns_lock()) return RunClusterOps(sg, inputs, /*copy_inputs=*/false, exec);
  if (!cached->plan) cached->plan = PrepareClusterOps(sg, exec);
  return RunClusterOps(sg, inputs, /*copy_inputs=*/false, exec, cached->plan.get());
}

}  // namespace kiln::jit
