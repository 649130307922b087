#include "passes/attention_fusion_pass.h"

#include <optional>
#include <utility>

#include "framework/error.h"
#include "framework/op_desc.h"

namespace kiln {
namespace {

using ir::Graph;
using ir::kNoNode;
using ir::NodeId;

// One attention found in the graph: its ops and the var nodes that matter.
// The backward ops and vars are kNoNode when the pattern has no grad ops;
// dq, dk and dv also when that gradient is @EMPTY@, and the scores'
// matmul_grad with dq and dk when nothing reads dS.
struct Match {
  NodeId scores_mm = kNoNode, softmax = kNoNode, out_mm = kNoNode;
  NodeId q = kNoNode, k = kNoNode, v = kNoNode, s = kNoNode, p = kNoNode, o = kNoNode;
  NodeId out_mm_grad = kNoNode, softmax_grad = kNoNode, scores_mm_grad = kNoNode;
  NodeId dout = kNoNode, dp = kNoNode, ds = kNoNode, dq = kNoNode, dk = kNoNode, dv = kNoNode;
  float scale = 1.0f;
  bool causal = false;
};

constexpr const char* kCausalSoftmax = "fused_softmax_mask_upper_triangle";

class Matcher {
 public:
  Matcher(const Graph& g, const AttentionFusionPassOptions& o, const OpRegistry& r)
      : g_(g), options_(o), registry_(r) {}

  // The attention around softmax-like op `sm`, if it is one that may fuse.
  std::optional<Match> At(NodeId sm) const {
    const std::string& type = g_.op(sm).type();
    if (type != "softmax" && type != kCausalSoftmax) return std::nullopt;
    Match m;
    m.softmax = sm;
    m.causal = type == kCausalSoftmax;
    m.s = In(sm, "X");
    m.p = Out(sm, "Out");
    if (!Intermediate(m.s) || !Intermediate(m.p) || !Unmarked(sm)) return std::nullopt;
    if (!m.causal && !LastAxis(sm, m.s)) return std::nullopt;
    m.scores_mm = g_.Producer(m.s);
    if (m.scores_mm == kNoNode || !IsMatmul(m.scores_mm, "matmul", true, &m.scale)) return std::nullopt;
    if (g_.outputs(m.s) != std::vector<NodeId>{sm}) return std::nullopt;
    m.q = In(m.scores_mm, "X");
    m.k = In(m.scores_mm, "Y");
    // P's readers: the second matmul, and the grad ops when there are any.
    for (NodeId r : g_.outputs(m.p)) {
      const std::string& t = g_.op(r).type();
      NodeId* slot = t == "matmul" ? &m.out_mm
                     : t == "matmul_grad" ? &m.out_mm_grad
                     : t == type + "_grad" ? &m.softmax_grad
                                           : nullptr;
      if (slot == nullptr || *slot != kNoNode) return std::nullopt;
      *slot = r;
    }
    if (m.out_mm == kNoNode || In(m.out_mm, "X") != m.p) return std::nullopt;
    float alpha = 0;
    if (!IsMatmul(m.out_mm, "matmul", false, &alpha) || alpha != 1.0f) return std::nullopt;
    m.v = In(m.out_mm, "Y");
    m.o = Out(m.out_mm, "Out");
    if (m.q == kNoNode || m.k == kNoNode || m.v == kNoNode || m.v == m.p || m.o == kNoNode) return std::nullopt;
    if (!Shapes(m)) return std::nullopt;
    const bool any_grad = m.out_mm_grad != kNoNode || m.softmax_grad != kNoNode;
    if (any_grad && !Backward(&m)) return std::nullopt;
    return m;
  }

 private:
  // The single arg of a slot; kNoNode when absent, @EMPTY@ or several.
  NodeId In(NodeId op, std::string_view slot) const { return Single(g_.InputSlot(op, slot)); }
  NodeId Out(NodeId op, std::string_view slot) const { return Single(g_.OutputSlot(op, slot)); }
  static NodeId Single(const std::vector<NodeId>& args) { return args.size() == 1 ? args[0] : kNoNode; }

  // Declared f32, not persistable, not kept, its name written once.
  bool Intermediate(NodeId v) const {
    if (v == kNoNode || !g_.IsDeclared(v)) return false;
    const proto::VarDesc& d = g_.var(v);
    return d.dtype() == proto::FP32 && !d.persistable() && !options_.keep_vars.count(d.name()) &&
           g_.VarVersions(d.name()).size() == 1;
  }
  // Not one of recompute_pass's copies (append_backward's "backward" role is fine).
  bool Unmarked(NodeId op) const { return !HasOpRole(g_.op(op), kOpRoleRecompute); }
  AttrMap Attrs(NodeId op) const { return ResolveAttrs(registry_.Get(g_.op(op).type()), g_.op(op), -1); }

  // A `type` (matmul or matmul_grad) op without transpose_X, with
  // transpose_Y as given; its alpha goes to *alpha.
  bool IsMatmul(NodeId op, const char* type, bool transpose_y, float* alpha) const {
    if (g_.op(op).type() != type || !Unmarked(op)) return false;
    const AttrMap a = Attrs(op);
    *alpha = std::get<float>(a.at("alpha"));
    return !std::get<bool>(a.at("transpose_X")) && std::get<bool>(a.at("transpose_Y")) == transpose_y;
  }

  bool LastAxis(NodeId sm, NodeId s) const {
    const int64_t axis = std::get<int64_t>(Attrs(sm).at("axis"));
    return axis == -1 || axis == g_.var(s).dims_size() - 1;
  }

  // Q [..., Sq, D], K [..., Sk, D], V [..., Sk, Dv], all f32 with one rank
  // and the same declared batch dims; Sq == Sk when causal.
  bool Shapes(const Match& m) const {
    for (NodeId n : {m.q, m.k, m.v, m.o}) {
      if (!g_.IsDeclared(n) || g_.var(n).dtype() != proto::FP32) return false;
    }
    const Dims q = VarDims(g_.var(m.q)), k = VarDims(g_.var(m.k)), v = VarDims(g_.var(m.v));
    const size_t r = q.size();
    if (r < 2 || k.size() != r || v.size() != r) return false;
    for (size_t i = 0; i + 2 < r; ++i) {
      if (q[i] != k[i] || q[i] != v[i]) return false;
    }
    return q[r - 1] == k[r - 1] && k[r - 2] == v[r - 2] && (!m.causal || q[r - 2] == k[r - 2]);
  }

  // The three grad ops of the pattern, all there and reading what they should.
  bool Backward(Match* m) const {
    float alpha = 0;
    if (m->out_mm_grad == kNoNode || m->softmax_grad == kNoNode) return false;
    if (!IsMatmul(m->out_mm_grad, "matmul_grad", false, &alpha) || alpha != 1.0f) return false;
    if (In(m->out_mm_grad, "X") != m->p || In(m->out_mm_grad, "Y") != m->v) return false;
    m->dout = In(m->out_mm_grad, "Out@GRAD");
    m->dp = Out(m->out_mm_grad, "X@GRAD");
    m->dv = Out(m->out_mm_grad, "Y@GRAD");
    if (m->dout == kNoNode || !Intermediate(m->dp) || g_.outputs(m->dp) != std::vector<NodeId>{m->softmax_grad}) {
      return false;
    }
    const NodeId smg = m->softmax_grad;
    if (!Unmarked(smg) || In(smg, "Out") != m->p || In(smg, "Out@GRAD") != m->dp) return false;
    if (!m->causal && Attrs(smg).at("axis") != Attrs(m->softmax).at("axis")) return false;
    m->ds = Out(smg, "X@GRAD");
    if (!Intermediate(m->ds)) return false;
    const std::vector<NodeId> ds_readers = g_.outputs(m->ds);
    if (ds_readers.empty()) return true;  // Q and K need no gradient: append_backward stops at dS
    if (ds_readers.size() != 1) return false;
    m->scores_mm_grad = ds_readers.front();
    if (!IsMatmul(m->scores_mm_grad, "matmul_grad", true, &alpha) || alpha != m->scale) return false;
    const NodeId mg = m->scores_mm_grad;
    if (In(mg, "X") != m->q || In(mg, "Y") != m->k || In(mg, "Out@GRAD") != m->ds) return false;
    m->dq = Out(mg, "X@GRAD");
    m->dk = Out(mg, "Y@GRAD");
    return true;
  }

  const Graph& g_;
  const AttentionFusionPassOptions& options_;
  const OpRegistry& registry_;
};

// "<O>.lse", numbered when a var of that name exists.
std::string LseName(const Graph& g, const std::string& out) {
  std::string name = out + ".lse";
  for (int k = 1; g.FindVar(name) != kNoNode; ++k) name = out + ".lse_" + std::to_string(k);
  return name;
}

void Rewrite(Graph& g, const Match& m) {
  proto::VarDesc lse_desc;
  lse_desc.set_name(LseName(g, g.VarName(m.o)));
  lse_desc.set_dtype(proto::FP32);
  const Dims q = VarDims(g.var(m.q));
  for (size_t i = 0; i + 1 < q.size(); ++i) lse_desc.add_dims(q[i]);
  lse_desc.set_stop_gradient(true);
  const NodeId lse = g.AddVarNode(lse_desc);

  proto::OpDesc fwd;
  fwd.set_type("fused_attention");
  SetAttr(&fwd, "scale", Attribute(m.scale));
  SetAttr(&fwd, "causal", Attribute(m.causal));
  g.ReplaceOps({m.scores_mm, m.softmax, m.out_mm}, fwd, {{"Q", {m.q}}, {"K", {m.k}}, {"V", {m.v}}},
               {{"Out", {m.o}}, {"LSE", {lse}}});
  if (m.out_mm_grad == kNoNode) return;
  proto::OpDesc grad = fwd;
  grad.set_type("fused_attention_grad");
  std::vector<NodeId> group = {m.out_mm_grad, m.softmax_grad};
  if (m.scores_mm_grad != kNoNode) group.push_back(m.scores_mm_grad);
  g.ReplaceOps(group, grad,
               {{"Q", {m.q}}, {"K", {m.k}}, {"V", {m.v}}, {"Out", {m.o}}, {"LSE", {lse}}, {"Out@GRAD", {m.dout}}},
               {{"Q@GRAD", {m.dq}}, {"K@GRAD", {m.dk}}, {"V@GRAD", {m.dv}}});
}

bool HasCycle(const Graph& g) {
  try {
    g.TopologicalOrder();
    return false;
  } catch (const Error&) {
    return true;
  }
}

}  // namespace

std::string AttentionFusionReport::ToString() const {
  if (fused.empty()) return "fused no attention";
  std::string s = "fused attention";
  for (size_t i = 0; i < fused.size(); ++i) {
    const Fused& f = fused[i];
    s += (i ? ", " : " ") + f.out + " (probs " + f.probs + (f.causal ? ", causal" : "") +
         (f.backward ? ", with backward)" : ", forward only)");
  }
  return s;
}

AttentionFusionPass::AttentionFusionPass(AttentionFusionPassOptions options, AttentionFusionReport* report,
                                         const OpRegistry& registry)
    : options_(std::move(options)), report_(report), registry_(registry) {}

bool AttentionFusionPass::Run(ir::Graph& graph) const {
  AttentionFusionReport report;
  std::set<NodeId> rejected;  // softmax ops whose fusion would close a cycle
  for (;;) {
    // Rescanned after each rewrite: the ids of untouched nodes stay valid.
    std::optional<Match> m;
    const Matcher matcher(graph, options_, registry_);
    for (NodeId op : graph.TopologicalOrder()) {
      if (rejected.count(op) || !(m = matcher.At(op))) continue;
      break;
    }
    if (!m) break;
    // Merging the grad ops could put an op between them on a cycle; the
    // rewrite is tried on a copy (node ids are kept) and kept when acyclic.
    Graph trial = graph;
    AttentionFusionReport::Fused f{graph.VarName(m->o), graph.VarName(m->p), m->causal,
                                   m->out_mm_grad != kNoNode};
    Rewrite(trial, *m);
    if (HasCycle(trial)) {
      rejected.insert(m->softmax);
      continue;
    }
    graph = std::move(trial);
    report.fused.push_back(std::move(f));
  }
  const bool changed = !report.fused.empty();
  if (report_ != nullptr) *report_ = std::move(report);
  return changed;
}

}  // namespace kiln
