#include "passes/decomposition_fusion_pass.h"

#include <cmath>
#include <optional>
#include <utility>

#include "framework/error.h"
#include "framework/executor.h"
#include "framework/scope.h"
#include "passes/decomposition_fusion_attention.h"
#include "passes/decomposition_fusion_match.h"
#include "framework/ir/graph.h"
#include "framework/op_desc.h"

namespace kiln {
namespace {

using ir::Graph;
using ir::kNoNode;
using ir::NodeId;

// A fused op to be: the ops it replaces, its inputs and its output.
struct Match {
  std::vector<NodeId> ops;
  NodeId x = kNoNode, scale = kNoNode, bias = kNoNode, y = kNoNode;
  float epsilon = 0;
};

class Matcher : public decomposition_fusion::GraphMatcher {
 public:
  using GraphMatcher::GraphMatcher;

  // The LayerNorm whose first reduce_mean is `op`.
  std::optional<Match> LayerNormAt(NodeId op) const {
    if (!Is(op, "reduce_mean")) return std::nullopt;
    Match m;
    m.x = In(op, "X");
    if (!F32(m.x)) return std::nullopt;
    const Dims x = VarDims(g_.var(m.x));
    if (x.size() < 2 || x.back() <= 0 || !LastAxisMean(op, x.size())) return std::nullopt;
    const NodeId mean = Out(op, "Out");
    const NodeId sub = OnlyReader(mean, "elementwise_sub");
    if (sub == kNoNode || In(sub, "X") != m.x || In(sub, "Y") != mean || !Elementwise(sub, x)) return std::nullopt;
    const NodeId d = Out(sub, "Out");
    // d feeds the square and the division, nothing else.
    NodeId pow = kNoNode, div = kNoNode;
    if (!Intermediate(d)) return std::nullopt;
    for (NodeId r : g_.outputs(d)) {
      NodeId* slot = Is(r, "pow") ? &pow : Is(r, "elementwise_div") ? &div : nullptr;
      if (slot == nullptr || *slot != kNoNode) return std::nullopt;
      *slot = r;
    }
    if (pow == kNoNode || div == kNoNode || In(pow, "X") != d || Attr<float>(pow, "factor") != 2.0f) {
      return std::nullopt;
    }
    const NodeId var_mean = OnlyReader(Out(pow, "Out"), "reduce_mean");
    if (var_mean == kNoNode || !LastAxisMean(var_mean, x.size())) return std::nullopt;
    Dims kept = x;
    kept.back() = 1;
    const NodeId add = OnlyReader(Out(var_mean, "Out"), "elementwise_add");
    const NodeId v = Out(var_mean, "Out");
    NodeId eps = kNoNode;
    if (add == kNoNode || !Elementwise(add, kept) || !OtherOperand(add, v, &eps)) return std::nullopt;
    const std::optional<float> eps_value = Constant(eps);
    if (!eps_value || !(*eps_value > 0) || !std::isfinite(*eps_value)) return std::nullopt;
    const NodeId sqrt = OnlyReader(Out(add, "Out"), "sqrt");
    if (sqrt == kNoNode) return std::nullopt;
    const NodeId s = Out(sqrt, "Out");
    if (OnlyReader(s, "elementwise_div") != div || In(div, "X") != d || In(div, "Y") != s || !Elementwise(div, x)) {
      return std::nullopt;
    }
    m.ops = {op, sub, pow, var_mean, add, sqrt, div};
    m.epsilon = *eps_value;
    m.y = Out(div, "Out");
    // The affine tail, when y is an intermediate read by it alone.
    const NodeId n_dim = x.back();
    if (const NodeId mul = OnlyReader(m.y, "elementwise_mul"); mul != kNoNode && Intermediate(m.y)) {
      NodeId g = kNoNode;
      if (Elementwise(mul, x) && OtherOperand(mul, m.y, &g) && Vector(g, n_dim)) {
        m.ops.push_back(mul);
        m.scale = g;
        m.y = Out(mul, "Out");
      }
    }
    if (const NodeId badd = OnlyReader(m.y, "elementwise_add"); badd != kNoNode && Intermediate(m.y)) {
      NodeId b = kNoNode;
      if (Elementwise(badd, x) && OtherOperand(badd, m.y, &b) && Vector(b, n_dim)) {
        m.ops.push_back(badd);
        m.bias = b;
        m.y = Out(badd, "Out");
      }
    }
    if (!F32(m.y) || VarDims(g_.var(m.y)) != x) return std::nullopt;
    // Everything written before y is the pattern's own.
    for (NodeId v2 : {mean, d, Out(pow, "Out"), v, Out(add, "Out"), s}) {
      if (!Intermediate(v2)) return std::nullopt;
    }
    return m;
  }

  // The erf GELU around `erf_op`.
  std::optional<Match> GeluAt(NodeId erf_op) const {
    if (!Is(erf_op, "erf")) return std::nullopt;
    const NodeId t = In(erf_op, "X");
    const NodeId div = g_.Producer(t);
    if (div == kNoNode || !Is(div, "elementwise_div")) return std::nullopt;
    Match m;
    m.x = In(div, "X");
    if (!F32(m.x)) return std::nullopt;
    const Dims x = VarDims(g_.var(m.x));
    const std::optional<float> c1 = Constant(In(div, "Y"));
    if (!Elementwise(div, x) || !c1 || std::fabs(*c1 - std::sqrt(2.0)) > 1e-6 * std::sqrt(2.0)) return std::nullopt;
    const NodeId e = Out(erf_op, "Out");
    const NodeId add = OnlyReader(e, "elementwise_add");
    NodeId one = kNoNode;
    if (add == kNoNode || !Elementwise(add, x) || !OtherOperand(add, e, &one) || Constant(one) != 1.0f) {
      return std::nullopt;
    }
    const NodeId u = Out(add, "Out");
    const NodeId mul_u = OnlyReader(u, "elementwise_mul");
    NodeId other = kNoNode;
    if (mul_u == kNoNode || !Elementwise(mul_u, x) || !OtherOperand(mul_u, u, &other)) return std::nullopt;
    m.ops = {div, erf_op, add, mul_u};
    NodeId half_mul = kNoNode, w = kNoNode, half = kNoNode;
    if (other == m.x) {
      // F.gelu's export: (x * u) * 0.5
      w = Out(mul_u, "Out");
      half_mul = OnlyReader(w, "elementwise_mul");
      if (half_mul == kNoNode || !OtherOperand(half_mul, w, &half)) return std::nullopt;
      m.y = Out(half_mul, "Out");
    } else {
      // 0.5 * x * (1 + erf(x / sqrt(2))): (x * 0.5) * u
      w = other;
      half_mul = g_.Producer(w);
      if (half_mul == kNoNode || !Is(half_mul, "elementwise_mul") || !OtherOperand(half_mul, m.x, &half)) {
        return std::nullopt;
      }
      m.y = Out(mul_u, "Out");
    }
    m.ops.push_back(half_mul);
    if (!Elementwise(half_mul, x) || Constant(half) != 0.5f) return std::nullopt;
    if (!F32(m.y) || VarDims(g_.var(m.y)) != x) return std::nullopt;
    for (NodeId v : {t, e, u, w}) {
      if (!Intermediate(v)) return std::nullopt;
    }
    // Each intermediate read only inside the pattern (w by its one mul).
    if (g_.outputs(t).size() != 1 || g_.outputs(w).size() != 1) return std::nullopt;
    return m;
  }

 private:
  // The one op reading `v` when it is a `type` and `v` is an intermediate.
  NodeId OnlyReader(NodeId v, std::string_view type) const {
    if (v == kNoNode || !Intermediate(v)) return kNoNode;
    const std::vector<NodeId> readers = g_.outputs(v);
    return readers.size() == 1 && Is(readers[0], type) ? readers[0] : kNoNode;
  }
  // A binary elementwise op reading `known` in one slot: the other slot's var
  // goes to *other (when not null). False when `known` is in neither slot.
  bool OtherOperand(NodeId op, NodeId known, NodeId* other) const {
    const NodeId a = In(op, "X"), b = In(op, "Y");
    if (a == kNoNode || b == kNoNode) return false;
    if (a != known && b != known) return false;
    if (other != nullptr) *other = a == known ? b : a;
    return true;
  }
  // axis -1 and an output of dims `out` (no broadcast hides in the pattern).
  bool Elementwise(NodeId op, const Dims& out) const {
    const NodeId o = Out(op, "Out");
    return Attr<int64_t>(op, "axis") == -1 && F32(o) && VarDims(g_.var(o)) == out;
  }
  bool LastAxisMean(NodeId op, size_t rank) const {
    const auto dim = Attr<std::vector<int64_t>>(op, "dim");
    const int64_t last = static_cast<int64_t>(rank) - 1;
    return !Attr<bool>(op, "reduce_all") && Attr<bool>(op, "keep_dim") && dim.size() == 1 &&
           (dim[0] == -1 || dim[0] == last);
  }
  // A declared f32 var of dims [n] (a parameter, or any var).
  bool Vector(NodeId v, int64_t n) const { return F32(v) && VarDims(g_.var(v)) == Dims{n}; }
  // The value of a scalar constant (see the header), if `v` is one.
  std::optional<float> Constant(NodeId v) const {
    if (!F32(v)) return std::nullopt;
    const proto::VarDesc& d = g_.var(v);
    if (!d.persistable() || !d.stop_gradient() || g_.Producer(v) != kNoNode) return std::nullopt;
    if (g_.VarVersions(d.name()).size() != 1) return std::nullopt;
    for (int64_t n : VarDims(d)) {
      if (n != 1) return std::nullopt;
    }
    auto it = options_.constants.find(d.name());
    if (it == options_.constants.end() || it->second.dtype() != DataType::kFP32 || it->second.numel() != 1) {
      return std::nullopt;
    }
    return it->second.data<float>()[0];
  }
};

// "<y><suffix>", numbered when a var of that name exists.
NodeId AddStatsVar(Graph& g, const Match& m, const std::string& suffix) {
  const std::string base = g.VarName(m.y) + suffix;
  std::string name = base;
  for (int k = 1; g.FindVar(name) != kNoNode; ++k) name = base + "_" + std::to_string(k);
  proto::VarDesc d;
  d.set_name(name);
  d.set_dtype(proto::FP32);
  int64_t rows = 1;
  const Dims x = VarDims(g.var(m.x));
  for (size_t i = 0; i + 1 < x.size(); ++i) rows = rows < 0 || x[i] < 0 ? -1 : rows * x[i];
  d.add_dims(rows);
  d.set_stop_gradient(true);
  return g.AddVarNode(d);
}

// With Mean and Variance, as the native builders write it: layer_norm_grad
// then reads the row statistics instead of recomputing them.
void RewriteLayerNorm(Graph& g, const Match& m) {
  proto::OpDesc desc;
  desc.set_type("layer_norm");
  SetAttr(&desc, "epsilon", Attribute(m.epsilon));
  SetAttr(&desc, "begin_norm_axis", Attribute(static_cast<int64_t>(g.var(m.x).dims_size() - 1)));
  std::vector<ir::SlotNodes> inputs = {{"X", {m.x}}};
  if (m.scale != kNoNode) inputs.push_back({"Scale", {m.scale}});
  if (m.bias != kNoNode) inputs.push_back({"Bias", {m.bias}});
  const NodeId mean = AddStatsVar(g, m, ".mean"), variance = AddStatsVar(g, m, ".variance");
  g.ReplaceOps(m.ops, desc, inputs, {{"Y", {m.y}}, {"Mean", {mean}}, {"Variance", {variance}}});
}

void RewriteGelu(Graph& g, const Match& m) {
  proto::OpDesc desc;
  desc.set_type("gelu");
  SetAttr(&desc, "approximate", Attribute(false));
  g.ReplaceOps(m.ops, desc, {{"X", {m.x}}}, {{"Out", {m.y}}});
}

std::string List(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::string DecompositionFusionReport::ToString() const {
  std::string s;
  auto add = [&s](const std::vector<std::string>& names, const char* what) {
    if (names.empty()) return;
    s += (s.empty() ? "fused " : ", ") + std::to_string(names.size()) + " " + what + " (" + List(names) + ")";
  };
  add(layer_norms, "layer_norm");
  add(gelus, "gelu");
  add(attentions, "attention");
  return s.empty() ? "fused no decomposition" : s;
}

std::map<std::string, Tensor> ImportedConstants(const proto::ProgramDesc& main, const proto::ProgramDesc& startup) {
  std::map<std::string, Tensor> out;
  if (main.blocks_size() == 0 || startup.blocks_size() == 0) return out;
  std::set<std::string> wanted;
  for (const proto::VarDesc& v : main.blocks(0).vars()) {
    if (v.persistable() && v.stop_gradient()) wanted.insert(v.name());
  }
  // Only the ops writing those vars: the parameters' initialisers stay out.
  proto::ProgramDesc constants = startup;
  proto::BlockDesc* block = constants.mutable_blocks(0);
  block->clear_ops();
  std::set<std::string> written;
  for (const proto::OpDesc& op : startup.blocks(0).ops()) {
    bool all_wanted = op.outputs_size() > 0 && op.inputs_size() == 0;
    for (const auto& slot : op.outputs()) {
      for (const auto& arg : slot.args()) all_wanted = all_wanted && wanted.count(arg) > 0;
    }
    if (!all_wanted) continue;
    *block->add_ops() = op;
    for (const auto& slot : op.outputs()) written.insert(slot.args().begin(), slot.args().end());
  }
  if (written.empty()) return out;
  Scope scope;
  Executor().RunProgram(constants, scope);
  for (const std::string& name : written) {
    if (const Variable* v = scope.FindVar(name); v != nullptr && v->Get().initialized()) out[name] = v->Get();
  }
  return out;
}

DecompositionFusionPass::DecompositionFusionPass(DecompositionFusionPassOptions options,
                                                 DecompositionFusionReport* report, const OpRegistry& registry)
    : options_(std::move(options)), report_(report), registry_(registry) {}

bool DecompositionFusionPass::Run(ir::Graph& graph) const {
  DecompositionFusionReport report;
  for (;;) {
    // Rescanned after each rewrite: the ids of untouched nodes stay valid,
    // and a pattern found in topological order keeps the result deterministic.
    const Matcher matcher(graph, options_, registry_);
    bool fused = false;
    for (NodeId op : graph.TopologicalOrder()) {
      if (std::optional<Match> m = matcher.LayerNormAt(op)) {
        report.layer_norms.push_back(graph.VarName(m->y));
        RewriteLayerNorm(graph, *m);
      } else if (std::optional<Match> m2 = matcher.GeluAt(op)) {
        report.gelus.push_back(graph.VarName(m2->y));
        RewriteGelu(graph, *m2);
      } else {
        continue;
      }
      fused = true;
      break;
    }
    if (!fused) break;
  }
  // After the GELUs and LayerNorms: they never stand inside an attention's
  // scores, and the mask's constant folding then sees a smaller graph.
  report.attentions = decomposition_fusion::CanonicalizeAttention(graph, options_, registry_);
  const bool changed = !report.layer_norms.empty() || !report.gelus.empty() || !report.attentions.empty();
  if (report_ != nullptr) *report_ = std::move(report);
  return changed;
}

DecompositionFusionReport FuseImportedDecompositions(proto::ProgramDesc* main, const proto::ProgramDesc& startup,
                                                     const std::set<std::string>& keep) {
  DecompositionFusionPassOptions o;
  o.keep_vars = keep;
  o.constants = ImportedConstants(*main, startup);
  DecompositionFusionReport report;
  if (main->blocks_size() == 0) return report;
  Graph graph = Graph::FromBlock(main->blocks(0));
  if (DecompositionFusionPass(std::move(o), &report).Run(graph)) {
    graph.Verify();
    *main->mutable_blocks(0) = graph.ToBlock();
  }
  return report;
}

}  // namespace kiln
