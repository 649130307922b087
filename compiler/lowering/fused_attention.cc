#include "compiler/lowering/fused_attention.h"

#include "compiler/kernels/attention/attention_runtime_kernel.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kFusedAttentionStep;

// The kernel's parameters for op `i`, from Q's, K's and V's dims.
AttentionParams ParamsOf(const Cluster& c, int i) {
  const Dims q = c.dims(c.In(i, "Q")), k = c.dims(c.In(i, "K")), v = c.dims(c.In(i, "V"));
  AttentionParams p;
  const size_t r = q.size();
  p.shape.heads = Numel(Dims(q.begin(), q.end() - 2));
  p.shape.sq = q[r - 2];
  p.shape.d = q[r - 1];
  p.shape.sk = k[r - 2];
  p.shape.dv = v[r - 1];
  p.scale = c.Attr<float>(i, "scale");
  p.causal = c.Attr<bool>(i, "causal");
  p.isa = c.options().isa;
  // Under --amp bf16 the products run in bf16 only where that is faster
  // than f32 (AMX tiles); elsewhere the kernel stays f32.
  const bool bf16 = c.options().amp_compute == ComputeType::kBF16 && Bf16AttentionPays(p.isa);
  p.compute = bf16 ? ComputeType::kBF16 : ComputeType::kF32;
  return p;
}

// Every one of `vars` named (none @EMPTY@) and f32.
bool AllF32(const Cluster& c, std::initializer_list<const std::string*> vars) {
  for (const std::string* v : vars) {
    if (v->empty() || !c.IsF32(*v)) return false;
  }
  return true;
}

std::unique_ptr<Unit> Match(const Cluster& c, int i) {
  FusedAttentionUnit::Operands o{c.In(i, "Q"), c.In(i, "K"), c.In(i, "V"), "", "", "", "", "", ""};
  if (c.type(i) == "fused_attention") {
    o.out = c.Out(i, "Out");
    o.lse = c.Out(i, "LSE");
    if (!AllF32(c, {&o.q, &o.k, &o.v, &o.out, &o.lse})) return nullptr;
    return std::make_unique<FusedAttentionUnit>(kStep, i, o, ParamsOf(c, i));
  }
  if (c.type(i) != "fused_attention_grad") return nullptr;
  o.out = c.In(i, "Out");
  o.lse = c.In(i, "LSE");
  o.dout = c.In(i, GradVarName("Out"));
  if (!AllF32(c, {&o.q, &o.k, &o.v, &o.out, &o.lse, &o.dout})) return nullptr;
  o.dq = c.Out(i, GradVarName("Q"));
  o.dk = c.Out(i, GradVarName("K"));
  o.dv = c.Out(i, GradVarName("V"));
  for (const std::string* g : {&o.dq, &o.dk, &o.dv}) {
    if (!g->empty() && !c.IsF32(*g)) return nullptr;
  }
  if (o.dq.empty() && o.dk.empty() && o.dv.empty()) return nullptr;  // no gradient wanted
  return std::make_unique<FusedAttentionUnit>(kStep, i, o, ParamsOf(c, i));
}

std::set<std::string> AsSet(const std::vector<std::string>& vars) { return {vars.begin(), vars.end()}; }

std::vector<std::string> Inputs(const FusedAttentionUnit::Operands& o) {
  if (!o.backward()) return {o.q, o.k, o.v};
  return {o.q, o.k, o.v, o.out, o.lse, o.dout};
}

std::vector<std::string> Outputs(const FusedAttentionUnit::Operands& o) {
  if (!o.backward()) return {o.out, o.lse};
  std::vector<std::string> out;
  for (const std::string* g : {&o.dq, &o.dk, &o.dv}) {
    if (!g->empty()) out.push_back(*g);
  }
  return out;
}

}  // namespace

FusedAttentionUnit::FusedAttentionUnit(const std::string& step, int op, Operands operands, AttentionParams params)
    : Unit(step, {op}, AsSet(Inputs(operands)), AsSet(Outputs(operands))),
      o_(std::move(operands)),
      params_(params) {}

std::string FusedAttentionUnit::Describe(const Cluster&) const { return DescribeAttention(params_, o_.backward()); }

std::vector<EmittedKernel> FusedAttentionUnit::Emit(EmitContext& ctx) const {
  std::vector<bool> grads;
  if (o_.backward()) grads = {!o_.dq.empty(), !o_.dk.empty(), !o_.dv.empty()};
  EmittedKernel k;
  k.kernel = MakeAttentionKernel(ctx.KernelName(o_.backward() ? "attention_grad" : "attention"), params_, grads);
  k.args = Inputs(o_);
  k.num_inputs = static_cast<int>(k.args.size());
  for (std::string& v : Outputs(o_)) k.args.push_back(std::move(v));
  return {k};
}

Units LowerFusedAttention(const Cluster& c, Units units, StepTrace& trace) {
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || c.Excluded(kStep, i)) continue;
    std::unique_ptr<Unit> u = Match(c, i);
    if (u == nullptr) continue;
    trace.Match(OpList(c, {i}) + " -> " + u->Describe(c));
    unit = std::move(u);
  }
  return units;
}

}  // namespace kiln::jit
