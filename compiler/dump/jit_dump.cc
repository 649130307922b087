#include "compiler/dump/jit_dump.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "compiler/dump/disasm.h"
#include "compiler/dump/reorder_list.h"
#include "compiler/lower.h"
#include "framework/file_util.h"
#include "framework/ir/graph.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string SubgraphText(const std::string& id, const JitSubgraph& sg, const CompiledObject& obj,
                         const OpRegistry& registry) {
  const proto::BlockDesc block = InferConcreteShapes(sg, obj.signature, registry);
  std::string out = "# cluster " + id + " key=" + obj.key + " " + obj.signature.ToString() + "\n";
  auto with_shapes = [&](const std::vector<std::string>& names) {
    std::vector<std::string> items;
    for (const auto& n : names) {
      const proto::VarDesc* v = FindVarDesc(block, n);
      items.push_back(v ? n + " " + DataTypeName(FromProto(v->dtype())) + DimsToString(VarDims(*v)) : n);
    }
    return Join(items, ", ");
  };
  out += "# inputs: " + with_shapes(sg.inputs) + "\n";
  out += "# outputs: " + with_shapes(sg.outputs) + "\n";
  return out + ir::Graph::FromBlock(block).Print();
}

std::string KernelsText(const CompiledObject& obj) {
  std::string out = obj.Listing();
  for (const auto& ins : obj.program.instructions) {
    const std::string detail = ins.kernel->DumpDetail();
    if (detail.empty()) continue;
    out += "# kernel " + ins.kernel->name() + "\n" + detail;
    if (detail.back() != '\n') out += "\n";
  }
  return out;
}

std::string AliasesText(const std::string& id, const CompiledObject& obj, const JitSubgraph& sg) {
  std::string out = "# cluster " + id + " key=" + obj.key + ": outputs that alias inputs\n";
  int n = 0;
  for (size_t o = 0; o < obj.output_alias.size(); ++o) {
    const int i = obj.output_alias[o];
    if (i < 0) continue;
    ++n;
    const proto::VarDesc* v = FindVarDesc(sg.block, obj.output_names[o]);
    out += "output " + std::to_string(o) + " '" + obj.output_names[o] + "' aliases input " + std::to_string(i) +
           " '" + obj.input_names[i] + "': in-place update; " +
           "donated (written in place) when no other tensor shares the input's buffer at launch, " +
           "else copy-protected (the var gets a fresh copy first)" +
           (v && v->persistable() ? "; persistable, held only by the scope in training: donated" : "") + "\n";
  }
  if (n == 0) out += "(none: every output gets its own buffer)\n";
  // Inside the program: instructions that read and write one buffer.
  const auto& bufs = obj.program.plan.buffers;
  for (size_t k = 0; k < obj.program.instructions.size(); ++k) {
    const auto& ins = obj.program.instructions[k];
    std::set<int> read(ins.args.begin(), ins.args.begin() + ins.num_inputs);
    for (size_t a = ins.num_inputs; a < ins.args.size(); ++a) {
      if (!read.count(ins.args[a])) continue;
      out += "instruction " + std::to_string(k) + " (" + ins.kernel->name() + ") reads and writes %" +
             std::to_string(ins.args[a]) + ":" + bufs[ins.args[a]].name + " in place\n";
    }
  }
  return out;
}

}  // namespace

std::vector<DumpFile> ClusterDumpFiles(const std::string& cluster_id, const JitSubgraph& subgraph,
                                       const CompiledObject& obj, const OpRegistry& registry,
                                       onednn::ReorderTotals* reorders) {
  std::vector<DumpFile> files;
  files.push_back({"subgraph.txt", SubgraphText(cluster_id, subgraph, obj, registry)});
  files.push_back({"lowering.txt", "# cluster " + cluster_id + " key=" + obj.key + " " + obj.signature.ToString() +
                                       ": the lowering steps in order, what each matched, the units\n" +
                                       obj.lowering});
  files.push_back({"kernels.txt", KernelsText(obj)});
  std::set<std::string> names;
  for (size_t k = 0; k < obj.program.instructions.size(); ++k) {
    const runtime::Kernel& kernel = *obj.program.instructions[k].kernel;
    if (kernel.code() == nullptr || kernel.code_size() == 0) continue;
    std::string name = kernel.name();
    if (!names.insert(name).second) name += "_" + std::to_string(k);
    std::string text = "; kernel " + kernel.name() + " (instruction " + std::to_string(k) + " of cluster " +
                       cluster_id + ", key " + obj.key + ")\n";
    text += "; fuses: " + Join(kernel.fused_ops(), ", ") + "\n";
    text += "; " + kernel.Describe() + "\n";
    text += "; " + std::to_string(kernel.code_size()) + " bytes, Intel syntax, offsets from the entry point\n";
    text += Disassemble(kernel.code(), kernel.code_size());
    files.push_back({name + ".asm", text});
  }
  files.push_back({"aliases.txt", AliasesText(cluster_id, obj, subgraph)});
  const std::vector<ListedReorder> listed = ListReorders(obj);
  files.push_back({"reorders.txt", ReordersText(cluster_id, obj, listed)});
  if (reorders != nullptr) *reorders = TotalsOf(listed);
  return files;
}

void MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      ThrowInvalidArgument("cannot create directory '", prefix, "': ", std::strerror(errno));
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    ThrowInvalidArgument("'", dir, "' is not a directory");
  }
}

void WriteDumpFiles(const std::string& dir, const std::vector<DumpFile>& files) {
  MakeDirs(dir);
  for (const auto& f : files) WriteFileAtomic(dir + "/" + f.name, f.content);
}

}  // namespace kiln::jit
