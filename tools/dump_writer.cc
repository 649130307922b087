// The dump writer (tools/dump_writer.h): kiln dump's files for any program.
#include "tools/dump_writer.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_map>

#include "launch_op/default_jit.h"
#include "compiler/dump/jit_dump.h"
#include "compiler/lower.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/shape_util.h"
#include "framework/validate.h"
#include "tools/dot_render.h"
#include "tools/dump_graphs.h"
#include "tools/dump_html.h"
#include "tools/dump_report.h"
#include "tools/jit_setup.h"
#include "tools/pipeline_setup.h"

namespace kiln::tools {
namespace {

// Block 0 with concrete dims: vars no op writes before reading (feeds,
// parameters, optimizer state) take their dims from `feed_dims`, or have -1
// replaced by `batch`; every other var is declared afresh by shape
// inference, op by op.
proto::BlockDesc ConcreteBlock(const proto::BlockDesc& block, const std::map<std::string, Dims>& feed_dims,
                               int64_t batch) {
  std::set<std::string> written;
  std::set<std::string> read_first;
  for (const auto& op : block.ops()) {
    for (const auto& s : op.inputs()) {
      for (const auto& a : s.args()) {
        if (!written.count(a)) read_first.insert(a);
      }
    }
    for (const auto& s : op.outputs()) {
      for (const auto& a : s.args()) written.insert(a);
    }
  }
  proto::BlockDesc out = block;
  out.clear_vars();
  for (const auto& v : block.vars()) {
    if (written.count(v.name()) && !read_first.count(v.name()) && !v.persistable()) continue;
    proto::VarDesc* nv = out.add_vars();
    *nv = v;
    const auto given = feed_dims.find(v.name());
    if (given != feed_dims.end()) {
      if (!DimsCompatible(VarDims(v), given->second)) {
        ThrowInvalidArgument("feed shape of '", v.name(), "': expected dims ", DimsToString(VarDims(v)), ", got ",
                             DimsToString(given->second));
      }
      nv->clear_dims();
      for (int64_t d : given->second) nv->add_dims(d);
      continue;
    }
    for (int i = 0; i < nv->dims_size(); ++i) {
      if (nv->dims(i) < 0) nv->set_dims(i, batch);
    }
  }
  BlockVarIndex index(&out);
  for (int i = 0; i < out.ops_size(); ++i) {
    InferShapeAtBuild(&out, i, /*declare_outputs=*/true, OpRegistry::Global(), &index);
  }
  return out;
}

// Block 0's vars by name: one lookup per cluster input, not a scan.
using VarsByName = std::unordered_map<std::string, const proto::VarDesc*>;
VarsByName IndexVars(const proto::BlockDesc& block) {
  VarsByName out;
  for (const auto& v : block.vars()) out.emplace(v.name(), &v);
  return out;
}

// A cluster input's dtype and dims: from the concrete block, or for a var a
// pass made (attention_fusion_pass's LSE) from the subgraph's declaration
// with the batch size for -1, as ConcreteBlock does for declared vars.
jit::InputSpec ConcreteInput(const VarsByName& concrete, const JitSubgraph& sg, const std::string& name,
                             int64_t batch) {
  auto it = concrete.find(name);
  const proto::VarDesc* v = it != concrete.end() ? it->second : FindVarDesc(sg.block, name);
  KILN_CHECK(v != nullptr, "kiln dump: no concrete shape for cluster input ", name);
  Dims dims = VarDims(*v);
  for (int64_t& d : dims) d = d < 0 ? batch : d;
  return {FromProto(v->dtype()), dims};
}

std::string OnOff(bool b) { return b ? "on" : "off"; }

// "recompute_pass, build_jit_pass, inplace_pass": the passes that ran.
std::string PassList(const PipelineOptions& options) {
  std::string out;
  for (const auto& pass : BuildPipeline(options)) out += (out.empty() ? "" : ", ") + std::string(pass->name());
  return out;
}

// Where the gradient averaging of a data-parallel program sits in the
// program after the pipeline: each bucket's start and wait, with the op
// before the start and after the wait. Empty for other programs.
std::string CollectivesMarkdown(const proto::ProgramDesc& after) {
  const proto::BlockDesc& block = after.blocks(0);
  std::string out;
  for (int i = 0; i < block.ops_size(); ++i) {
    const proto::OpDesc& op = block.ops(i);
    if (op.type() != "c_allreduce_start") continue;
    const std::string bucket = FindAttr(op, "bucket")->s();
    int wait = -1;
    for (int j = i + 1; j < block.ops_size() && wait < 0; ++j) {
      const proto::AttrDesc* b = FindAttr(block.ops(j), "bucket");
      if (block.ops(j).type() == "c_allreduce_wait" && b != nullptr && b->s() == bucket) wait = j;
    }
    const std::vector<std::string> grads = InputArgs(op, "X");
    out += "| " + bucket + " | " + std::to_string(grads.size()) + " | " +
           (i > 0 ? OpLabel(block.ops(i - 1), i - 1) : std::string("-")) + " | " +
           (wait >= 0 && wait + 1 < block.ops_size() ? OpLabel(block.ops(wait + 1), wait + 1) : std::string("-")) +
           " | " + std::to_string(wait - i - 1) + " |\n";
  }
  if (out.empty()) return "";
  return "\n## Gradient averaging (data parallel)\n\nEach bucket of gradients is averaged over the ranks "
         "between its `c_allreduce_start` and its `c_allreduce_wait`, while the ops between them run (positions "
         "in `program.after.pbtxt`).\n\n| bucket | gradients | started after | waited for before | ops run "
         "meanwhile |\n|---|---|---|---|---|\n" +
         out;
}

}  // namespace

std::set<std::string> ProgramFeedsAndResults(const proto::BlockDesc& block) {
  const VarsByName vars = IndexVars(block);
  std::set<std::string> written, read, out;
  for (const auto& op : block.ops()) {
    for (const auto& s : op.inputs()) {
      for (const auto& a : s.args()) {
        auto v = vars.find(a);
        if (!written.count(a) && v != vars.end() && !v->second->persistable()) out.insert(a);
        read.insert(a);
      }
    }
    for (const auto& s : op.outputs()) {
      for (const auto& a : s.args()) written.insert(a);
    }
  }
  for (const auto& w : written) {
    if (!read.count(w) && w != kEmptyVarName) out.insert(w);
  }
  return out;
}

namespace {

// Cluster `key` compiled at the dump's concrete shapes as row `id`: its
// compiled object and dump files, or why it did not compile.
ClusterRow CompileClusterRow(jit::JitRuntime& jit, const VarsByName& concrete, int64_t batch,
                             const std::string& id, const std::string& key,
                             std::map<std::string, std::vector<jit::DumpFile>>* cluster_files) {
  ClusterRow row;
  row.id = id;
  row.key = key;
  row.subgraph = &jit.cache().GetSubgraph(row.key);
  jit::ShapeSignature sig;
  for (const auto& name : row.subgraph->inputs) {
    sig.inputs.push_back(ConcreteInput(concrete, *row.subgraph, name, batch));
  }
  if (auto obj = jit.Compile(row.key, sig)) {
    row.objects.push_back(obj);
    row.reorders.emplace_back();
    (*cluster_files)["cluster_" + row.id] =
        jit::ClusterDumpFiles(row.id, *row.subgraph, *obj, OpRegistry::Global(), &row.reorders.back());
  } else {
    // Compile already said why on stderr; lower again for the index.
    try {
      jit::Lower(row.key, *row.subgraph, sig, jit.options().compile);
      row.failure = "the compiler gave up on it (see stderr)";
    } catch (const Error& e) {
      row.failure = e.what();
    }
  }
  return row;
}

}  // namespace

namespace {

// index.md's header: what was dumped, with which options, and the files.
std::string Preamble(const DumpSource& src, const PipelineOptions& options, const jit::CompileOptions& copts) {
  return "Dump of " + src.description + " for batch size " + std::to_string(src.batch) + ": ISA " +
         IsaName(copts.isa) + ", oneDNN " + OnOff(copts.use_onednn) + ", elementwise fusion " +
         OnOff(copts.fuse_elementwise) + ", buffer reuse " + OnOff(copts.reuse_buffers) + ", min cluster size " +
         std::to_string(options.config.build_jit.min_cluster_size) + ".\n\n" +
         "Files: `program.before.pbtxt` / `program.after.pbtxt` (the program before and after the pass pipeline: " +
         PassList(options) + "), "
         "`program.dot` (Graphviz, clusters as boxes), and per cluster `cluster_<id>/` with `subgraph.txt`, "
         "`lowering.txt`, `kernels.txt`, `<kernel>.asm`, `aliases.txt`, `reorders.txt` and `graph.dot`.\n";
}

// The program's graph: op by op with the clusters as boxes when it is small,
// else at cluster granularity (`coarse` then says why).
std::string ProgramDot(const proto::ProgramDesc& program, const BuildJitReport& report,
                       const std::vector<std::string>& ids, size_t max_nodes, std::string* coarse) {
  const size_t nodes = OpByOpNodes(program.blocks(0));
  if (nodes <= max_nodes) return ClusteredDot(program, report, ids);
  *coarse = "the program has " + std::to_string(nodes) + " ops and vars, over the drawing limit of " +
            std::to_string(max_nodes) + "; one node per cluster and per op left out";
  return ClusterLevelDot(BuildClusterLevelGraph(program, report), report, ids, *coarse);
}

// Draws the program and every compiled cluster's graph within the budget,
// then writes index.html and the SVGs that were drawn.
void DrawAndWriteHtml(const DumpSource& src, const std::string& out_dir, HtmlDump html,
                      const std::string& program_dot) {
  std::vector<std::string> dots = {program_dot};
  std::vector<HtmlCluster*> drawn;  // the clusters whose graph is dots[i + 1]
  for (HtmlCluster& c : html.clusters) {
    for (const jit::DumpFile& f : c.files) {
      if (f.name != "graph.dot") continue;
      dots.push_back(f.content);
      drawn.push_back(&c);
    }
  }
  const std::vector<DotRender> svgs = RenderAllDotSvg(dots, {src.graphs.program, src.graphs.seconds});
  html.graph_svg = svgs[0].svg;
  html.graph_note = svgs[0].note;
  html.graph_not_installed = svgs[0].not_installed;
  std::vector<jit::DumpFile> files;
  if (!svgs[0].svg.empty()) files.push_back({"program.svg", svgs[0].svg});
  for (size_t i = 0; i < drawn.size(); ++i) {
    drawn[i]->graph_svg = svgs[i + 1].svg;
    drawn[i]->graph_note = svgs[i + 1].note;
    if (!svgs[i + 1].svg.empty()) {
      jit::WriteDumpFiles(out_dir + "/cluster_" + drawn[i]->id, {{"graph.svg", svgs[i + 1].svg}});
    }
  }
  files.push_back({"index.html", DumpHtml(html)});
  jit::WriteDumpFiles(out_dir, files);
}

}  // namespace

DumpResult WriteDump(const DumpSource& src, const std::string& out_dir) {
  const proto::ProgramDesc& program = src.program;
  for (const auto& [name, dims] : src.feed_dims) {
    RequireVarDesc(program.blocks(0), name, "feed shape of");
  }
  const proto::BlockDesc concrete = ConcreteBlock(program.blocks(0), src.feed_dims, src.batch);

  // The pipeline kiln train would run (--recompute, --use_inplace), with
  // build_jit_pass on whatever --use_jit says.
  PipelineOptions options = PipelineOptionsFromFlags(src.keep);
  options.build_jit = true;
  BuildJitReport report;
  options.config.build_jit_report = &report;
  const proto::ProgramDesc after = RunPipeline(program, options);
  RecordJitReport(report);

  jit::JitRuntime& jit = jit::DefaultJit();
  std::vector<ClusterRow> rows;
  std::vector<std::string> ids;
  std::map<std::string, std::vector<jit::DumpFile>> cluster_files;
  const VarsByName concrete_vars = IndexVars(concrete);
  for (size_t i = 0; i < report.clusters.size(); ++i) {
    ClusterRow row = CompileClusterRow(jit, concrete_vars, src.batch, "c" + std::to_string(i),
                                       report.clusters[i].key, &cluster_files);
    auto folder = cluster_files.find("cluster_" + row.id);
    if (folder != cluster_files.end()) {
      folder->second.push_back({"graph.dot", ClusterOwnDot(*row.subgraph, row.id, src.graphs.max_nodes)});
    }
    ids.push_back(row.id);
    rows.push_back(std::move(row));
  }

  std::vector<ExcludedOp> excluded;
  for (const auto& e : report.excluded) excluded.push_back({"", e});
  const std::string preamble = Preamble(src, options, jit.options().compile);
  const std::string index = IndexMarkdown(preamble, rows, excluded, jit.stats()) + CollectivesMarkdown(after);
  HtmlDump html;
  const std::string dot = ProgramDot(program, report, ids, src.graphs.max_nodes, &html.graph_coarse);
  // The text files first, all of them: the drawings below may run out of
  // time, and never hold these back.
  jit::WriteDumpFiles(out_dir, {{"index.md", index},
                                {"program.before.pbtxt", ProgramToText(program)},
                                {"program.after.pbtxt", ProgramToText(after)},
                                {"program.dot", dot}});
  for (const auto& [dir, fs] : cluster_files) jit::WriteDumpFiles(out_dir + "/" + dir, fs);

  html.description = preamble.substr(0, preamble.find('\n'));
  html.index_md = index;
  for (const ClusterRow& row : rows) {
    auto it = cluster_files.find("cluster_" + row.id);
    html.clusters.push_back({row.id, row.key, it == cluster_files.end() ? std::vector<jit::DumpFile>{} : it->second,
                             row.objects.empty() ? nullptr : row.objects.front(), row.failure, "", ""});
  }
  DrawAndWriteHtml(src, out_dir, std::move(html), dot);
  DumpResult result;
  result.explain = ExplainText(rows, excluded, jit.stats());
  result.clusters = cluster_files.size();
  return result;
}

}  // namespace kiln::tools
