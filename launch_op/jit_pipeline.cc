#include "launch_op/jit_pipeline.h"

#include "compiler/jit_compiler.h"
#include "framework/ir/graph.h"

namespace kiln::jit {

proto::ProgramDesc ApplyBuildJitPass(const proto::ProgramDesc& program, const BuildJitPassOptions& options,
                                     BuildJitReport* report) {
  if (program.blocks_size() == 0) ThrowInvalidArgument("program has no blocks");
  ir::Graph graph = ir::Graph::FromBlock(program.blocks(0));
  BuildJitPass pass(options, [](const JitSubgraph& sg) { return JitCompiler::Instance().AddSubgraph(sg); }, report);
  pass.Run(graph);
  graph.Verify();
  proto::ProgramDesc out = program;
  *out.mutable_blocks(0) = graph.ToBlock();
  return out;
}

}  // namespace kiln::jit
