#include "compiler/ew_lowering.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "compiler/ew_codegen.h"
#include "compiler/gemv.h"
#include "compiler/onednn_lowering.h"
#include "framework/shape_util.h"

namespace kiln::jit {
namespace {

using compiler::EwProgram;
using compiler::EwValue;

// One piece of an op that computes over one iteration space. Most ops are one
// fragment; adam is two (the parameter-sized update and the [1]-sized
// beta-power update).
struct Fragment {
  int op_index = -1;
  Dims iter;
  std::vector<std::pair<std::string, Dims>> reads;   // var, dims padded to iter's rank
  std::vector<std::pair<std::string, Dims>> writes;  // var, padded dims (1 where iter > 1: a sum)
  // Emits the fragment: in[k] is the value of reads[k]; returns one value per write.
  std::function<std::vector<EwValue>(EwProgram&, const std::vector<EwValue>& in)> emit;
};

Dims Ones(size_t rank) { return Dims(rank, 1); }

class OpView {
 public:
  OpView(const proto::BlockDesc& block, const proto::OpDesc& op, const OpInfo& info, int index)
      : block_(block), op_(op), attrs_(ResolveAttrs(info, op, index)) {}
  // The single arg of a slot, or "" when absent/@EMPTY@.
  std::string In(const std::string& slot) const { return One(InputArgs(op_, slot)); }
  std::string Out(const std::string& slot) const { return One(OutputArgs(op_, slot)); }
  Dims DimsOf(const std::string& var) const { return VarDims(*FindVarDesc(block_, var)); }
  bool IsF32(const std::string& var) const { return FindVarDesc(block_, var)->dtype() == proto::FP32; }
  template <typename T>
  const T& Attr(const std::string& name) const { return std::get<T>(attrs_.at(name)); }

 private:
  static std::string One(const std::vector<std::string>& args) {
    return args.size() == 1 && args[0] != kEmptyVarName ? args[0] : "";
  }
  const proto::BlockDesc& block_;
  const proto::OpDesc& op_;
  AttrMap attrs_;
};

// The fragments of one op, or none when it is not lowered to generated code.
std::vector<Fragment> FragmentsOf(const proto::BlockDesc& block, int index, const OpRegistry& registry) {
  const proto::OpDesc& op = block.ops(index);
  const OpInfo& info = registry.Get(op.type());
  if (info.jit != JitLowering::kElementwise && info.jit != JitLowering::kOptimizer) return {};
  for (const auto& a : AllInputArgs(op)) {
    if (a != kEmptyVarName && FindVarDesc(block, a)->dtype() != proto::FP32) return {};
  }
  for (const auto& a : AllOutputArgs(op)) {
    if (a != kEmptyVarName && FindVarDesc(block, a)->dtype() != proto::FP32) return {};
  }
  const OpView v(block, op, info, index);
  const std::string& t = op.type();
  Fragment f;
  f.op_index = index;
  auto full = [&](const std::string& var) { return std::make_pair(var, v.DimsOf(var)); };
  auto scalar = [&](const std::string& var, size_t rank) { return std::make_pair(var, Ones(rank)); };

  // Binary elementwise ops and their grads: Y broadcasts into X.
  static const std::set<std::string> kBinary = {"elementwise_add", "elementwise_sub", "elementwise_mul",
                                                "elementwise_div"};
  const std::string base = t.size() > 5 && t.compare(t.size() - 5, 5, "_grad") == 0 ? t.substr(0, t.size() - 5) : t;
  if (kBinary.count(base)) {
    // Grads of add/sub take no X (their shape is dOut's).
    const std::string x = v.In("X"), y = v.In("Y");
    const std::string shape_var = t == base ? x : v.In("Out@GRAD");
    if (shape_var.empty() || y.empty()) return {};
    const Dims xd = v.DimsOf(shape_var);
    const Dims yd = BroadcastYDims(xd, v.DimsOf(y), v.Attr<int64_t>("axis"), op.type());
    f.iter = xd;
    const char kind = base[12];  // a(dd) s(ub) m(ul) d(iv)
    if (t == base) {
      f.reads = {full(x), {y, yd}};
      f.writes = {full(v.Out("Out"))};
      f.emit = [kind](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
        switch (kind) {
          case 'a': return {p.Add(in[0], in[1])};
          case 's': return {p.Sub(in[0], in[1])};
          case 'm': return {p.Mul(in[0], in[1])};
          default: return {p.Div(in[0], in[1])};
        }
      };
      return {f};
    }
    const std::string dout = v.In("Out@GRAD"), dx = v.Out("X@GRAD"), dy = v.Out("Y@GRAD");
    if (dout.empty() || (dx.empty() && dy.empty())) return {};
    // add/sub need only dOut: not reading X keeps it (often a matmul output)
    // from having to exist at all.
    const bool values = kind == 'm' || kind == 'd';
    if (values && x.empty()) return {};
    f.reads = {full(dout)};
    if (values) {
      f.reads.push_back(full(x));
      f.reads.emplace_back(y, yd);
    }
    if (!dx.empty()) f.writes.push_back(full(dx));
    if (!dy.empty()) f.writes.emplace_back(dy, yd);
    const bool want_dx = !dx.empty(), want_dy = !dy.empty();
    f.emit = [kind, want_dx, want_dy](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
      const EwValue g = in[0];
      const EwValue xv = in.size() > 1 ? in[1] : -1, yv = in.size() > 2 ? in[2] : -1;
      EwValue gx = g, gy = g;
      switch (kind) {
        case 'a': break;
        case 's': gy = p.Neg(g); break;
        case 'm':
          gx = p.Mul(g, yv);
          gy = p.Mul(g, xv);
          break;
        default:  // d(x/y)/dy = -x/y^2
          gx = p.Div(g, yv);
          gy = p.Neg(p.Div(p.Mul(g, xv), p.Mul(yv, yv)));
          break;
      }
      std::vector<EwValue> out;
      if (want_dx) out.push_back(gx);
      if (want_dy) out.push_back(gy);
      return out;
    };
    return {f};
  }

  // Unary activations: forward reads X; grads read Out (or X for gelu).
  static const std::set<std::string> kUnary = {"relu", "tanh", "sigmoid", "exp", "gelu", "scale"};
  if (kUnary.count(base)) {
    if (t == base) {
      const std::string x = v.In("X");
      f.iter = v.DimsOf(x);
      f.reads = {full(x)};
      f.writes = {full(v.Out("Out"))};
      const bool approximate = base == "gelu" && v.Attr<bool>("approximate");
      float scale = 1.f, bias = 0.f;
      bool after = true;
      if (base == "scale") {
        scale = v.Attr<float>("scale");
        bias = v.Attr<float>("bias");
        after = v.Attr<bool>("bias_after_scale");
      }
      f.emit = [base, approximate, scale, bias, after](EwProgram& p, const std::vector<EwValue>& in)
          -> std::vector<EwValue> {
        const EwValue x = in[0];
        if (base == "relu") return {p.Relu(x)};
        if (base == "tanh") return {p.Tanh(x)};
        if (base == "sigmoid") return {p.Sigmoid(x)};
        if (base == "exp") return {p.Exp(x)};
        if (base == "gelu") return {approximate ? p.GeluTanh(x) : p.Gelu(x)};
        if (after) return {p.Fma(x, p.Const(scale), p.Const(bias))};
        return {p.Mul(p.Add(x, p.Const(bias)), p.Const(scale))};
      };
      return {f};
    }
    const std::string dout = v.In("Out@GRAD"), dx = v.Out("X@GRAD");
    if (dout.empty() || dx.empty()) return {};
    f.iter = v.DimsOf(dout);
    const std::string src = base == "gelu" ? v.In("X") : base == "scale" ? "" : v.In("Out");
    if (base != "scale" && src.empty()) return {};
    f.reads = {full(dout)};
    if (!src.empty()) f.reads.push_back(full(src));
    f.writes = {full(dx)};
    const bool approximate = base == "gelu" && v.Attr<bool>("approximate");
    const float scale = base == "scale" ? v.Attr<float>("scale") : 1.f;
    f.emit = [base, approximate, scale](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
      const EwValue g = in[0];
      if (base == "scale") return {p.Mul(g, p.Const(scale))};
      const EwValue s = in[1];  // Out, or X for gelu
      if (base == "relu") return {p.SelectGtZero(s, g)};
      if (base == "tanh") return {p.Mul(g, p.Sub(p.Const(1.f), p.Mul(s, s)))};
      if (base == "sigmoid") return {p.Mul(p.Mul(g, s), p.Sub(p.Const(1.f), s))};
      if (base == "exp") return {p.Mul(g, s)};
      return {approximate ? p.GeluTanhGrad(s, g) : p.GeluGrad(s, g)};
    };
    return {f};
  }

  // Optimizers: updates in place; LearningRate and beta powers are [1] scalars.
  if (t == "sgd") {
    const std::string param = v.In("Param");
    f.iter = v.DimsOf(param);
    const size_t r = f.iter.size();
    f.reads = {full(param), full(v.In("Grad")), scalar(v.In("LearningRate"), r)};
    f.writes = {full(v.Out("ParamOut"))};
    f.emit = [](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
      return {p.Sub(in[0], p.Mul(in[2], in[1]))};
    };
    return {f};
  }
  if (t == "momentum") {
    const std::string param = v.In("Param");
    f.iter = v.DimsOf(param);
    const size_t r = f.iter.size();
    f.reads = {full(param), full(v.In("Grad")), full(v.In("Velocity")), scalar(v.In("LearningRate"), r)};
    f.writes = {full(v.Out("ParamOut")), full(v.Out("VelocityOut"))};
    const float mu = v.Attr<float>("mu");
    const bool nesterov = v.Attr<bool>("use_nesterov");
    f.emit = [mu, nesterov](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
      const EwValue vel = p.Fma(p.Const(mu), in[2], in[1]);
      const EwValue step = nesterov ? p.Fma(p.Const(mu), vel, in[1]) : vel;
      return {p.Sub(in[0], p.Mul(in[3], step)), vel};
    };
    return {f};
  }
  if (t == "adam") {
    const std::string param = v.In("Param");
    f.iter = v.DimsOf(param);
    const size_t r = f.iter.size();
    const std::string b1p = v.In("Beta1Pow"), b2p = v.In("Beta2Pow");
    f.reads = {full(param), full(v.In("Grad")), full(v.In("Moment1")), full(v.In("Moment2")),
               scalar(v.In("LearningRate"), r), scalar(b1p, r), scalar(b2p, r)};
    f.writes = {full(v.Out("ParamOut")), full(v.Out("Moment1Out")), full(v.Out("Moment2Out"))};
    const float beta1 = v.Attr<float>("beta1"), beta2 = v.Attr<float>("beta2"), eps = v.Attr<float>("epsilon");
    f.emit = [beta1, beta2, eps](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
      const EwValue g = in[1];
      const EwValue m = p.Fma(p.Const(beta1), in[2], p.Mul(p.Const(1.f - beta1), g));
      const EwValue vv = p.Fma(p.Const(beta2), in[3], p.Mul(p.Const(1.f - beta2), p.Mul(g, g)));
      const EwValue c2 = p.Sqrt(p.Sub(p.Const(1.f), in[6]));  // sqrt(1 - beta2^t)
      const EwValue lr_t = p.Div(p.Mul(in[4], c2), p.Sub(p.Const(1.f), in[5]));
      const EwValue denom = p.Fma(p.Const(eps), c2, p.Sqrt(vv));
      return {p.Sub(in[0], p.Div(p.Mul(lr_t, m), denom)), m, vv};
    };
    Fragment pows;
    pows.op_index = index;
    pows.iter = v.DimsOf(b1p);
    pows.reads = {full(b1p), full(b2p)};
    pows.writes = {full(v.Out("Beta1PowOut")), full(v.Out("Beta2PowOut"))};
    pows.emit = [beta1, beta2](EwProgram& p, const std::vector<EwValue>& in) -> std::vector<EwValue> {
      return {p.Mul(in[0], p.Const(beta1)), p.Mul(in[1], p.Const(beta2))};
    };
    return {f, pows};
  }
  return {};
}

// A unit under construction: a group of fragments, one framework op, or a
// oneDNN matmul with its bias add and activation folded in.
struct Unit {
  bool group = false;
  int op_index = -1;  // framework op
  bool fused_matmul = false;
  FusedMatmulSpec matmul;
  std::vector<std::string> matmul_args;  // X, W[, bias], Out
  std::vector<int> matmul_ops;
  bool matmul_sgd = false;               // W -= lr * X^T dY (matmul_args: X, dY, lr, W, [W_old,] W)
  bool keep_old = false;                 // matmul_sgd copies W to W_old first
  std::vector<proto::VarDesc> new_vars;
  bool gemv_grad_sgd = false;            // batch 1: (dX and) the step (matmul_args: X, dY, lr, W, [dX,] W)
  std::shared_ptr<const runtime::Kernel> custom;  // a kiln kernel for one op (matmul_args: inputs then outputs)
  int custom_inputs = 0;
  Dims x_dims, w_dims;
  std::shared_ptr<const proto::OpDesc> op_override;  // framework op variant
  Dims iter;
  std::vector<Fragment> fragments;
  std::set<std::string> reads, writes;
  std::map<std::string, Dims> full_defined;  // vars this group computes over its whole space
};

bool IsFull(const Dims& padded, const Dims& iter) { return padded == iter; }

// Can fragment `f` join group `g` (at position gi) without breaking a
// dependency? Its inputs must exist at the group's position, and nothing
// after that position may touch what it writes.
bool CanJoin(const Fragment& f, const std::vector<Unit>& units, size_t gi, const std::set<std::string>& external) {
  const Unit& g = units[gi];
  if (g.iter != f.iter) return false;
  for (const auto& [var, padded] : f.reads) {
    // A later unit that writes var (an in-place op) produces the value f must
    // read, even when the group holds an older value of var in a register.
    for (size_t u = gi + 1; u < units.size(); ++u) {
      if (units[u].writes.count(var)) return false;
    }
    if (g.full_defined.count(var) && IsFull(padded, f.iter)) continue;  // in a register
    if (g.writes.count(var)) return false;  // written here but needed from memory
    bool produced_before = external.count(var) > 0;
    for (size_t u = 0; u < gi && !produced_before; ++u) produced_before = units[u].writes.count(var) > 0;
    if (!produced_before) {
      // Written by nobody before the group: only fine if nobody writes it at all yet.
      for (size_t u = gi + 1; u < units.size(); ++u) {
        if (units[u].writes.count(var)) return false;
      }
    }
  }
  for (const auto& [var, padded] : f.writes) {
    (void)padded;
    for (size_t u = gi + 1; u < units.size(); ++u) {
      if (units[u].reads.count(var) || units[u].writes.count(var)) return false;
    }
  }
  return true;
}

void AddFragment(Unit& g, const Fragment& f) {
  for (const auto& [var, padded] : f.reads) g.reads.insert(var);
  for (const auto& [var, padded] : f.writes) {
    g.writes.insert(var);
    if (IsFull(padded, f.iter)) {
      g.full_defined[var] = padded;
    } else {
      g.full_defined.erase(var);
    }
  }
  g.fragments.push_back(f);
}

// Class wrapping a generated kernel as a runtime::Kernel.
class EwRuntimeKernel final : public runtime::Kernel {
 public:
  EwRuntimeKernel(std::shared_ptr<compiler::FusedElementwiseKernel> k, int num_inputs, std::string describe)
      : kernel_(std::move(k)), num_inputs_(num_inputs), describe_(std::move(describe)) {}
  const std::string& name() const override { return kernel_->name(); }
  std::string Describe() const override { return describe_; }
  void Run(const runtime::BufferView* args) const override {
    const float* in[64];
    float* out[64];
    const int n_out = static_cast<int>(kernel_->layout().outputs.size());
    for (int i = 0; i < num_inputs_; ++i) in[i] = static_cast<const float*>(args[i].data);
    for (int o = 0; o < n_out; ++o) out[o] = static_cast<float*>(args[num_inputs_ + o].data);
    kernel_->Run(in, out);
  }
  const compiler::FusedElementwiseKernel& kernel() const { return *kernel_; }
  const uint8_t* code() const override { return kernel_->code(); }
  size_t code_size() const override { return kernel_->code_size(); }
  std::vector<std::string> fused_ops() const override { return kernel_->fused_ops(); }
  std::string DumpDetail() const override { return kernel_->ToString(); }
  // Output j over input k: same strides, neither broadcast nor reduced, and
  // every load of k comes before the first store to j in the program.
  std::vector<std::pair<int, int>> InplacePairs() const override {
    const compiler::EwLayout& l = kernel_->layout();
    auto full = [&l](const compiler::EwOperand& op) {
      for (int d = 0; d < l.rank; ++d) {
        if (l.dims[d] > 1 && op.strides[d] == 0) return false;
      }
      return true;
    };
    const auto& instrs = kernel_->program().instrs();
    std::vector<std::pair<int, int>> pairs;
    for (int k = 0; k < static_cast<int>(l.inputs.size()); ++k) {
      if (!full(l.inputs[k])) continue;
      int last_load = -1;
      for (int i = 0; i < static_cast<int>(instrs.size()); ++i) {
        if (instrs[i].op == compiler::EwOp::kLoad && instrs[i].operand == k) last_load = i;
      }
      for (int j = 0; j < static_cast<int>(l.outputs.size()); ++j) {
        if (!full(l.outputs[j]) || l.outputs[j].strides != l.inputs[k].strides) continue;
        int first_store = static_cast<int>(instrs.size());
        for (int i = 0; i < static_cast<int>(instrs.size()); ++i) {
          if (instrs[i].op == compiler::EwOp::kStore && instrs[i].operand == j) {
            first_store = i;
            break;
          }
        }
        if (last_load < first_store) pairs.emplace_back(k, j);
      }
    }
    return pairs;
  }

 private:
  std::shared_ptr<compiler::FusedElementwiseKernel> kernel_;
  int num_inputs_;
  std::string describe_;
};

// Builds the generated kernel of a group. `stored` decides which written vars
// leave the kernel.
LoweredUnit BuildGroupKernel(const Unit& g, const std::function<bool(const std::string&)>& stored,
                             const CompileOptions& options, const proto::BlockDesc& block, int serial) {
  EwProgram program;
  std::vector<std::pair<std::string, Dims>> inputs;  // var, padded
  std::map<std::pair<std::string, Dims>, EwValue> loaded;
  std::map<std::string, std::pair<EwValue, Dims>> current;  // latest value of a var in this group
  std::vector<std::string> op_types;
  LoweredUnit unit;
  for (const Fragment& f : g.fragments) {
    std::vector<EwValue> in;
    for (const auto& rd : f.reads) {
      auto cur = current.find(rd.first);
      if (cur != current.end() && cur->second.second == rd.second && IsFull(rd.second, g.iter)) {
        in.push_back(cur->second.first);
        continue;
      }
      auto it = loaded.find(rd);
      if (it == loaded.end()) {
        it = loaded.emplace(rd, program.Load(static_cast<int>(inputs.size()))).first;
        inputs.push_back(rd);
      }
      in.push_back(it->second);
    }
    const std::vector<EwValue> out = f.emit(program, in);
    KILN_CHECK(out.size() == f.writes.size());
    for (size_t k = 0; k < out.size(); ++k) current[f.writes[k].first] = {out[k], f.writes[k].second};
    const std::string& type = block.ops(f.op_index).type();
    if (std::find(unit.fused_ops.begin(), unit.fused_ops.end(), f.op_index) == unit.fused_ops.end()) {
      unit.fused_ops.push_back(f.op_index);
      op_types.push_back(type);
    }
  }
  std::vector<std::pair<std::string, Dims>> outputs;
  for (const auto& [var, value] : current) {
    if (!stored(var)) continue;
    program.Store(static_cast<int>(outputs.size()), value.first);
    outputs.emplace_back(var, value.second);
  }
  if (outputs.empty()) ThrowInvalidArgument("elementwise group computes nothing that is used");
  std::vector<Dims> in_dims, out_dims;
  for (const auto& i : inputs) in_dims.push_back(i.second);
  for (const auto& o : outputs) out_dims.push_back(o.second);
  compiler::EwLayout layout = compiler::CollapseLayout(g.iter, in_dims, out_dims);
  const compiler::JitIsa isa = options.isa == Isa::kAvx512 ? compiler::JitIsa::kAvx512 : compiler::JitIsa::kAvx2;
  auto kernel = std::make_shared<compiler::FusedElementwiseKernel>("ew_" + std::to_string(serial), program, layout,
                                                                    isa);
  kernel->set_fused_ops(op_types);
  kernel->Create();
  std::string describe = std::string("generated ") + compiler::JitIsaName(isa) + " kernel, " +
                         std::to_string(program.size()) + " instrs over " + layout.ToString() + " fusing";
  for (const auto& ty : op_types) describe += " " + ty;
  unit.kernel = std::make_shared<EwRuntimeKernel>(kernel, static_cast<int>(inputs.size()), describe);
  for (const auto& i : inputs) unit.arg_names.push_back(i.first);
  unit.num_inputs = static_cast<int>(inputs.size());
  for (const auto& o : outputs) unit.arg_names.push_back(o.first);
  return unit;
}

// Puts a fragment into the first group it can join, else a new group.
void PlaceFragment(const Fragment& f, std::vector<Unit>* units, const std::set<std::string>& external) {
  for (size_t gi = 0; gi < units->size(); ++gi) {
    if ((*units)[gi].group && CanJoin(f, *units, gi, external)) {
      AddFragment((*units)[gi], f);
      return;
    }
  }
  Unit g;
  g.group = true;
  g.iter = f.iter;
  AddFragment(g, f);
  units->push_back(std::move(g));
}

// A fragment that updates state in place which no later op reads or writes,
// and whose inputs no later op writes, may run at the end of the cluster.
bool Deferrable(const proto::BlockDesc& block, int i, const Fragment& f,
                const std::vector<std::set<std::string>>& reads) {
  for (const auto& w : f.writes) {
    bool in_place = false;
    for (const auto& r : f.reads) in_place |= r.first == w.first;
    if (!in_place) return false;
  }
  for (int j = i + 1; j < block.ops_size(); ++j) {
    for (const auto& w : f.writes) {
      if (reads[j].count(w.first)) return false;
    }
    for (const auto& a : AllOutputArgs(block.ops(j))) {
      for (const auto& r : f.reads) {
        if (r.first == a) return false;
      }
    }
  }
  return true;
}

// The vars an op really reads: a lowered op's fragments may need fewer than
// its slots name (elementwise_add_grad needs only dOut).
std::set<std::string> NeededReads(const proto::BlockDesc& block, int i, const std::vector<Fragment>& frags) {
  std::set<std::string> reads;
  if (frags.empty()) {
    for (const auto& a : AllInputArgs(block.ops(i))) {
      if (a != kEmptyVarName) reads.insert(a);
    }
    return reads;
  }
  for (const auto& f : frags) {
    for (const auto& r : f.reads) reads.insert(r.first);
  }
  return reads;
}

// matmul -> elementwise_add(bias [N]) [-> relu | gelu] as one oneDNN matmul
// with bias and an eltwise post-op, when the intermediate results are needed
// by nothing else. Returns the op indices folded in (first is the matmul).
bool MatchFusedMatmul(const proto::BlockDesc& block, int i, const std::vector<std::set<std::string>>& reads,
                      const std::set<std::string>& cluster_outputs, const std::set<std::string>& external,
                      const OpRegistry& registry, Unit* unit) {
  const proto::OpDesc& mm = block.ops(i);
  if (mm.type() != "matmul") return false;
  const OpView v(block, mm, registry.Get("matmul"), i);
  const std::string x = v.In("X"), w = v.In("Y"), out = v.Out("Out");
  if (x.empty() || w.empty() || out.empty() || !v.IsF32(x) || !v.IsF32(w)) return false;
  if (v.Attr<bool>("transpose_X")) return false;
  const Dims xd = v.DimsOf(x), wd = v.DimsOf(w);
  if (xd.size() < 2 || wd.size() != 2) return false;
  auto consumers = [&](const std::string& var) {
    std::vector<int> c;
    for (int j = 0; j < block.ops_size(); ++j) {
      if (j != i && reads[j].count(var)) c.push_back(j);
    }
    return c;
  };
  auto writers_in = [&](const std::string& var, int lo, int hi) {
    for (int j = lo; j <= hi; ++j) {
      for (const auto& a : AllOutputArgs(block.ops(j))) {
        if (a == var && j != i) return true;
      }
    }
    return false;
  };
  FusedMatmulSpec spec;
  spec.x_dims = xd;
  spec.w_dims = wd;
  spec.transpose_w = v.Attr<bool>("transpose_Y");
  spec.alpha = v.Attr<float>("alpha");
  const int64_t n = spec.transpose_w ? wd[0] : wd[1];
  std::vector<int> ops = {i};
  std::string result = out;
  std::string bias;
  // Bias: the matmul output's only reader adds a [N] row to it.
  const std::vector<int> mc = consumers(out);
  if (mc.size() == 1 && !cluster_outputs.count(out) && block.ops(mc[0]).type() == "elementwise_add") {
    const int j = mc[0];
    const OpView a(block, block.ops(j), registry.Get("elementwise_add"), j);
    const std::string b = a.In("Y");
    const int64_t axis = a.Attr<int64_t>("axis");
    const Dims out_dims = v.DimsOf(out);
    if (a.In("X") == out && !b.empty() && a.IsF32(b) && a.DimsOf(b) == Dims{n} &&
        (axis == -1 || axis == static_cast<int64_t>(out_dims.size()) - 1) && external.count(b) &&
        !writers_in(b, 0, j)) {
      bias = b;
      spec.bias = true;
      ops.push_back(j);
      result = a.Out("Out");
      // Activation: the sum's only reader is a relu/gelu whose grad does not need the sum.
      const std::vector<int> sc = consumers(result);
      if (sc.size() == 1 && !cluster_outputs.count(result)) {
        const proto::OpDesc& act = block.ops(sc[0]);
        if (act.type() == "relu" || act.type() == "gelu") {
          const OpView av(block, act, registry.Get(act.type()), sc[0]);
          if (av.In("X") == result) {
            spec.activation = act.type() == "relu"         ? MatmulActivation::kRelu
                              : av.Attr<bool>("approximate") ? MatmulActivation::kGeluTanh
                                                             : MatmulActivation::kGelu;
            ops.push_back(sc[0]);
            result = av.Out("Out");
          }
        }
      }
    }
  }
  if (ops.size() == 1) return false;  // a bare matmul stays a framework op
  // Everything between the matmul and the last folded op must leave the
  // folded vars alone (they now all happen at the matmul's place).
  std::set<std::string> folded_writes = {out, result};
  for (int k : ops) {
    for (const auto& a : AllOutputArgs(block.ops(k))) folded_writes.insert(a);
  }
  for (int j = i + 1; j < ops.back(); ++j) {
    if (std::find(ops.begin(), ops.end(), j) != ops.end()) continue;
    for (const auto& a : AllOutputArgs(block.ops(j))) {
      if (folded_writes.count(a) || a == x || a == w || a == bias) return false;
    }
    for (const auto& r : reads[j]) {
      if (folded_writes.count(r)) return false;
    }
  }
  unit->fused_matmul = true;
  unit->matmul = spec;
  unit->matmul_args = {x, w};
  if (!bias.empty()) unit->matmul_args.push_back(bias);
  unit->matmul_args.push_back(result);
  unit->matmul_ops = ops;
  unit->reads = {x, w};
  if (!bias.empty()) unit->reads.insert(bias);
  unit->writes = {result};
  return true;
}

// 2x2/stride-2 max pooling's gradient without oneDNN's forward recompute
// (its backward needs the forward's workspace, which another cluster made).
class MaxPool2x2GradKernel final : public runtime::Kernel {
 public:
  MaxPool2x2GradKernel(const Dims& x_dims, std::string name) : name_(std::move(name)), x_dims_(x_dims) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "kiln max-pool 2x2/2 gradient (first maximum of each window)"; }
  void Run(const runtime::BufferView* args) const override {
    MaxPool2x2Grad(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                   static_cast<const float*>(args[2].data), static_cast<float*>(args[3].data),
                   x_dims_[0] * x_dims_[1], x_dims_[2], x_dims_[3]);
  }

 private:
  std::string name_;
  Dims x_dims_;
};

bool MatchMaxPool2x2Grad(const proto::BlockDesc& block, int i, const OpRegistry& registry, Unit* unit) {
  const proto::OpDesc& op = block.ops(i);
  if (op.type() != "pool2d_grad") return false;
  const OpView v(block, op, registry.Get(op.type()), i);
  const std::string x = v.In("X"), out = v.In("Out"), dout = v.In("Out@GRAD"), dx = v.Out("X@GRAD");
  if (x.empty() || out.empty() || dout.empty() || dx.empty()) return false;
  if (!v.IsF32(x) || !v.IsF32(out) || !v.IsF32(dout)) return false;
  const std::vector<int64_t> two = {2, 2}, zero = {0, 0};
  if (v.Attr<std::string>("pooling_type") != "max" || v.Attr<bool>("global_pooling") ||
      v.Attr<std::vector<int64_t>>("ksize") != two || v.Attr<std::vector<int64_t>>("strides") != two ||
      v.Attr<std::vector<int64_t>>("paddings") != zero) {
    return false;
  }
  const Dims xd = v.DimsOf(x);
  if (xd.size() != 4 || xd[2] % 2 != 0 || xd[3] % 2 != 0) return false;
  if (v.DimsOf(out) != Dims{xd[0], xd[1], xd[2] / 2, xd[3] / 2} || v.DimsOf(dout) != v.DimsOf(out)) return false;
  unit->custom = std::make_shared<MaxPool2x2GradKernel>(xd, "maxpool_grad_" + std::to_string(i));
  unit->matmul_args = {x, out, dout, dx};
  unit->custom_inputs = 3;
  unit->reads = {x, out, dout};
  unit->writes = {dx};
  return true;
}

// matmul_grad's weight gradient read only by an sgd of that weight: the
// gradient and the step become one oneDNN matmul at the sgd's place.
struct MatmulSgdMatch {
  int grad_op = -1;
  std::string x, dy, lr, w;
  Dims x_dims, w_dims;
};

std::map<int, MatmulSgdMatch> FindMatmulSgd(const proto::BlockDesc& block,
                                            const std::vector<std::set<std::string>>& reads,
                                            const std::set<std::string>& cluster_outputs, const OpRegistry& registry) {
  std::map<int, MatmulSgdMatch> matches;  // by sgd op index
  for (int i = 0; i < block.ops_size(); ++i) {
    const proto::OpDesc& op = block.ops(i);
    if (op.type() != "matmul_grad") continue;
    const OpView v(block, op, registry.Get(op.type()), i);
    const std::string x = v.In("X"), w = v.In("Y"), dy = v.In("Out@GRAD"), g = v.Out("Y@GRAD");
    if (x.empty() || w.empty() || dy.empty() || g.empty() || cluster_outputs.count(g)) continue;
    if (v.Attr<bool>("transpose_X") || v.Attr<bool>("transpose_Y") || v.Attr<float>("alpha") != 1.f) continue;
    if (!v.IsF32(x) || !v.IsF32(w) || !v.IsF32(dy)) continue;
    const Dims xd = v.DimsOf(x), wd = v.DimsOf(w), dyd = v.DimsOf(dy);
    if (wd.size() != 2 || xd.size() < 2 || xd.back() != wd[0] || dyd.back() != wd[1] ||
        Numel(xd) / xd.back() != Numel(dyd) / dyd.back()) {
      continue;
    }
    int reader = -1, readers = 0;
    for (int j = 0; j < block.ops_size(); ++j) {
      if (j != i && reads[j].count(g)) {
        reader = j;
        ++readers;
      }
    }
    if (readers != 1 || reader < i || block.ops(reader).type() != "sgd") continue;
    const OpView sv(block, block.ops(reader), registry.Get("sgd"), reader);
    if (sv.In("Param") != w || sv.Out("ParamOut") != w || sv.In("Grad") != g) continue;
    const std::string lr = sv.In("LearningRate");
    // The step moves up to the matmul_grad (so X and dY die there, not at the
    // end of the backward pass): nothing in between may touch W or write the
    // operands.
    bool clobbered = false;
    for (int j = i + 1; j < reader && !clobbered; ++j) {
      for (const auto& a : AllOutputArgs(block.ops(j))) clobbered |= a == x || a == dy || a == lr || a == w;
      clobbered |= reads[j].count(w) > 0;
    }
    if (clobbered) continue;
    matches[reader] = MatmulSgdMatch{i, x, dy, lr, w, xd, wd};
  }
  return matches;
}

// Whether the folded step of matmul_grad op i (sgd op j) should run before
// dX: X has no reader after op i but the sgd, X dies in the cluster (made in
// it, or a donatable input), X is bigger than W (the copy of W pays off), and
// dX has X's dims with dY's leading dims (dX = dY W^T as a plain matmul).
bool ReorderStepFirst(const proto::BlockDesc& block, int i, int j, const MatmulSgdMatch& m, const std::string& dx,
                      const std::vector<std::set<std::string>>& reads, const std::set<std::string>& external,
                      const JitSubgraph& subgraph) {
  if (external.count(m.x) && std::find(subgraph.donatable_inputs.begin(), subgraph.donatable_inputs.end(), m.x) ==
                                 subgraph.donatable_inputs.end()) {
    return false;
  }
  if (Numel(m.x_dims) <= Numel(m.w_dims)) return false;
  for (int k = i + 1; k < block.ops_size(); ++k) {
    if (k != j && reads[k].count(m.x)) return false;
  }
  const proto::VarDesc* dxv = FindVarDesc(block, dx);
  const proto::VarDesc* dyv = FindVarDesc(block, m.dy);
  if (dxv == nullptr || dyv == nullptr || VarDims(*dxv) != m.x_dims) return false;
  Dims expect = VarDims(*dyv);
  if (expect.empty()) return false;
  expect.back() = m.w_dims[0];
  return expect == m.x_dims;
}

}  // namespace

std::vector<LoweredUnit> PartitionElementwise(const proto::BlockDesc& block, const JitSubgraph& subgraph,
                                              const CompileOptions& options, const OpRegistry& registry) {
  std::set<std::string> external(subgraph.inputs.begin(), subgraph.inputs.end());
  std::set<std::string> cluster_outputs(subgraph.outputs.begin(), subgraph.outputs.end());
  std::vector<std::vector<Fragment>> all_frags(block.ops_size());
  std::vector<std::set<std::string>> reads(block.ops_size());
  for (int i = 0; i < block.ops_size(); ++i) {
    if (options.fuse_elementwise) all_frags[i] = FragmentsOf(block, i, registry);
    reads[i] = NeededReads(block, i, all_frags[i]);
  }
  std::map<int, MatmulSgdMatch> matmul_sgd;
  std::map<int, int> grad_op_to_sgd;
  if (options.use_onednn && options.fuse_elementwise) {
    matmul_sgd = FindMatmulSgd(block, reads, cluster_outputs, registry);
    for (const auto& [j, m] : matmul_sgd) grad_op_to_sgd[m.grad_op] = j;
  }
  std::vector<bool> folded(block.ops_size(), false);
  auto v_dims_match = [&block](const std::string& var, const Dims& x_dims) {
    const proto::VarDesc* v = FindVarDesc(block, var);
    return v != nullptr && Numel(VarDims(*v)) == Numel(x_dims);
  };
  std::vector<Unit> units;
  std::vector<std::pair<size_t, Fragment>> deferred;  // (position in its op, fragment)
  for (int i = 0; i < block.ops_size(); ++i) {
    if (folded[i]) continue;
    if (grad_op_to_sgd.count(i)) {
      // The weight gradient moves to the sgd; what is left is dX (if wanted).
      auto op = std::make_shared<proto::OpDesc>(block.ops(i));
      SetOutput(op.get(), "Y@GRAD", {kEmptyVarName});
      const std::vector<std::string> dx = OutputArgs(*op, "X@GRAD");
      const int j_sgd = grad_op_to_sgd.at(i);
      const MatmulSgdMatch& one = matmul_sgd.at(j_sgd);
      const bool want_dx = !dx.empty() && dx[0] != kEmptyVarName;
      if (Numel(one.x_dims) == one.x_dims.back() && (!want_dx || v_dims_match(dx[0], one.x_dims))) {
        // Batch 1: dX and the step in one pass over W.
        folded[j_sgd] = true;
        Unit u;
        u.gemv_grad_sgd = true;
        u.x_dims = one.x_dims;
        u.w_dims = one.w_dims;
        u.matmul_args = {one.x, one.dy, one.lr, one.w};
        if (want_dx) u.matmul_args.push_back(dx[0]);
        u.matmul_args.push_back(one.w);
        u.matmul_ops = {i, j_sgd};
        u.reads = {one.x, one.dy, one.lr, one.w};
        u.writes = {one.w};
        if (want_dx) u.writes.insert(dx[0]);
        units.push_back(std::move(u));
        continue;
      }
      // When X dies at this fold and is bigger than W, the step goes first
      // (keeping a copy of the old W) and dX = dY W_old^T follows as a plain
      // matmul: dX may then take X's memory.
      if (want_dx && ReorderStepFirst(block, i, j_sgd, one, dx[0], reads, external, subgraph)) {
        const std::string w_old = one.w + "@OLD";
        Unit step;
        step.matmul_sgd = true;
        step.keep_old = true;
        step.x_dims = one.x_dims;
        step.w_dims = one.w_dims;
        step.matmul_args = {one.x, one.dy, one.lr, one.w, w_old, one.w};
        step.matmul_ops = {i, j_sgd};
        step.reads = {one.x, one.dy, one.lr, one.w};
        step.writes = {w_old, one.w};
        proto::VarDesc old_var = *FindVarDesc(block, one.w);
        old_var.set_name(w_old);
        old_var.set_persistable(false);
        step.new_vars.push_back(old_var);
        units.push_back(std::move(step));
        folded[j_sgd] = true;
        Unit d;
        d.op_index = i;
        d.op_override = std::make_shared<proto::OpDesc>(OpBuilder("matmul")
                                                            .In("X", {one.dy})
                                                            .In("Y", {w_old})
                                                            .Out("Out", {dx[0]})
                                                            .Attr("transpose_Y", true)
                                                            .Build());
        d.reads = {one.dy, w_old};
        d.writes = {dx[0]};
        units.push_back(std::move(d));
        continue;
      }
      if (want_dx) {
        Unit u;
        u.op_index = i;
        u.op_override = op;
        for (const auto& a : AllInputArgs(*op)) {
          if (a != kEmptyVarName) u.reads.insert(a);
        }
        u.writes.insert(dx[0]);
        units.push_back(std::move(u));
      }
      // dX has read the old W: the step follows right away.
      const int j = grad_op_to_sgd.at(i);
      folded[j] = true;
      const MatmulSgdMatch& m = matmul_sgd.at(j);
      Unit u;
      u.matmul_sgd = true;
      u.x_dims = m.x_dims;
      u.w_dims = m.w_dims;
      u.matmul_args = {m.x, m.dy, m.lr, m.w, m.w};
      u.matmul_ops = {m.grad_op, j};
      u.reads = {m.x, m.dy, m.lr, m.w};
      u.writes = {m.w};
      units.push_back(std::move(u));
      continue;
    }
    Unit pool;
    if (options.fuse_elementwise && MatchMaxPool2x2Grad(block, i, registry, &pool)) {
      units.push_back(std::move(pool));
      continue;
    }
    Unit mm;
    if (options.use_onednn && options.fuse_elementwise &&
        MatchFusedMatmul(block, i, reads, cluster_outputs, external, registry, &mm)) {
      for (int k : mm.matmul_ops) folded[k] = true;
      units.push_back(std::move(mm));
      continue;
    }
    const std::vector<Fragment>& frags = all_frags[i];
    if (frags.empty()) {
      Unit u;
      u.op_index = i;
      for (const auto& a : AllInputArgs(block.ops(i))) {
        if (a != kEmptyVarName) u.reads.insert(a);
      }
      for (const auto& a : AllOutputArgs(block.ops(i))) {
        if (a != kEmptyVarName) u.writes.insert(a);
      }
      units.push_back(std::move(u));
      continue;
    }
    for (size_t k = 0; k < frags.size(); ++k) {
      const Fragment& f = frags[k];
      if (Deferrable(block, i, f, reads)) {
        deferred.emplace_back(k, f);
        continue;
      }
      PlaceFragment(f, &units, external);
    }
  }
  // State updates nothing later in the cluster reads (adam's beta powers)
  // run last, so those of every parameter share one kernel.
  // Deferred fragments of different ops touch disjoint vars (Deferrable), so
  // only their order within an op matters: place every op's first fragment,
  // then every second one.
  std::stable_sort(deferred.begin(), deferred.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [k, f] : deferred) PlaceFragment(f, &units, external);

  // A var a group writes leaves the kernel when anything else reads it or the
  // cluster outputs it.
  std::vector<LoweredUnit> lowered;
  int serial = 0, matmuls = 0;
  for (size_t gi = 0; gi < units.size(); ++gi) {
    const Unit& u = units[gi];
    if (u.custom) {
      LoweredUnit l;
      l.kernel = u.custom;
      l.arg_names = u.matmul_args;
      l.num_inputs = u.custom_inputs;
      lowered.push_back(std::move(l));
      continue;
    }
    if (u.gemv_grad_sgd) {
      LoweredUnit l;
      const bool with_dx = u.matmul_args.size() == 6;
      l.kernel = MakeGemvGradSgdKernel(u.w_dims[0], u.w_dims[1], with_dx, "gemv_sgd_" + std::to_string(matmuls++));
      l.arg_names = u.matmul_args;
      l.num_inputs = 4;
      l.fused_ops = u.matmul_ops;
      lowered.push_back(std::move(l));
      continue;
    }
    if (u.matmul_sgd) {
      LoweredUnit l;
      l.kernel = MakeMatmulSgdKernel(u.x_dims, u.w_dims, "matmul_sgd_" + std::to_string(matmuls++), u.keep_old);
      l.arg_names = u.matmul_args;
      l.num_inputs = 4;
      l.fused_ops = u.matmul_ops;
      l.new_vars = u.new_vars;
      lowered.push_back(std::move(l));
      continue;
    }
    if (u.fused_matmul) {
      LoweredUnit l;
      l.kernel = MakeFusedMatmulKernel(u.matmul, "matmul_" + std::to_string(matmuls++));
      l.arg_names = u.matmul_args;
      l.num_inputs = static_cast<int>(u.matmul_args.size()) - 1;
      l.fused_ops = u.matmul_ops;
      lowered.push_back(std::move(l));
      continue;
    }
    if (!u.group) {
      LoweredUnit l;
      l.op_index = u.op_index;
      l.op_override = u.op_override;
      lowered.push_back(std::move(l));
      continue;
    }
    auto stored = [&](const std::string& var) {
      if (cluster_outputs.count(var)) return true;
      for (size_t k = 0; k < units.size(); ++k) {
        if (k != gi && units[k].reads.count(var)) return true;
      }
      return false;
    };
    lowered.push_back(BuildGroupKernel(u, stored, options, block, serial++));
  }
  return lowered;
}

}  // namespace kiln::jit
