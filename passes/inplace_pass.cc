#include "passes/inplace_pass.h"

#include <algorithm>
#include <optional>

#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/onednn/onednn_kernels.h"

namespace kiln {
namespace {

using ir::Graph;
using ir::NodeId;
using ir::kNoNode;

struct Skip {
  InplaceSkip reason;
  std::string detail;
};

// Why `op` may not write `out` into `x`'s buffer, or nothing when it may.
std::optional<Skip> CheckPair(const Graph& graph, NodeId op, NodeId x, NodeId out,
                              const std::set<std::string>& keep) {
  const std::string& xn = graph.VarName(x);
  const std::string& on = graph.VarName(out);
  if (!graph.IsDeclared(x) || !graph.IsDeclared(out)) {
    return Skip{InplaceSkip::kUndeclared, "'" + (graph.IsDeclared(x) ? on : xn) + "' is not declared"};
  }
  if (graph.var(x).persistable() || graph.var(out).persistable()) {
    return Skip{InplaceSkip::kPersistable, "'" + (graph.var(x).persistable() ? xn : on) + "' is persistable"};
  }
  if (keep.count(xn) || keep.count(on)) {
    return Skip{InplaceSkip::kKept, "'" + (keep.count(xn) ? xn : on) + "' is fed or fetched"};
  }
  if (graph.Producer(x) == kNoNode) return Skip{InplaceSkip::kNotWritten, "no op writes '" + xn + "'"};
  const std::vector<NodeId> readers = graph.outputs(x);
  if (readers.size() != 1) {
    std::string others;
    for (NodeId r : readers) {
      if (r != op) others += (others.empty() ? "" : ", ") + graph.OpLabel(r);
    }
    return Skip{InplaceSkip::kReadLater, "'" + xn + "' is also read by " + others};
  }
  const std::vector<NodeId> ins = graph.inputs(op);
  if (std::count(ins.begin(), ins.end(), x) != 1) {
    return Skip{InplaceSkip::kReadLater, "the op reads '" + xn + "' more than once"};
  }
  if (graph.FindVar(xn) != x) return Skip{InplaceSkip::kRewritten, "'" + xn + "' is written again later"};
  if (graph.VarVersions(on).size() != 1) {
    return Skip{InplaceSkip::kOutputVersions, "'" + on + "' is written by other ops too"};
  }
  if (graph.var(x).dtype() != graph.var(out).dtype() || graph.var(x).dims().size() != graph.var(out).dims().size() ||
      !std::equal(graph.var(x).dims().begin(), graph.var(x).dims().end(), graph.var(out).dims().begin())) {
    return Skip{InplaceSkip::kShapeMismatch,
                "'" + xn + "' is " + graph.VarShapeString(x) + ", '" + on + "' is " + graph.VarShapeString(out)};
  }
  return std::nullopt;
}

}  // namespace

const char* InplaceSkipName(InplaceSkip reason) {
  switch (reason) {
    case InplaceSkip::kNotWritten:
      return "not_written";
    case InplaceSkip::kPersistable:
      return "persistable";
    case InplaceSkip::kKept:
      return "kept";
    case InplaceSkip::kReadLater:
      return "read_later";
    case InplaceSkip::kRewritten:
      return "rewritten";
    case InplaceSkip::kOutputVersions:
      return "output_versions";
    case InplaceSkip::kShapeMismatch:
      return "shape_mismatch";
    case InplaceSkip::kUndeclared:
      return "undeclared";
  }
  return "?";
}

size_t InplaceReport::SavedBytes(int64_t batch) const {
  size_t total = 0;
  for (const Renamed& r : renamed) {
    int64_t n = 1;
    for (int64_t d : r.dims) n *= d < 0 ? batch : d;
    total += static_cast<size_t>(std::max<int64_t>(n, 0)) * SizeOf(r.dtype);
  }
  return total;
}

std::string InplaceReport::ToString() const {
  std::string s;
  for (const Renamed& r : renamed) {
    s += "in place: " + r.op + " writes '" + r.output + "' into '" + r.input + "' " + DataTypeName(r.dtype) +
         DimsToString(r.dims) + "\n";
  }
  for (const Skipped& k : skipped) {
    s += "not in place: " + k.op + " (" + InplaceSkipName(k.reason) + "): " + k.detail + "\n";
  }
  return s;
}

InplacePass::InplacePass(InplacePassOptions options, InplaceReport* report, const OpRegistry& registry)
    : options_(std::move(options)), report_(report), registry_(registry) {
  const std::vector<std::string>& types = options_.op_types.empty() ? OneDnnInplaceOps() : options_.op_types;
  for (const std::string& t : types) {
    if (registry_.Find(t) == nullptr) ThrowInvalidArgument("inplace_pass: unknown op type '", t, "'");
    op_types_.insert(t);
  }
}

bool InplacePass::Run(ir::Graph& graph) const { return Run(graph, report_); }

bool InplacePass::Run(ir::Graph& graph, InplaceReport* report) const {
  InplaceReport local;
  bool changed = false;
  for (NodeId op : graph.TopologicalOrder()) {
    const std::string& type = graph.op(op).type();
    if (!op_types_.count(type)) continue;
    const OpInfo* info = registry_.Find(type);
    if (info == nullptr || info->inplace.empty()) continue;
    // The first pair whose slots are both present decides (every listed op has one).
    for (const auto& [in_slot, out_slot] : info->inplace) {
      const std::vector<NodeId> xs = graph.InputSlot(op, in_slot);
      const std::vector<NodeId> outs = graph.OutputSlot(op, out_slot);
      if (xs.empty() || outs.empty() || xs[0] == kNoNode || outs[0] == kNoNode) continue;
      const NodeId x = xs[0], out = outs[0];
      if (std::optional<Skip> skip = CheckPair(graph, op, x, out, options_.keep_vars)) {
        local.skipped.push_back({graph.OpLabel(op), type, skip->reason, skip->detail});
        break;
      }
      const proto::VarDesc& desc = graph.var(out);
      local.renamed.push_back({graph.OpLabel(op), type, graph.VarName(x), graph.VarName(out),
                               FromProto(desc.dtype()), VarDims(desc)});
      const std::string x_name = graph.VarName(x);
      graph.RenameVar(out, x_name, x);
      changed = true;
      break;
    }
  }
  if (report != nullptr) *report = std::move(local);
  return changed;
}

}  // namespace kiln
