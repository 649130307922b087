// The per-cluster dump of one compiled object (kiln dump, --jit_dump_dir):
//   subgraph.txt  the cluster's ops as printed IR (STYLE.md 6) with the
//                 concrete shapes of this signature
//   lowering.txt  the lowering steps in order with what each matched, the
//                 units the ops became, and units that fell back alone
//   kernels.txt   the instruction list with argument buffers, the buffer
//                 plan, then each generated kernel's IR and layout
//   <kernel>.asm  per kernel with generated code: a header (kernel, cluster,
//                 ops it fuses, size) and its Zydis disassembly
//   aliases.txt   outputs that alias inputs (in-place updates) and how the
//                 launch binds them (donated or copy-protected)
//   reorders.txt  the oneDNN reorders one launch runs (reorder_list.h)
// Deterministic: the same subgraph, signature and options give the same text
// in every process.
#pragma once

#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/onednn/reorder_note.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"

namespace kiln::jit {

struct DumpFile {
  std::string name;  // file name inside the cluster folder
  std::string content;
};

// `cluster_id` names the cluster in headers ("c0"). `reorders`, when given,
// receives the totals of reorders.txt.
std::vector<DumpFile> ClusterDumpFiles(const std::string& cluster_id, const JitSubgraph& subgraph,
                                       const CompiledObject& obj, const OpRegistry& registry = OpRegistry::Global(),
                                       onednn::ReorderTotals* reorders = nullptr);

// Creates `dir` (and its parents) and writes each file atomically.
void WriteDumpFiles(const std::string& dir, const std::vector<DumpFile>& files);

// mkdir -p; throws InvalidArgument naming the path when it cannot.
void MakeDirs(const std::string& dir);

}  // namespace kiln::jit
