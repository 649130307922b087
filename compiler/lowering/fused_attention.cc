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

// Every arg named (none @EMPTY@) and f32; empty when not.
std::vector<std::string> Args(const Cluster& c, int i, const std::vector<std::string>& in_slots,
                              const std::vector<std::string>& out_slots) {
  std::vector<std::string> args;
  for (const auto& s : in_slots) args.push_back(c.In(i, s));
  for (const auto& s : out_slots) args.push_back(c.Out(i, s));
  for (const auto& a : args) {
    if (a.empty() || !c.IsF32(a)) return {};
  }
  return args;
}

std::unique_ptr<Unit> Match(const Cluster& c, int i) {
  if (c.type(i) == "fused_attention") {
    std::vector<std::string> args = Args(c, i, {"Q", "K", "V"}, {"Out", "LSE"});
    if (args.empty()) return nullptr;
    return std::make_unique<FusedAttentionUnit>(kStep, i, std::move(args), 3, ParamsOf(c, i), std::vector<bool>{});
  }
  if (c.type(i) != "fused_attention_grad") return nullptr;
  std::vector<std::string> args = Args(c, i, {"Q", "K", "V", "Out", "LSE", GradVarName("Out")}, {});
  if (args.empty()) return nullptr;
  std::vector<bool> grads;
  for (const char* slot : {"Q", "K", "V"}) {
    const std::string g = c.Out(i, GradVarName(slot));
    grads.push_back(!g.empty());
    if (g.empty()) continue;
    if (!c.IsF32(g)) return nullptr;
    args.push_back(g);
  }
  if (args.size() == 6) return nullptr;  // no gradient wanted
  return std::make_unique<FusedAttentionUnit>(kStep, i, std::move(args), 6, ParamsOf(c, i), std::move(grads));
}

}  // namespace

FusedAttentionUnit::FusedAttentionUnit(const std::string& step, int op, std::vector<std::string> args, int num_inputs,
                                       AttentionParams params, std::vector<bool> grads)
    : Unit(step, {op}, {args.begin(), args.begin() + num_inputs}, {args.begin() + num_inputs, args.end()}),
      args_(std::move(args)),
      num_inputs_(num_inputs),
      params_(params),
      grads_(std::move(grads)) {}

std::string FusedAttentionUnit::Describe(const Cluster&) const { return jit::Describe(params_, !grads_.empty()); }

std::vector<EmittedKernel> FusedAttentionUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<AttentionKernel>(ctx.KernelName(grads_.empty() ? "attention" : "attention_grad"),
                                               params_, grads_);
  k.args = args_;
  k.num_inputs = num_inputs_;
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
