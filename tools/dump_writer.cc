// The dump writer (tools/dump_writer.h): kiln dump's files for any program.
#include "tools/dump_writer.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "launch_op/default_jit.h"
#include "compiler/dump/jit_dump.h"
#include "compiler/lower.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/shape_util.h"
#include "framework/validate.h"
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

// A cluster input's dtype and dims: from the concrete block, or for a var a
// pass made (attention_fusion_pass's LSE) from the subgraph's declaration
// with the batch size for -1, as ConcreteBlock does for declared vars.
jit::InputSpec ConcreteInput(const proto::BlockDesc& concrete, const JitSubgraph& sg,
                                         const std::string& name, int64_t batch) {
  const proto::VarDesc* v = FindVarDesc(concrete, name);
  if (v == nullptr) v = FindVarDesc(sg.block, name);
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
  std::set<std::string> written, read, out;
  for (const auto& op : block.ops()) {
    for (const auto& s : op.inputs()) {
      for (const auto& a : s.args()) {
        const proto::VarDesc* v = FindVarDesc(block, a);
        if (!written.count(a) && v && !v->persistable()) out.insert(a);
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
ClusterRow CompileClusterRow(jit::JitRuntime& jit, const proto::BlockDesc& concrete, int64_t batch,
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
    (*cluster_files)["cluster_" + row.id] = jit::ClusterDumpFiles(row.id, *row.subgraph, *obj);
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
  const jit::CompileOptions copts = jit.options().compile;
  std::vector<ClusterRow> rows;
  std::vector<std::string> ids;
  std::vector<jit::DumpFile> files;  // paths relative to --out
  std::map<std::string, std::vector<jit::DumpFile>> cluster_files;
  for (size_t i = 0; i < report.clusters.size(); ++i) {
    ClusterRow row = CompileClusterRow(jit, concrete, src.batch, "c" + std::to_string(i),
                                       report.clusters[i].key, &cluster_files);
    ids.push_back(row.id);
    rows.push_back(std::move(row));
  }

  std::vector<ExcludedOp> excluded;
  for (const auto& e : report.excluded) excluded.push_back({"", e});
  const std::string preamble =
      "Dump of " + src.description + " for batch size " + std::to_string(src.batch) + ": ISA " +
      IsaName(copts.isa) + ", oneDNN " + OnOff(copts.use_onednn) + ", elementwise fusion " +
      OnOff(copts.fuse_elementwise) + ", buffer reuse " + OnOff(copts.reuse_buffers) + ", min cluster size " +
      std::to_string(options.config.build_jit.min_cluster_size) + ".\n\n" +
      "Files: `program.before.pbtxt` / `program.after.pbtxt` (the program before and after the pass pipeline: " +
      PassList(options) + "), "
      "`program.dot` (Graphviz, clusters as boxes), and per cluster `cluster_<id>/` with `subgraph.txt`, "
      "`lowering.txt`, `kernels.txt`, `<kernel>.asm` and `aliases.txt`.\n";
  const std::string index = IndexMarkdown(preamble, rows, excluded, jit.stats()) + CollectivesMarkdown(after);
  files.push_back({"index.md", index});
  files.push_back({"program.before.pbtxt", ProgramToText(program)});
  files.push_back({"program.after.pbtxt", ProgramToText(after)});
  const std::string dot = ClusteredDot(program, report, ids);
  files.push_back({"program.dot", dot});
  HtmlDump html;
  html.description = preamble.substr(0, preamble.find('\n'));
  html.graph_svg = RenderDotSvg(dot);
  html.index_md = index;
  for (const ClusterRow& row : rows) {
    auto it = cluster_files.find("cluster_" + row.id);
    html.clusters.push_back({row.id, row.key, it == cluster_files.end() ? std::vector<jit::DumpFile>{} : it->second,
                             row.objects.empty() ? nullptr : row.objects.front(), row.failure});
  }
  files.push_back({"index.html", DumpHtml(html)});
  if (!html.graph_svg.empty()) files.push_back({"program.svg", html.graph_svg});

  // Everything is rendered; now write.
  jit::WriteDumpFiles(out_dir, files);
  for (const auto& [dir, fs] : cluster_files) jit::WriteDumpFiles(out_dir + "/" + dir, fs);
  DumpResult result;
  result.explain = ExplainText(rows, excluded, jit.stats());
  result.clusters = cluster_files.size();
  return result;
}

}  // namespace kiln::tools
