// kiln ops: the registered ops with their slots, attributes and capabilities.
#include <cstdio>
#include <string>

#include "framework/op_registry.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

std::string Slots(const std::vector<SlotDef>& slots) {
  std::string s;
  for (const auto& d : slots) {
    if (!s.empty()) s += ", ";
    s += d.name;
    if (d.duplicable) s += "...";
    if (d.dispensable) s += "?";
  }
  return s.empty() ? "-" : s;
}

}  // namespace

int OpsCommand() {
  const OpRegistry& r = OpRegistry::Global();
  std::printf("# %zu ops. Slots: NAME... takes several vars, NAME? is optional.\n", r.Types().size());
  for (const auto& type : r.Types()) {
    const OpInfo& info = r.Get(type);
    std::printf("%s\n", type.c_str());
    if (!info.doc.empty()) std::printf("  %s\n", info.doc.c_str());
    std::printf("  inputs:  %s\n", Slots(info.inputs).c_str());
    std::printf("  outputs: %s\n", Slots(info.outputs).c_str());
    for (const auto& a : info.attrs) {
      std::printf("  attr %s: %s = %s\n", a.name.c_str(), AttrKindName(a.kind),
                  a.default_value ? AttrToString(*a.default_value).c_str() : "(required)");
    }
    std::string caps = "kernels: reference";
    if (info.onednn_kernel) caps += ", onednn";
    caps += info.grad_maker ? "; grad: yes" : "; grad: no";
    if (!info.inplace.empty()) {
      caps += "; in-place:";
      for (const auto& [in, out] : info.inplace) caps += " " + in + "->" + out;
    }
    caps += std::string("; jit: ") + JitLoweringName(info.jit);
    std::printf("  %s\n", caps.c_str());
  }
  return 0;
}

}  // namespace kiln::tools
