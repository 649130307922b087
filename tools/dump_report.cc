#include "tools/dump_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "framework/ir/graph.h"
#include "framework/op_desc.h"

namespace kiln::tools {
namespace {

std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// Markdown table cells: no pipes, no newlines.
std::string Cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string Ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", ms);
  return buf;
}

// "matmul x2, elementwise_add, relu": types in order of first use.
std::string OpTypes(const JitSubgraph& sg) {
  std::vector<std::string> order;
  std::map<std::string, int> count;
  for (const auto& op : sg.block.ops()) {
    if (count[op.type()]++ == 0) order.push_back(op.type());
  }
  for (auto& t : order) {
    if (count[t] > 1) t += " x" + std::to_string(count[t]);
  }
  return Join(order, ", ");
}

// "x f32[32,64]" per var, shapes from the compiled object's buffer plan.
std::vector<std::string> VarsWithShapes(const jit::CompiledObject& obj, runtime::BufferRole role,
                                        const std::vector<std::string>& names) {
  std::vector<std::string> out(names.size());
  for (size_t i = 0; i < names.size(); ++i) out[i] = names[i];
  for (size_t i = 0; i < obj.signature.inputs.size() && role == runtime::BufferRole::kInput; ++i) {
    const auto& in = obj.signature.inputs[i];
    out[i] += std::string(" ") + DataTypeName(in.dtype) + DimsToString(in.dims);
  }
  if (role == runtime::BufferRole::kOutput) {
    for (size_t i = 0; i < names.size() && i < obj.output_dims.size(); ++i) {
      out[i] += std::string(" ") + DataTypeName(obj.output_dtypes[i]) + DimsToString(obj.output_dims[i]);
    }
  }
  return out;
}

size_t CodeBytes(const jit::CompiledObject& obj) {
  size_t n = 0;
  for (const auto& ins : obj.program.instructions) n += ins.kernel->code_size();
  return n;
}

// Short kernel description: generated code by size and the ops it fuses,
// everything else by its own description.
std::string ShortKernel(const runtime::Kernel& k) {
  if (k.code_size() > 0) {
    return k.name() + " (generated, " + std::to_string(k.code_size()) + " B: " + Join(k.fused_ops(), ", ") + ")";
  }
  return k.name() + " (" + k.Describe() + ")";
}

// A cluster's id among `rows` ("c1"), or its key when it is not there.
std::string NameOf(const std::vector<ClusterRow>& rows, const std::string& key) {
  for (const ClusterRow& row : rows) {
    if (row.key == key) return row.id;
  }
  return key;
}

std::string ExclusionProgram(const ExcludedOp& e) { return e.program.empty() ? "" : e.program + ": "; }

// The reorders of one launch of every listed object, and how many objects
// were listed.
onednn::ReorderTotals AllReorders(const std::vector<ClusterRow>& rows, size_t* listed) {
  onednn::ReorderTotals all;
  *listed = 0;
  for (const ClusterRow& row : rows) {
    for (const onednn::ReorderTotals& t : row.reorders) {
      all.Add(t);
      ++*listed;
    }
  }
  return all;
}

// index.md's last section (after the cache statistics, so the lines above
// keep their numbers): a line per listed object and the total.
std::string ReordersMarkdown(const std::vector<ClusterRow>& rows) {
  size_t listed = 0;
  const onednn::ReorderTotals all = AllReorders(rows, &listed);
  if (listed == 0) return "";
  std::string out = "\n## oneDNN reorders\n\nThe layout changes oneDNN runs in one launch of each cluster (once a "
                    "training step), listed op by op in `cluster_<id>/reorders.txt`.\n\n";
  for (const ClusterRow& row : rows) {
    for (size_t i = 0; i < row.reorders.size() && i < row.objects.size(); ++i) {
      const std::string which = row.objects.size() > 1 ? " " + row.objects[i]->signature.ToString() : "";
      out += "- " + row.id + which + ": " + row.reorders[i].ToString() + "\n";
    }
  }
  return out + "- total: " + all.ToString() + " a step\n";
}

}  // namespace

std::string IndexMarkdown(const std::string& preamble, const std::vector<ClusterRow>& rows,
                          const std::vector<ExcludedOp>& excluded, const jit::JitStats& stats) {
  std::string out = "# kiln dump\n\n" + preamble + "\n";
  out += "## Clusters\n\n";
  out += "One row per cluster and shape signature. Kernels: generated (Xbyak) kernels with their code size and the "
         "ops they fuse, oneDNN primitives with the implementation oneDNN chose, framework kernels by op type. "
         "Columns marked (timing) change from run to run.\n\n";
  out += "| id | key | ops | op types | inputs | outputs | kernels | code bytes | arena bytes planned / without reuse "
         "| compile ms (timing) |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ClusterRow& row : rows) {
    const std::string head = "| " + row.id + " | " + row.key + " | " + std::to_string(row.subgraph->block.ops_size()) +
                             " | " + Cell(OpTypes(*row.subgraph)) + " | ";
    if (row.objects.empty()) {
      out += head + Cell(Join(row.subgraph->inputs, ", ")) + " | " + Cell(Join(row.subgraph->outputs, ", ")) +
             " | not compiled: " + Cell(row.failure) + " | - | - | - |\n";
      continue;
    }
    for (const auto& obj : row.objects) {
      std::vector<std::string> kernels;
      for (const auto& ins : obj->program.instructions) {
        kernels.push_back(Cell(ins.kernel->name() + ": " + ins.kernel->Describe()));
      }
      out += head + Cell(Join(VarsWithShapes(*obj, runtime::BufferRole::kInput, obj->input_names), "<br>")) +
             " | " + Cell(Join(VarsWithShapes(*obj, runtime::BufferRole::kOutput, obj->output_names), "<br>")) +
             " | " + Join(kernels, "<br>") + " | " + std::to_string(CodeBytes(*obj)) + " | " +
             std::to_string(obj->program.plan.arena_bytes) + " / " +
             std::to_string(obj->program.plan.arena_bytes_no_reuse) + " | " + Ms(obj->compile_ms) + " |\n";
    }
  }
  out += "\n## Ops left out of clusters\n\n";
  if (excluded.empty()) {
    out += "None: every op is in a cluster.\n";
  } else {
    out += "| op | type | reason | detail |\n|---|---|---|---|\n";
    for (const ExcludedOp& e : excluded) {
      out += "| " + Cell(ExclusionProgram(e) + e.exclusion.op) + " | " + e.exclusion.type + " | " +
             JitExclusionName(e.exclusion.reason) + " | " + Cell(e.exclusion.detail) + " |\n";
    }
  }
  out += "\nReasons: not_lowerable (the op's registry entry has no JIT lowering), undeclared_var, not_allowed "
         "(--jit_allow_ops does not name it), denied (--jit_deny_ops names it), cycle (merging it with its "
         "neighbours would put another op on a cycle through the cluster), too_small (its cluster has fewer than "
         "--jit_min_cluster_size ops).\n";
  out += "\n## Cache statistics\n\n";
  out += "- compiles: " + std::to_string(stats.compiles) + ", cache hits: " + std::to_string(stats.hits) +
         ", evictions: " + std::to_string(stats.evictions) + ", failures: " + std::to_string(stats.failures) +
         ", units fallen back alone: " + std::to_string(stats.unit_fallbacks) + " (see each cluster's lowering.txt)\n";
  out += "- compile time (timing): " + Ms(stats.compile_ms) + " ms\n";
  out += "- shadow checks (--jit_shadow_every): " + std::to_string(stats.shadow_checks) +
         " launches compared with the framework ops; clusters denied by a failed check: " +
         (stats.shadow_failures.empty() ? "none" : std::to_string(stats.shadow_failures.size())) + "\n";
  for (const jit::ShadowFailure& f : stats.shadow_failures) {
    out += "  - " + NameOf(rows, f.key) + " (key " + f.key + "), " +
           (f.step > 0 ? "step " + std::to_string(f.step) + ", " : "") + "launch " + std::to_string(f.launch) +
           ": " + Cell(f.ToString()) + "\n";
  }
  return out + ReordersMarkdown(rows);
}

std::string ExplainText(const std::vector<ClusterRow>& rows, const std::vector<ExcludedOp>& excluded,
                        const jit::JitStats& stats) {
  std::string out = "kiln jit explain: " + std::to_string(rows.size()) + " clusters, " +
                    std::to_string(excluded.size()) + " ops left out\n";
  for (const ClusterRow& row : rows) {
    const std::string head = "  " + row.id + " " + row.key + ": " + std::to_string(row.subgraph->block.ops_size()) +
                             " ops (" + OpTypes(*row.subgraph) + ")";
    if (row.objects.empty()) {
      out += head + ": " + row.failure + "\n";
      continue;
    }
    for (const auto& obj : row.objects) {
      std::vector<std::string> kernels;
      for (const auto& ins : obj->program.instructions) kernels.push_back(ShortKernel(*ins.kernel));
      out += head + " " + obj->signature.ToString() + "\n      -> " + Join(kernels, ", ") + "\n";
    }
  }
  for (const ExcludedOp& e : excluded) {
    out += "  left out " + ExclusionProgram(e) + e.exclusion.op + ": " + JitExclusionName(e.exclusion.reason) +
           " (" + e.exclusion.detail + ")\n";
  }
  out += "  cache: " + std::to_string(stats.compiles) + " compiles (" + Ms(stats.compile_ms) + " ms, CPU " +
         Ms(stats.compile_cpu_ms) + " ms), " +
         std::to_string(stats.hits) + " hits, " + std::to_string(stats.evictions) + " evictions, " +
         std::to_string(stats.failures) + " failed, " + std::to_string(stats.unit_fallbacks) +
         " units fell back alone\n";
  size_t listed = 0;
  const onednn::ReorderTotals reorders = AllReorders(rows, &listed);
  if (listed > 0) {
    out += "  oneDNN reorders: " + reorders.ToString() + " a step (one launch of each cluster; reorders.txt)\n";
  }
  if (stats.shadow_checks > 0 || !stats.shadow_failures.empty()) {
    out += "  shadow checks: " + std::to_string(stats.shadow_checks) + ", denied:";
    for (const jit::ShadowFailure& f : stats.shadow_failures) out += " " + NameOf(rows, f.key) + " (" + f.var + ")";
    out += stats.shadow_failures.empty() ? " none\n" : "\n";
  }
  return out;
}

const char* ClusterFill(size_t i) {
  static const char* kFills[] = {"#e8f0fe", "#fde8e8", "#e6f4ea", "#fef7e0", "#f3e8fd", "#e8f7f9"};
  return kFills[i % 6];
}

std::string DotQuote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

namespace {


// The cluster whose box holds each node: its ops, and the vars only its ops
// produce and read that are not among its outputs.
std::map<ir::NodeId, int> ClusterOfNodes(const ir::Graph& g, const BuildJitReport& report) {
  std::map<std::string, int> cluster_of_label;
  for (size_t c = 0; c < report.clusters.size(); ++c) {
    for (const auto& label : report.clusters[c].ops) cluster_of_label[label] = static_cast<int>(c);
  }
  std::map<ir::NodeId, int> cluster_of;  // op and var nodes inside a box
  for (ir::NodeId op : g.OpNodes()) {
    auto it = cluster_of_label.find(g.OpLabel(op));
    if (it != cluster_of_label.end()) cluster_of[op] = it->second;
  }
  for (ir::NodeId v : g.VarNodes()) {
    const ir::NodeId producer = g.Producer(v);
    if (producer == ir::kNoNode || !cluster_of.count(producer)) continue;
    const int c = cluster_of[producer];
    const auto& outs = report.clusters[c].outputs;
    if (std::find(outs.begin(), outs.end(), g.VarName(v)) != outs.end()) continue;
    bool inside = !g.outputs(v).empty();
    for (ir::NodeId reader : g.outputs(v)) inside = inside && cluster_of.count(reader) && cluster_of[reader] == c;
    if (inside) cluster_of[v] = c;
  }
  return cluster_of;
}

}  // namespace

std::string ClusteredDot(const proto::ProgramDesc& program, const BuildJitReport& report,
                         const std::vector<std::string>& ids) {
  const ir::Graph g = ir::Graph::FromBlock(program.blocks(0));
  std::map<ir::NodeId, int> cluster_of = ClusterOfNodes(g, report);
  std::map<std::string, std::string> left_out;  // op label -> why
  for (const auto& e : report.excluded) {
    left_out[e.op] = "left out: " + std::string(JitExclusionName(e.reason)) + (e.detail.empty() ? "" : " (" + e.detail + ")");
  }
  auto node_line = [&](ir::NodeId n) {
    const std::string id = "n" + std::to_string(n);
    if (g.IsOp(n)) {
      auto why = left_out.find(g.OpLabel(n));
      // An op left out of clusters: dashed, its reason on hover.
      const std::string extra = why == left_out.end() ? "" : ", style=dashed, tooltip=" + DotQuote(g.OpLabel(n) + ": " + why->second);
      return id + " [shape=box, label=" + DotQuote(g.op(n).type()) + extra + "];\n";
    }
    std::string label = g.VarName(n);
    if (g.VarVersion(n) > 0) label += " (v" + std::to_string(g.VarVersion(n)) + ")";
    label += "\n" + g.VarShapeString(n);
    std::string attrs = "shape=ellipse, label=" + DotQuote(label);
    if (g.IsDeclared(n) && g.var(n).persistable()) attrs += ", style=filled, fillcolor=lightgrey";
    return id + " [" + attrs + "];\n";
  };
  std::string out = "digraph kiln {\n  rankdir=TB;\n  node [fontsize=10];\n";
  std::vector<std::vector<ir::NodeId>> boxes(report.clusters.size());
  std::vector<ir::NodeId> all = g.VarNodes();
  for (ir::NodeId op : g.OpNodes()) all.push_back(op);
  std::sort(all.begin(), all.end());
  for (ir::NodeId n : all) {
    auto it = cluster_of.find(n);
    if (it == cluster_of.end()) {
      out += "  " + node_line(n);
    } else {
      boxes[it->second].push_back(n);
    }
  }
  for (size_t c = 0; c < boxes.size(); ++c) {
    // A coloured box that links to the cluster's section of index.html.
    out += "  subgraph cluster_" + ids[c] + " {\n    label=" + DotQuote(ids[c] + " jit_launch " + report.clusters[c].key) +
           ";\n    style=\"rounded,filled\";\n    color=blue;\n    fillcolor=" + DotQuote(ClusterFill(c)) +
           ";\n    URL=" + DotQuote("#" + ids[c]) + ";\n    tooltip=" +
           DotQuote(ids[c] + ": " + std::to_string(report.clusters[c].ops.size()) + " ops; click for its kernels") + ";\n";
    for (ir::NodeId n : boxes[c]) out += "    " + node_line(n);
    out += "  }\n";
  }
  for (ir::NodeId op : g.OpNodes()) {
    const std::string id = "n" + std::to_string(op);
    for (const auto& slot : g.op(op).inputs()) {
      for (ir::NodeId v : g.InputSlot(op, slot.name())) {
        if (v != ir::kNoNode) out += "  n" + std::to_string(v) + " -> " + id + " [label=" + DotQuote(slot.name()) + "];\n";
      }
    }
    for (const auto& slot : g.op(op).outputs()) {
      for (ir::NodeId v : g.OutputSlot(op, slot.name())) {
        if (v != ir::kNoNode) out += "  " + id + " -> n" + std::to_string(v) + " [label=" + DotQuote(slot.name()) + "];\n";
      }
    }
  }
  return out + "}\n";
}

}  // namespace kiln::tools
