#include "compiler/lowering/epilogue.h"

#include <algorithm>

namespace kiln::jit {
namespace {

bool MatchBias(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i, const std::string& out,
               std::string_view step, const EpilogueRule& rule, Epilogue* e) {
  const int j = OnlyPendingConsumer(c, units, unit_of, i, out, step, {"elementwise_add"});
  if (j < 0 || c.In(j, "X") != out) return false;
  const std::string b = c.In(j, "Y");
  const int64_t axis = c.Attr<int64_t>(j, "axis");
  if (b.empty() || !c.IsF32(b) || c.dims(b) != rule.bias_dims) return false;
  if (std::find(rule.bias_axes.begin(), rule.bias_axes.end(), axis) == rule.bias_axes.end()) return false;
  if (c.Producer(j, b) >= 0) return false;
  e->ops.push_back(j);
  e->bias = b;
  e->result = c.Out(j, "Out");
  return true;
}

void MatchActivation(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i,
                     std::string_view step, Epilogue* e) {
  const int k = OnlyPendingConsumer(c, units, unit_of, i, e->result, step, {"relu", "gelu"});
  if (k < 0 || c.In(k, "X") != e->result) return;
  e->activation = c.type(k) == "relu"               ? MatmulActivation::kRelu
                  : c.Attr<bool>(k, "approximate") ? MatmulActivation::kGeluTanh
                                                   : MatmulActivation::kGelu;
  e->ops.push_back(k);
  e->result = c.Out(k, "Out");
}

}  // namespace

Epilogue MatchEpilogue(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i,
                       const std::string& out, std::string_view step, const EpilogueRule& rule,
                       const std::set<std::string>& operands) {
  Epilogue e;
  e.result = out;
  const bool bias = MatchBias(c, units, unit_of, i, out, step, rule, &e);
  if (bias || !rule.activation_needs_bias) MatchActivation(c, units, unit_of, e.ops.empty() ? i : e.ops.back(), step, &e);
  if (e.ops.empty()) return e;
  // Everything between the op and the last op taken must leave the fused
  // vars alone: they all happen at the op's place now.
  std::set<std::string> writes = {out};
  std::set<int> fused = {unit_of[i]};
  for (int op : e.ops) {
    writes.insert(c.writes(op).begin(), c.writes(op).end());
    fused.insert(unit_of[op]);
  }
  std::set<std::string> reads = operands;
  if (!e.bias.empty()) reads.insert(e.bias);
  if (!NothingBetweenTouches(units, unit_of[i], unit_of[e.ops.back()], reads, writes, fused)) return Epilogue{};
  return e;
}

}  // namespace kiln::jit
