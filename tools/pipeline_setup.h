// The pass pipeline at the tool edge: flags -> PipelineOptions (passes never
// read flags), and the call through which kiln train, run and bench transform
// their programs (kiln dump builds its options here too).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "passes/pipeline.h"

namespace kiln::tools {

// "a, b,,c" -> {"a", "b", "c"}: split at commas, spaces trimmed, empty items dropped.
std::vector<std::string> SplitOpList(const std::string& list);

// --jit_allow_ops, --jit_deny_ops, --jit_min_cluster_size. keep_vars stays
// empty: the pipeline adds the tool's feeds and fetch targets.
BuildJitPassOptions BuildJitPassOptionsFromFlags();

// --fuse_decompositions, --fuse_attention (which applies with the JIT), --recompute with
// --recompute_ops, --use_jit with the options above and
// jit::DefaultJit()'s cache as the subgraph sink, --use_inplace, and
// --dump_passes as the dump directory. keep_vars: `keep` (feeds and fetch
// targets). No reports.
PipelineOptions PipelineOptionsFromFlags(const std::set<std::string>& keep);

// With --dump_passes: creates the directory now, or throws InvalidArgument
// naming the flag. Tools call it before loading data or running anything.
void CheckDumpPassesFlag();

// What one RunPipelineFromFlags did; a pass that did not run leaves its
// report empty.
struct PipelineReports {
  AttentionFusionReport attention_fusion;
  RecomputeReport recompute;
  BuildJitReport build_jit;
  InplaceReport inplace;
};

// RunPipeline with PipelineOptionsFromFlags(keep); with --dump_passes DIR and
// a `dump_subdir`, the files go to DIR/<dump_subdir>/. build_jit_pass's
// report is recorded for --jit_explain (RecordJitReport); `reports`
// (optional) receives all four.
proto::ProgramDesc RunPipelineFromFlags(const proto::ProgramDesc& program, const std::set<std::string>& keep,
                                        PipelineReports* reports = nullptr, const std::string& dump_subdir = "");

}  // namespace kiln::tools
