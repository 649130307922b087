#include "compiler/lowering/conv_epilogue.h"

#include "compiler/lowering/epilogue.h"
#include "compiler/lowering/units/onednn_conv.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kConvEpilogueStep;

// The conv2d at op `i` with what follows it; nullptr when nothing follows
// that a primitive could fuse.
std::unique_ptr<Unit> MatchAt(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i) {
  const std::string in = c.In(i, "Input"), filter = c.In(i, "Filter"), out = c.Out(i, "Output");
  if (in.empty() || filter.empty() || out.empty() || !c.IsF32(in) || !c.IsF32(filter)) return nullptr;
  FusedConvSpec spec;
  spec.input_dims = c.dims(in);
  spec.filter_dims = c.dims(filter);
  if (spec.input_dims.size() != 4 || spec.filter_dims.size() != 4) return nullptr;
  spec.strides = c.Attr<std::vector<int64_t>>(i, "strides");
  spec.paddings = c.Attr<std::vector<int64_t>>(i, "paddings");
  spec.dilations = c.Attr<std::vector<int64_t>>(i, "dilations");
  spec.groups = c.Attr<int64_t>(i, "groups");
  spec.compute = c.options().amp_compute;
  // A [C_out] bias on the channel axis, then relu or gelu (either alone too).
  const EpilogueRule rule{{spec.filter_dims[0]}, {1}, /*activation_needs_bias=*/false};
  const Epilogue e = MatchEpilogue(c, units, unit_of, i, out, kStep, rule, {in, filter});
  if (e.ops.empty()) return nullptr;
  spec.bias = !e.bias.empty();
  spec.activation = e.activation;
  std::vector<int> ops = {i};
  ops.insert(ops.end(), e.ops.begin(), e.ops.end());
  return std::make_unique<OneDnnConvUnit>(kStep, ops, spec, OneDnnConvUnit::Operands{in, filter, e.bias, e.result});
}

}  // namespace

Units FuseConvEpilogue(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().use_onednn || !c.options().fuse_elementwise) return units;
  const std::vector<int> unit_of = UnitOfOps(c, units);
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;
    const int i = PendingOpOf(*units[u]);
    if (i < 0 || c.type(i) != "conv2d" || c.Excluded(kStep, i)) continue;
    std::unique_ptr<Unit> conv = MatchAt(c, units, unit_of, i);
    if (!conv) continue;
    trace.Match(OpList(c, conv->ops()) + " -> " + conv->Describe(c));
    for (int op : conv->ops()) units[unit_of[op]].reset();
    units[u] = std::move(conv);
  }
  Compact(&units);
  return units;
}

}  // namespace kiln::jit
