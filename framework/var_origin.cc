#include "framework/var_origin.h"

#include <algorithm>
#include <map>
#include <set>

#include "framework/error.h"
#include "framework/op_desc.h"

namespace kiln {

std::vector<Initialiser> InitialiserOps(const proto::BlockDesc& block) {
  std::set<std::string> touched;
  std::vector<Initialiser> out;
  for (int i = 0; i < block.ops_size(); ++i) {
    const std::vector<std::string> ins = AllInputArgs(block.ops(i)), outs = AllOutputArgs(block.ops(i));
    for (const auto& o : outs) {
      const proto::VarDesc* v = FindVarDesc(block, o);
      if (v == nullptr || !v->persistable() || touched.count(o)) continue;
      if (std::find(ins.begin(), ins.end(), o) == ins.end()) out.push_back({i, o});
    }
    touched.insert(ins.begin(), ins.end());
    touched.insert(outs.begin(), outs.end());
  }
  return out;
}

std::vector<std::string> PersistableWrites(const proto::BlockDesc& block) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& op : block.ops()) {
    for (const auto& o : AllOutputArgs(op)) {
      const proto::VarDesc* v = FindVarDesc(block, o);
      if (v != nullptr && v->persistable() && seen.insert(o).second) out.push_back(o);
    }
  }
  return out;
}

KeptVars KeptByScope(const proto::BlockDesc& block, const std::vector<Initialiser>& initialisers, int64_t program_id,
                     const Scope& scope) {
  KeptVars out;
  std::map<int, bool> all_kept;  // op -> every var it initialises is kept
  for (const auto& [op, name] : initialisers) {
    const Variable* v = scope.FindVar(name);
    const bool keep = v != nullptr && v->Get().initialized() && v->origin() != program_id;
    auto it = all_kept.emplace(op, true).first;
    it->second = it->second && keep;
    if (!keep) continue;
    const proto::VarDesc* d = FindVarDesc(block, name);
    const Tensor& t = v->Get();
    if (d != nullptr && (VarDims(*d) != t.dims() || FromProto(d->dtype()) != t.dtype())) {
      ThrowInvalidArgument("startup program: '", name, "' is declared ", DataTypeName(FromProto(d->dtype())),
                           DimsToString(VarDims(*d)), " but the scope holds it as ", DataTypeName(t.dtype()),
                           DimsToString(t.dims()), " from another program (two programs sharing the name with other ",
                           "shapes): rename one, or erase it from the scope first");
    }
    out.kept.push_back(name);
  }
  for (const auto& [op, keep] : all_kept) {
    if (keep) out.skipped_ops.push_back(op);
  }
  return out;
}

void MarkWritten(Scope& scope, const std::vector<std::string>& vars, const std::vector<std::string>& kept,
                 int64_t program_id) {
  for (const auto& name : vars) {
    if (std::find(kept.begin(), kept.end(), name) != kept.end()) continue;
    Variable* v = scope.FindVar(name);
    if (v != nullptr && v->Get().initialized()) v->set_origin(program_id);
  }
}

}  // namespace kiln
