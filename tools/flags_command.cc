// kiln flags: every kiln flag with its type, default and description; with
// --markdown the table that docs/flags.md holds (tests/docs_test.cc checks
// that the file is what this prints).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/flags.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

// kiln's own flags: those defined in framework/flags.cc (gflags adds its own,
// --help, --flagfile, ..., defined in its sources).
std::vector<gflags::CommandLineFlagInfo> KilnFlags() {
  std::vector<gflags::CommandLineFlagInfo> all, out;
  gflags::GetAllFlags(&all);
  for (const auto& f : all) {
    if (f.filename.find("framework/flags.cc") != std::string::npos) out.push_back(f);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::string Default(const gflags::CommandLineFlagInfo& f) {
  if (f.type == "string") return "\"" + f.default_value + "\"";
  return f.default_value;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

int FlagsCommand() {
  const auto flags = KilnFlags();
  if (!FLAGS_markdown) {
    for (const auto& f : flags) {
      std::printf("--%s (%s, default %s)\n    %s\n", f.name.c_str(), f.type.c_str(), Default(f).c_str(),
                  f.description.c_str());
    }
    return 0;
  }
  std::printf(
      "# Flags\n\n"
      "Every flag of the `kiln` command line, generated from the gflags definitions in `framework/flags.cc` by "
      "`kiln flags --markdown` (tests/docs_test.cc fails when this file and the definitions differ; regenerate "
      "with `./build/tools/kiln flags --markdown > docs/flags.md`).\n\n"
      "Flags are set on the command line (`--name=value`, `--name value`, `--flag`/`--noflag` for booleans) or "
      "as environment variables `FLAGS_name=value`; the command line wins. They are read only in `tools/`, "
      "which turns them into options structs.\n\n"
      "| flag | type | default | what it does |\n|---|---|---|---|\n");
  for (const auto& f : flags) {
    std::printf("| `--%s` | %s | `%s` | %s |\n", f.name.c_str(), f.type.c_str(), Default(f).c_str(),
                Escape(f.description).c_str());
  }
  return 0;
}

}  // namespace kiln::tools
