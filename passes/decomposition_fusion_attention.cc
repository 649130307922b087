#include "passes/decomposition_fusion_attention.h"

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "framework/error.h"
#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/scope.h"
#include "passes/decomposition_fusion_match.h"

namespace kiln::decomposition_fusion {
namespace {

using ir::Graph;
using ir::kNoNode;
using ir::NodeId;

// Ops a constant mask or scale may pass through on its way from the
// importer's initializers: pure, and cheap at the sizes of a mask.
const std::set<std::string>& FoldableOps() {
  static const std::set<std::string> ops = {
      "slice",         "equal",           "not_equal",       "less_than",      "greater_than", "logical_not",
      "expand_v2",     "reshape2",        "unsqueeze2",      "squeeze2",       "transpose2",   "cast",
      "elementwise_mul", "elementwise_add", "elementwise_sub", "elementwise_div", "scale",       "assign"};
  return ops;
}
constexpr int kMaxFoldedOps = 32;

// The pieces of one attention's scores, found from its softmax.
struct Match {
  NodeId softmax = kNoNode, scores_mm = kNoNode, q = kNoNode, k = kNoNode, s = kNoNode;
  NodeId k_transpose = kNoNode;    // transpose2 whose perm is fixed up (keys given as K^T)
  std::vector<NodeId> group;       // ops the new matmul replaces
  std::vector<NodeId> mask_ops;    // ops that computed the constant mask
  float alpha = 1.0f;
  bool causal = false;
};

class Matcher : public decomposition_fusion::GraphMatcher {
 public:
  using GraphMatcher::GraphMatcher;

  std::optional<Match> At(NodeId sm) const {
    if (!Is(sm, "softmax")) return std::nullopt;
    Match m;
    m.softmax = sm;
    m.s = In(sm, "X");
    const NodeId p = Out(sm, "Out");
    if (!Intermediate(m.s) || g_.outputs(m.s).size() != 1 || !Intermediate(p)) return std::nullopt;
    const Dims s = VarDims(g_.var(m.s));
    const int64_t axis = Attr<int64_t>(sm, "axis");
    if (s.size() < 2 || (axis != -1 && axis != static_cast<int64_t>(s.size()) - 1)) return std::nullopt;
    // Only an attention: P read by one matmul as its X.
    const std::vector<NodeId> p_readers = g_.outputs(p);
    if (p_readers.size() != 1 || !Is(p_readers[0], "matmul") || In(p_readers[0], "X") != p) return std::nullopt;
    NodeId cur = m.s;
    if (!Mask(&m, &cur, s)) return std::nullopt;
    if (m.causal && s[s.size() - 1] != s[s.size() - 2]) return std::nullopt;
    cur = Scales(&m, cur, s);
    // The scores' matmul.
    const NodeId mm = g_.Producer(cur);
    if (mm == kNoNode || !Is(mm, "matmul") || Attr<bool>(mm, "transpose_X") || !SingleUse(cur)) return std::nullopt;
    m.scores_mm = mm;
    m.group.push_back(mm);
    m.alpha *= Attr<float>(mm, "alpha");
    m.q = In(mm, "X");
    m.k = In(mm, "Y");
    if (m.q == kNoNode || m.k == kNoNode || m.q == m.k) return std::nullopt;
    if (!Attr<bool>(mm, "transpose_Y")) {
      // Keys given as K^T by a transpose2 the matmul alone reads: the
      // transpose keeps the keys' row order instead, and the matmul
      // transposes.
      const NodeId tr = g_.Producer(m.k);
      if (tr == kNoNode || !Is(tr, "transpose2") || !SingleUse(m.k)) return std::nullopt;
      m.k_transpose = tr;
    }
    // Queries divided (multiplied) by a constant the matmul alone reads.
    if (const NodeId qs = g_.Producer(m.q); qs != kNoNode && SingleUse(m.q)) {
      NodeId other = kNoNode;
      if (const std::optional<float> c = ScaleBy(qs, m.q, &other)) {
        m.alpha *= *c;
        m.q = other;
        m.group.push_back(qs);
      }
    }
    if (!Shapes(m, s)) return std::nullopt;
    return m;
  }

  // The value of `v` when only constants and foldable ops produce it; the
  // ops that computed it go to *ops.
  std::optional<Tensor> Fold(NodeId v, std::vector<NodeId>* ops) const {
    std::vector<NodeId> order;
    std::set<NodeId> seen;
    std::set<NodeId> leaves;
    std::function<bool(NodeId)> visit = [&](NodeId var) -> bool {
      if (var == kNoNode || !g_.IsDeclared(var) || g_.VarVersions(g_.VarName(var)).size() != 1) return false;
      if (IsConstant(var)) {
        leaves.insert(var);
        return true;
      }
      const NodeId op = g_.Producer(var);
      if (op == kNoNode || g_.var(var).persistable() || !FoldableOps().count(g_.op(op).type())) return false;
      if (seen.count(op)) return true;
      seen.insert(op);
      if (static_cast<int>(seen.size()) > kMaxFoldedOps) return false;
      for (NodeId in : g_.inputs(op)) {
        if (!visit(in)) return false;
      }
      order.push_back(op);
      return true;
    };
    if (!visit(v)) return std::nullopt;
    proto::ProgramDesc program;
    proto::BlockDesc* block = program.add_blocks();
    block->set_idx(0);
    block->set_parent_idx(-1);
    std::set<std::string> declared;
    auto declare = [&](NodeId var) {
      if (declared.insert(g_.VarName(var)).second) *block->add_vars() = g_.var(var);
    };
    Scope scope;
    for (NodeId leaf : leaves) {
      declare(leaf);
      *scope.Var(g_.VarName(leaf))->GetMutable() = options_.constants.at(g_.VarName(leaf));
    }
    for (NodeId op : order) {
      for (NodeId out : g_.outputs(op)) declare(out);
      *block->add_ops() = g_.op(op);
    }
    try {
      ExecutorOptions eo;
      eo.free_intermediates = false;
      Executor(eo, registry_).RunProgram(program, scope);
    } catch (const Error&) {
      return std::nullopt;
    }
    const Variable* var = scope.FindVar(g_.VarName(v));
    if (var == nullptr || !var->Get().initialized()) return std::nullopt;
    ops->insert(ops->end(), order.begin(), order.end());
    return var->Get();
  }

 private:
  bool SingleUse(NodeId v) const { return Intermediate(v) && g_.outputs(v).size() == 1; }
  bool IsConstant(NodeId v) const {
    const proto::VarDesc& d = g_.var(v);
    return d.persistable() && d.stop_gradient() && g_.Producer(v) == kNoNode && options_.constants.count(d.name());
  }
  bool SameDims(NodeId v, const Dims& dims) const { return g_.IsDeclared(v) && VarDims(g_.var(v)) == dims; }

  // The mask in front of the softmax: where(causal, -inf, S) or S + M with
  // M 0 on and below the diagonal and -inf above it. *cur moves to S.
  bool Mask(Match* m, NodeId* cur, const Dims& s) const {
    const NodeId op = g_.Producer(*cur);
    if (op == kNoNode) return false;
    const size_t r = s.size();
    if (Is(op, "where")) {
      std::vector<NodeId> ops;
      const std::optional<Tensor> cond = Fold(In(op, "Condition"), &ops);
      const std::optional<Tensor> fill = Fold(In(op, "X"), &ops);
      const NodeId scores = In(op, "Y");
      if (!cond || !fill || !Intermediate(scores) || !SameDims(scores, s)) return false;
      if (cond->dtype() != DataType::kBOOL || !Causal(*cond, s, [](const Tensor& t, int64_t i) {
            return t.data<bool>()[i];
          })) {
        return false;
      }
      if (fill->dtype() != DataType::kFP32) return false;
      for (int64_t i = 0; i < fill->numel(); ++i) {
        if (fill->data<float>()[i] != -std::numeric_limits<float>::infinity()) return false;
      }
      m->causal = true;
      m->group.push_back(op);
      m->mask_ops = ops;
      *cur = scores;
      return true;
    }
    if (Is(op, "elementwise_add") && Attr<int64_t>(op, "axis") == -1 && SameDims(Out(op, "Out"), s)) {
      for (const char* slot : {"X", "Y"}) {
        std::vector<NodeId> ops;
        const NodeId mask = In(op, slot);
        const NodeId scores = In(op, slot[0] == 'X' ? "Y" : "X");
        if (!Intermediate(scores) || !SameDims(scores, s)) continue;
        const std::optional<Tensor> add = Fold(mask, &ops);
        if (!add || add->dtype() != DataType::kFP32 || add->dims().size() > r) continue;
        const float inf = std::numeric_limits<float>::infinity();
        const bool causal = Causal(*add, s, [inf](const Tensor& t, int64_t i) { return t.data<float>()[i] == -inf; });
        bool zeros_else = true;
        for (int64_t i = 0; i < add->numel(); ++i) {
          const float x = add->data<float>()[i];
          zeros_else = zeros_else && (x == 0.0f || x == -inf);
        }
        if (!causal || !zeros_else) continue;
        m->causal = true;
        m->group.push_back(op);
        m->mask_ops = ops;
        *cur = scores;
        return true;
      }
      return false;
    }
    return true;  // no mask
  }

  // True iff `t`, broadcast against scores of dims `s` (its last two dims
  // those of s, no more dims than s), has `masked` exactly where j > i.
  template <typename Pred>
  static bool Causal(const Tensor& t, const Dims& s, Pred masked) {
    const Dims d = t.dims();
    const size_t r = s.size();
    if (d.size() < 2 || d.size() > r || d[d.size() - 1] != s[r - 1] || d[d.size() - 2] != s[r - 2]) return false;
    for (size_t i = 0; i + 2 < d.size(); ++i) {
      if (d[i] != 1 && d[i] != s[r - d.size() + i]) return false;
    }
    const int64_t cols = s[r - 1], rows = s[r - 2];
    for (int64_t n = 0; n < t.numel(); ++n) {
      const int64_t j = n % cols, i = (n / cols) % rows;
      if (masked(t, n) != (j > i)) return false;
    }
    return true;
  }

  // Multiplications and divisions of the scores by constant scalars,
  // folded into alpha; returns the scores before them.
  NodeId Scales(Match* m, NodeId cur, const Dims& s) const {
    for (;;) {
      const NodeId op = g_.Producer(cur);
      NodeId other = kNoNode;
      if (op == kNoNode || !SingleUse(cur)) return cur;
      const std::optional<float> c = ScaleBy(op, cur, &other);
      if (!c || !SameDims(other, s)) return cur;
      m->alpha *= *c;
      m->group.push_back(op);
      cur = other;
    }
  }

  // For op = elementwise_mul(v, c) (either order) or elementwise_div(v, c),
  // c a constant scalar and `out` its output of v's dims: the factor
  // (c or 1/c) and v in *other.
  std::optional<float> ScaleBy(NodeId op, NodeId out, NodeId* other) const {
    const bool mul = Is(op, "elementwise_mul"), div = Is(op, "elementwise_div");
    if ((!mul && !div) || Attr<int64_t>(op, "axis") != -1 || Out(op, "Out") != out) return std::nullopt;
    for (const char* slot : {"Y", "X"}) {
      if (div && slot[0] == 'X') break;
      const NodeId c = In(op, slot);
      const NodeId v = In(op, slot[0] == 'X' ? "Y" : "X");
      if (c == kNoNode || v == kNoNode || !IsConstant(c) || !SameDims(v, VarDims(g_.var(out)))) continue;
      const Tensor& t = options_.constants.at(g_.VarName(c));
      if (t.dtype() != DataType::kFP32 || t.numel() != 1) continue;
      const float x = t.data<float>()[0];
      if (!std::isfinite(x) || x == 0.0f) continue;
      *other = v;
      return div ? 1.0f / x : x;
    }
    return std::nullopt;
  }

  // Q [..., Sq, D], K [..., Sk, D] (after the transpose's fix-up), scores
  // [..., Sq, Sk], all f32.
  bool Shapes(const Match& m, const Dims& s) const {
    if (!F32(m.q) || !F32(m.k)) return false;
    const Dims q = VarDims(g_.var(m.q));
    Dims k = VarDims(g_.var(m.k));
    const size_t r = s.size();
    if (q.size() != r || k.size() != r) return false;
    if (m.k_transpose != kNoNode) std::swap(k[r - 1], k[r - 2]);
    for (size_t i = 0; i + 2 < r; ++i) {
      if (q[i] != s[i] || k[i] != s[i]) return false;
    }
    return q[r - 2] == s[r - 2] && k[r - 2] == s[r - 1] && q[r - 1] == k[r - 1] && q[r - 1] > 0;
  }
};

void Rewrite(Graph& g, const Match& m, const std::set<std::string>& keep) {
  if (m.k_transpose != kNoNode) {
    proto::OpDesc* tr = g.mutable_op(m.k_transpose);
    for (auto& a : *tr->mutable_attrs()) {
      if (a.name() != "axis") continue;
      const int n = a.ints_size();
      const int64_t last = a.ints(n - 1);
      a.set_ints(n - 1, a.ints(n - 2));
      a.set_ints(n - 2, last);
    }
    proto::VarDesc* kd = g.mutable_var(m.k);
    const int n = kd->dims_size();
    const int64_t last = kd->dims(n - 1);
    kd->set_dims(n - 1, kd->dims(n - 2));
    kd->set_dims(n - 2, last);
  }
  proto::OpDesc mm;
  mm.set_type("matmul");
  SetAttr(&mm, "transpose_X", Attribute(false));
  SetAttr(&mm, "transpose_Y", Attribute(true));
  SetAttr(&mm, "alpha", Attribute(m.alpha));
  g.ReplaceOps(m.group, mm, {{"X", {m.q}}, {"Y", {m.k}}}, {{"Out", {m.s}}});
  if (m.causal) {
    proto::OpDesc* sm = g.mutable_op(m.softmax);
    sm->set_type("fused_softmax_mask_upper_triangle");
    sm->clear_attrs();
  }
  // The mask's ops, now unread, go (last first, so their inputs die too).
  for (auto it = m.mask_ops.rbegin(); it != m.mask_ops.rend(); ++it) {
    if (g.IsRemoved(*it)) continue;
    bool dead = true;
    for (NodeId out : g.outputs(*it)) {
      const proto::VarDesc& d = g.var(out);
      dead = dead && g.outputs(out).empty() && !d.persistable() && !keep.count(d.name());
    }
    if (!dead) continue;
    const std::vector<NodeId> outs = g.outputs(*it);
    g.RemoveNode(*it);
    for (NodeId out : outs) g.RemoveNode(out);
  }
}

}  // namespace

std::vector<std::string> CanonicalizeAttention(ir::Graph& graph, const DecompositionFusionPassOptions& options,
                                               const OpRegistry& registry) {
  std::vector<std::string> done;
  std::set<NodeId> tried;
  for (;;) {
    const Matcher matcher(graph, options, registry);
    std::optional<Match> m;
    for (NodeId op : graph.TopologicalOrder()) {
      if (tried.count(op)) continue;
      tried.insert(op);
      if ((m = matcher.At(op))) break;
    }
    if (!m) break;
    const std::string probs = graph.VarName(graph.OutputSlot(m->softmax, "Out").at(0));
    Rewrite(graph, *m, options.keep_vars);
    done.push_back(m->causal ? probs + " (causal)" : probs);
  }
  return done;
}

}  // namespace kiln::decomposition_fusion
