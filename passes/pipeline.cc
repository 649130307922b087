#include "passes/pipeline.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/program_io.h"
#include "passes/attention_fusion_pass.h"
#include "passes/build_jit_pass.h"
#include "passes/decomposition_fusion_pass.h"
#include "passes/inplace_pass.h"
#include "passes/recompute_pass.h"

namespace kiln {
namespace {

template <typename Options>
Options WithKeep(Options options, const std::set<std::string>& keep) {
  options.keep_vars.insert(keep.begin(), keep.end());
  return options;
}

std::string DumpPath(const std::string& dir, int step, std::string_view name) {
  return StrCat(dir, "/", step < 10 ? "0" : "", step, "_", name, ".pbtxt");
}

}  // namespace

std::vector<std::unique_ptr<Pass>> BuildPipeline(const PipelineOptions& options, const OpRegistry& registry) {
  const PassConfig& c = options.config;
  const std::set<std::string>& keep = options.keep_vars;
  if (options.build_jit && !c.jit_sink) ThrowInvalidArgument("build_jit_pass needs a subgraph sink (the JIT compiler)");
  std::vector<std::unique_ptr<Pass>> passes;
  // Before everything: attention fusion, recompute and build_jit_pass then
  // see layer_norm and gelu as in a native program. On a program with grad
  // ops it leaves the patterns alone (the grad ops read the intermediates):
  // the import paths run it before append_backward.
  if (options.fuse_decompositions) {
    passes.push_back(std::make_unique<DecompositionFusionPass>(WithKeep(c.decomposition_fusion, keep),
                                                               c.decomposition_fusion_report, registry));
  }
  // First: recompute_pass would copy the scores' matmul and the softmax into
  // the backward, and build_jit_pass clusters the fused ops. Only with the
  // JIT: the fused ops' fast kernels are the compiler's, and outside it the
  // unfused oneDNN ops are faster than the fused ops' reference kernels.
  if (options.fuse_attention && options.build_jit) {
    passes.push_back(std::make_unique<AttentionFusionPass>(WithKeep(c.attention_fusion, keep),
                                                           c.attention_fusion_report, registry));
  }
  // First, on the program as built: its copies of forward ops then stand in
  // the backward pass, where build_jit_pass merges them into the backward
  // cluster (and its arena plan) instead of keeping their inputs' values.
  if (options.recompute) {
    passes.push_back(std::make_unique<RecomputePass>(WithKeep(c.recompute, keep), c.recompute_report, registry));
  }
  // Clusters everything the compiler can lower, recompute copies included.
  if (options.build_jit) {
    passes.push_back(
        std::make_unique<BuildJitPass>(WithKeep(c.build_jit, keep), c.jit_sink, c.build_jit_report, registry));
  }
  // Last: it sees only the framework ops left outside clusters (the compiler
  // plans the buffers inside them; renaming vars there would change a stored
  // subgraph).
  if (options.inplace) {
    passes.push_back(std::make_unique<InplacePass>(WithKeep(c.inplace, keep), c.inplace_report, registry));
  }
  return passes;
}

proto::ProgramDesc RunPipeline(const proto::ProgramDesc& program, const PipelineOptions& options,
                               const OpRegistry& registry) {
  const PassConfig& c = options.config;
  if (c.decomposition_fusion_report != nullptr) *c.decomposition_fusion_report = DecompositionFusionReport{};
  if (c.attention_fusion_report != nullptr) *c.attention_fusion_report = AttentionFusionReport{};
  if (c.recompute_report != nullptr) *c.recompute_report = RecomputeReport{};
  if (c.build_jit_report != nullptr) *c.build_jit_report = BuildJitReport{};
  if (c.inplace_report != nullptr) *c.inplace_report = InplaceReport{};
  const std::vector<std::unique_ptr<Pass>> passes = BuildPipeline(options, registry);
  if (!passes.empty()) return TransformProgram(program, passes, options.dump_dir);
  if (!options.dump_dir.empty()) {
    CreateDumpDir(options.dump_dir);
    WriteFileAtomic(options.dump_dir + "/00_input.pbtxt", ProgramToText(program));
  }
  return program;
}

proto::ProgramDesc TransformProgram(const proto::ProgramDesc& program, const std::vector<std::unique_ptr<Pass>>& passes,
                                    const std::string& dump_dir) {
  if (program.blocks_size() == 0) ThrowInvalidArgument("the pass pipeline rewrites block 0, but the program has no blocks");
  proto::ProgramDesc out = program;
  PassDumpFn dump;
  int step = 0;
  if (!dump_dir.empty()) {
    CreateDumpDir(dump_dir);
    WriteFileAtomic(DumpPath(dump_dir, step, "input"), ProgramToText(program));
    dump = [&](const Pass& pass, const ir::Graph& graph, bool) {
      *out.mutable_blocks(0) = graph.ToBlock();
      WriteFileAtomic(DumpPath(dump_dir, ++step, pass.name()), ProgramToText(out));
    };
  }
  ir::Graph graph = ir::Graph::FromBlock(program.blocks(0));
  RunPasses(graph, passes, dump);
  *out.mutable_blocks(0) = graph.ToBlock();
  return out;
}

void CreateDumpDir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) ThrowInvalidArgument("pass dump directory: the path is empty");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    ThrowInvalidArgument("pass dump directory '", dir, "': exists and is not a directory");
  }
  fs::create_directories(dir, ec);
  if (ec) ThrowInvalidArgument("pass dump directory '", dir, "': cannot create it (", ec.message(), ")");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    ThrowInvalidArgument("pass dump directory '", dir, "': cannot write into it (", std::strerror(errno), ")");
  }
}

}  // namespace kiln
