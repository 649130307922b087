#include "compiler/lowering/fused_attention.h"

#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kFusedAttentionStep;

// Without the ISA: lowering.txt (and its goldens) reads the same on any CPU;
// the kernel's own description names it.
std::string Describe(const AttentionParams& p, bool backward) {
  const AttentionShape& s = p.shape;
  return StrCat("kiln tiled attention ", backward ? "backward" : "forward", p.causal ? " (causal)" : "",
                p.compute == ComputeType::kBF16 ? " in bf16 (f32 accumulation)" : "", ", ", s.heads, " heads, ", s.sq,
                " queries x ", s.sk, " keys, head dims ", s.d, "/", s.dv);
}

class AttentionKernel final : public runtime::Kernel {
 public:
  AttentionKernel(std::string name, AttentionParams params, std::vector<bool> grads)
      : name_(std::move(name)), params_(params), grads_(std::move(grads)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    const bool bf16 = params_.compute == ComputeType::kBF16;
    return jit::Describe(params_, !grads_.empty()) + ", " + IsaName(params_.isa) +
           (bf16 ? std::string(" with ") + Bf16ProductsName(ResolveBf16Products(params_.bf16_products, params_.isa))
                 : "");
  }
  std::vector<std::string> fused_ops() const override {
    return {grads_.empty() ? "fused_attention" : "fused_attention_grad"};
  }
  void Run(const runtime::BufferView* args) const override {
    auto in = [args](int i) { return static_cast<const float*>(args[i].data); };
    if (grads_.empty()) {
      FusedAttentionForward(params_, in(0), in(1), in(2), static_cast<float*>(args[3].data),
                            static_cast<float*>(args[4].data));
      return;
    }
    AttentionGradArgs a;
    a.q = in(0), a.k = in(1), a.v = in(2), a.out = in(3), a.lse = in(4), a.dout = in(5);
    float** outs[3] = {&a.dq, &a.dk, &a.dv};
    int next = 6;
    for (int g = 0; g < 3; ++g) {
      if (grads_[g]) *outs[g] = static_cast<float*>(args[next++].data);
    }
    FusedAttentionBackward(params_, a);
  }

 private:
  std::string name_;
  AttentionParams params_;
  std::vector<bool> grads_;
};

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

std::string FusedAttentionUnit::Describe(const Cluster&) const { return jit::Describe(params_, o_.backward()); }

std::vector<EmittedKernel> FusedAttentionUnit::Emit(EmitContext& ctx) const {
  std::vector<bool> grads;
  if (o_.backward()) grads = {!o_.dq.empty(), !o_.dk.empty(), !o_.dv.empty()};
  EmittedKernel k;
  k.kernel = std::make_shared<AttentionKernel>(ctx.KernelName(o_.backward() ? "attention_grad" : "attention"),
                                               params_, grads);
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
