#include "tools/pipeline_setup.h"

#include "launch_op/default_jit.h"
#include "framework/error.h"
#include "framework/flags.h"
#include "tools/jit_setup.h"

namespace kiln::tools {

std::vector<std::string> SplitOpList(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    size_t first = list.find_first_not_of(" \t", begin);
    size_t last = list.find_last_not_of(" \t", end == 0 ? 0 : end - 1);
    if (first != std::string::npos && first < end && last != std::string::npos && last >= first) {
      out.push_back(list.substr(first, last - first + 1));
    }
    begin = end + 1;
  }
  return out;
}

BuildJitPassOptions BuildJitPassOptionsFromFlags() {
  BuildJitPassOptions o;
  o.allow_ops = SplitOpList(FLAGS_jit_allow_ops);
  o.deny_ops = SplitOpList(FLAGS_jit_deny_ops);
  o.min_cluster_size = FLAGS_jit_min_cluster_size;
  return o;
}

PipelineOptions PipelineOptionsFromFlags(const std::set<std::string>& keep) {
  PipelineOptions o;
  o.fuse_decompositions = FLAGS_fuse_decompositions;
  o.fuse_attention = FLAGS_fuse_attention;
  o.recompute = FLAGS_recompute;
  const std::vector<std::string> recompute_ops = SplitOpList(FLAGS_recompute_ops);
  o.config.recompute.op_types = std::set<std::string>(recompute_ops.begin(), recompute_ops.end());
  o.build_jit = FLAGS_use_jit;
  o.config.build_jit = BuildJitPassOptionsFromFlags();
  o.config.jit_sink = [](const JitSubgraph& sg) { return jit::DefaultJit().cache().AddSubgraph(sg); };
  o.inplace = FLAGS_use_inplace;
  o.keep_vars = keep;
  o.dump_dir = FLAGS_dump_passes;
  return o;
}

void CheckDumpPassesFlag() {
  if (FLAGS_dump_passes.empty()) return;
  try {
    CreateDumpDir(FLAGS_dump_passes);
  } catch (const Error& e) {
    ThrowInvalidArgument("--dump_passes: ", e.what());
  }
}

proto::ProgramDesc RunPipelineFromFlags(const proto::ProgramDesc& program, const std::set<std::string>& keep,
                                        PipelineReports* reports, const std::string& dump_subdir) {
  PipelineOptions o = PipelineOptionsFromFlags(keep);
  if (!o.dump_dir.empty() && !dump_subdir.empty()) o.dump_dir += "/" + dump_subdir;
  PipelineReports local;
  PipelineReports& r = reports != nullptr ? *reports : local;
  o.config.attention_fusion_report = &r.attention_fusion;
  o.config.recompute_report = &r.recompute;
  o.config.build_jit_report = &r.build_jit;
  o.config.inplace_report = &r.inplace;
  proto::ProgramDesc out = RunPipeline(program, o);
  if (o.build_jit) RecordJitReport(r.build_jit);
  return out;
}

}  // namespace kiln::tools
