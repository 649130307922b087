// The JIT at the tool edge: flags -> compiler options and launch mode; the
// record of what was clustered for --jit_explain and --jit_dump_dir.
#pragma once

#include <string>
#include <vector>

#include "passes/build_jit_pass.h"

namespace kiln::tools {

// Registers jit_launch/jit_kernel with jit::DefaultJit() in the global
// registry and configures that runtime (the launch mode included) from the
// --jit_* flags (with --jit_dump_dir, every compile writes its cluster folder
// there). Call once before running programs.
void ConfigureJitFromFlags();

// Clusters of this run get ids c0, c1, ... in the order they first appear
// in the programs the tool transforms (a key seen again keeps its id).
// Records `report` (clusters and exclusions) for --jit_explain; the n-th
// call's exclusions are labelled "program n".
void RecordJitReport(const BuildJitReport& report);
// "c3" for a recorded key, else the key itself.
std::string ClusterName(const std::string& key);

// With --jit_explain: prints the short form of kiln dump's index (clusters,
// their kernels, ops left out with the reason, cache statistics) to stderr.
void MaybePrintJitExplain();

}  // namespace kiln::tools
