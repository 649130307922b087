// Pass options from command-line flags, for the tools only: passes take
// their options through their constructors and never read flags.
#pragma once

#include <string>
#include <vector>

#include "passes/build_jit_pass.h"

namespace kiln {

// "a, b,,c" -> {"a", "b", "c"}: split at commas, spaces trimmed, empty items dropped.
std::vector<std::string> SplitOpList(const std::string& list);

// --jit_allow_ops, --jit_deny_ops, --jit_min_cluster_size. keep_vars stays
// empty: the tool adds its feeds and fetch targets.
BuildJitPassOptions BuildJitPassOptionsFromFlags();

}  // namespace kiln
