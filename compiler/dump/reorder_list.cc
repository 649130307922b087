#include "compiler/dump/reorder_list.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

namespace kiln::jit {
namespace {

// Zeroed scratch buffers for the arguments of `ins`, one per buffer id (an
// instruction that reads and writes one buffer gets one), none for a
// buffer that holds only dims.
std::vector<runtime::BufferView> ScratchArgs(const runtime::Instruction& ins, const runtime::BufferPlan& plan,
                                             std::map<int, std::unique_ptr<Allocation>>* held) {
  std::vector<runtime::BufferView> views;
  for (int b : ins.args) {
    const runtime::BufferInfo& info = plan.buffers[b];
    runtime::BufferView v;
    v.dtype = info.dtype;
    v.dims = &info.dims;
    if (!info.dims_only) {
      std::unique_ptr<Allocation>& a = (*held)[b];
      if (a == nullptr) {
        a = std::make_unique<Allocation>(std::max<size_t>(info.bytes(), 1));
        std::memset(a->ptr(), 0, a->size());
      }
      v.data = a->ptr();
    }
    views.push_back(v);
  }
  return views;
}

// "%12:conv1.w@GRAD": the instruction's first output, else its first argument.
std::string WhatItWrites(const runtime::Instruction& ins, const runtime::BufferPlan& plan) {
  if (ins.args.empty()) return "-";
  const int b = ins.args[static_cast<size_t>(ins.num_inputs) < ins.args.size() ? ins.num_inputs : 0];
  return "%" + std::to_string(b) + ":" + plan.buffers[b].name;
}

std::string TotalsLine(const std::string& label, const onednn::ReorderTotals& t) {
  return label + ": " + t.ToString() + "\n";
}

}  // namespace

std::vector<ListedReorder> ListReorders(const CompiledObject& obj) {
  std::vector<ListedReorder> list;
  const runtime::Program& p = obj.program;
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const runtime::Instruction& ins = p.instructions[i];
    std::map<int, std::unique_ptr<Allocation>> held;
    const std::vector<runtime::BufferView> args = ScratchArgs(ins, p.plan, &held);
    for (onednn::ReorderNote& note : ins.kernel->Reorders(args.data())) list.push_back({i, std::move(note)});
  }
  return list;
}

onednn::ReorderTotals TotalsOf(const std::vector<ListedReorder>& list) {
  onednn::ReorderTotals t;
  for (const ListedReorder& r : list) t.Add(r.note);
  return t;
}

std::string ReordersText(const std::string& cluster_id, const CompiledObject& obj,
                         const std::vector<ListedReorder>& list) {
  const runtime::Program& p = obj.program;
  std::string out = "# cluster " + cluster_id + " key=" + obj.key + " " + obj.signature.ToString() +
                    ": the oneDNN reorders one launch runs, in order\n";
  out += "# " + TotalsOf(list).ToString() + " a launch\n";
  if (list.empty()) return out;
  out += "# <instruction>: <kernel> -> <what it writes>: <argument> in|out: <from> -> <to> <dims> "
         "<bytes read> -> <bytes written> B (<primitive>)\n";
  std::map<std::string, onednn::ReorderTotals> by_argument;
  for (const ListedReorder& r : list) {
    const runtime::Instruction& ins = p.instructions[r.instruction];
    out += std::to_string(r.instruction) + ": " + ins.kernel->name() + " -> " + WhatItWrites(ins, p.plan) + ": " +
           r.note.ToString() + "\n";
    by_argument[r.note.primitive + " " + r.note.arg + (r.note.output ? " out" : " in")].Add(r.note);
  }
  out += "# by primitive and argument\n";
  for (const auto& [arg, t] : by_argument) out += TotalsLine(arg, t);
  return out;
}

}  // namespace kiln::jit
