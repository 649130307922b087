// What kiln dump and --jit_explain report about the clusters of a run: the
// index.md table, the short explain text and the Graphviz view of a program
// with its clusters drawn as boxes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launch_op/jit_runtime.h"
#include "framework/jit_subgraph.h"
#include "framework/onednn/reorder_note.h"
#include "framework/proto/framework.pb.h"
#include "passes/build_jit_pass.h"

namespace kiln::tools {

// One cluster: its compiled objects (one per signature), or why it has none.
struct ClusterRow {
  std::string id;   // "c0"
  std::string key;  // its fingerprint
  const JitSubgraph* subgraph = nullptr;
  std::vector<std::shared_ptr<const jit::CompiledObject>> objects;
  // For each object, the oneDNN reorders a launch runs (kiln dump's
  // reorders.txt); empty where they were not listed (--jit_explain).
  std::vector<onednn::ReorderTotals> reorders;
  std::string failure;  // when `objects` is empty
};

// An op left out of clusters, and the program it belongs to.
struct ExcludedOp {
  std::string program;  // "" when there is one program
  BuildJitReport::Exclusion exclusion;
};

// index.md: a header (`preamble` lines), the cluster table, the ops left
// out with their reasons, cache statistics, then the oneDNN reorders a
// launch of each cluster runs (where listed). Columns and lines whose values change
// from run to run say "(timing)".
std::string IndexMarkdown(const std::string& preamble, const std::vector<ClusterRow>& rows,
                          const std::vector<ExcludedOp>& excluded, const jit::JitStats& stats);

// The short form: a line per cluster and signature with its kernels, a line
// per op left out with the reason, one line of cache statistics, and where
// listed one line with the reorders of a launch of every cluster.
std::string ExplainText(const std::vector<ClusterRow>& rows, const std::vector<ExcludedOp>& excluded,
                        const jit::JitStats& stats);

// `s` as a Graphviz quoted string (quotes and backslashes escaped, newlines
// as \n).
std::string DotQuote(const std::string& s);
// The fill colour of cluster i's box, the same in every drawing of a dump.
const char* ClusterFill(size_t i);

// Graphviz of block 0 of `program` (before build_jit_pass) with the ops of
// cluster i (report.clusters[i], named ids[i]) and the vars used only inside
// it drawn inside a box "cluster_<id>". Deterministic.
std::string ClusteredDot(const proto::ProgramDesc& program, const BuildJitReport& report,
                         const std::vector<std::string>& ids);

}  // namespace kiln::tools
