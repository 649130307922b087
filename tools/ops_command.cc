// kiln ops: the registered ops with their slots, attributes and capabilities.
#include <cstdio>
#include <string>

#include "framework/flags.h"
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

// The operator table of docs/ops.md (tests/docs_test.cc keeps them equal).
int OpsMarkdown(const OpRegistry& r) {
  auto esc = [](const std::string& s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
    return out;
  };
  std::printf(
      "# Operators\n\n"
      "The %zu registered operators, generated from the op registry by `kiln ops --markdown` (tests/docs_test.cc "
      "fails when this file and the registry differ; regenerate with `./build/tools/kiln ops --markdown > "
      "docs/ops.md`). The exact semantics of each op are in OPS.md.\n\n"
      "Slots: `NAME...` takes several vars, `NAME?` is optional. Kernels: `reference` C++ for every op, `onednn` "
      "where a oneDNN kernel exists. In-place: input slot -> output slot pairs that may share a buffer. JIT: how "
      "build_jit_pass and the compiler lower it (`none`: never clustered; `framework`: clustered, runs its "
      "framework kernel inside the cluster).\n\n"
      "| op | inputs | outputs | attributes (default) | kernels | grad | in-place | JIT | description |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      r.Types().size());
  for (const auto& type : r.Types()) {
    const OpInfo& info = r.Get(type);
    std::string attrs;
    for (const auto& a : info.attrs) {
      if (!attrs.empty()) attrs += "<br>";
      attrs += "`" + a.name + "`: " + AttrKindName(a.kind) + " = " +
               (a.default_value ? "`" + AttrToString(*a.default_value) + "`" : std::string("(required)"));
    }
    std::string inplace;
    for (const auto& [in, out] : info.inplace) inplace += (inplace.empty() ? "" : ", ") + in + "->" + out;
    std::printf("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s |\n", type.c_str(), esc(Slots(info.inputs)).c_str(),
                esc(Slots(info.outputs)).c_str(), esc(attrs.empty() ? "-" : attrs).c_str(),
                info.onednn_kernel ? "reference, onednn" : "reference", info.grad_maker ? "yes" : "no",
                inplace.empty() ? "-" : inplace.c_str(), JitLoweringName(info.jit), esc(info.doc).c_str());
  }
  return 0;
}

int OpsCommand() {
  const OpRegistry& r = OpRegistry::Global();
  if (FLAGS_markdown) return OpsMarkdown(r);
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
