// The oneDNN reorders one launch of a compiled object runs (kiln dump's
// reorders.txt, docs/jit.md "Reorders"): each instruction's kernel lists its
// own (runtime::Kernel::Reorders): the JIT's oneDNN kernels from the cached
// entries they run, a framework op from a dry run of its oneDNN kernel, in
// which the same handlers acquire the same primitives as in a real run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/onednn/reorder_note.h"

namespace kiln::jit {

struct ListedReorder {
  size_t instruction = 0;  // in obj.program.instructions
  onednn::ReorderNote note;
};

// In the order a launch runs them. Framework ops run dry on zeroed scratch
// buffers of their arguments' dims (the object's own buffers are not
// touched); primitives they acquire enter the global primitive cache, as
// their first real run would make them.
std::vector<ListedReorder> ListReorders(const CompiledObject& obj);

onednn::ReorderTotals TotalsOf(const std::vector<ListedReorder>& list);

// reorders.txt: a header with the totals, a line per reorder ("<instruction>:
// <kernel> -> <the buffer it writes>: <note>"), then the totals by
// primitive, argument and direction.
std::string ReordersText(const std::string& cluster_id, const CompiledObject& obj,
                         const std::vector<ListedReorder>& list);

}  // namespace kiln::jit
