// kiln flags: every kiln flag with its type, default and description; with
// --markdown the page docs/flags.md holds, grouped as `kiln <command> --help`
// groups them and naming the commands that read each flag (tests/docs_test.cc
// checks that the file is what this prints); with --all gflags' own flags too.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/flags.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string CommandsReading(const std::string& flag) {
  std::string out;
  for (const CommandInfo& c : Commands()) {
    if (std::find(c.flags.begin(), c.flags.end(), flag) == c.flags.end()) continue;
    out += (out.empty() ? "" : ", ") + c.name;
  }
  return out;
}

void PrintMarkdown() {
  std::printf(
      "# Flags\n\n"
      "Every flag of the `kiln` command line, generated from the gflags definitions in `framework/flags.cc` and "
      "the command table in `tools/command_table.cc` by `kiln flags --markdown` (tests/docs_test.cc fails when "
      "this file and the definitions differ; regenerate with `./build/tools/kiln flags --markdown > "
      "docs/flags.md`). `kiln <command> --help` shows the flags one command reads.\n\n"
      "Flags are set on the command line (`--name=value`, `--name value`, `--flag`/`--noflag` for booleans) or "
      "as environment variables `FLAGS_name=value`; the command line wins. They are read only in `tools/`, "
      "which turns them into options structs.\n");
  const auto flags = KilnFlags();
  for (const std::string& group : FlagGroups()) {
    std::printf("\n## %s\n\n| flag | type | default | read by | what it does |\n|---|---|---|---|---|\n",
                group.c_str());
    for (const auto& f : flags) {
      if (FlagGroup(f.name) != group) continue;
      std::printf("| `--%s` | %s | `%s` | %s | %s |\n", f.name.c_str(), f.type.c_str(), FlagDefaultText(f).c_str(),
                  CommandsReading(f.name).c_str(), Escape(f.description).c_str());
    }
  }
}

}  // namespace

int FlagsCommand(bool all) {
  if (FLAGS_markdown) {
    PrintMarkdown();
    return 0;
  }
  std::vector<gflags::CommandLineFlagInfo> flags = KilnFlags();
  if (all) {
    std::vector<gflags::CommandLineFlagInfo> every;
    gflags::GetAllFlags(&every);
    for (const auto& f : every) {
      if (FlagGroup(f.name).empty() && f.filename.find("framework/flags.cc") == std::string::npos) flags.push_back(f);
    }
  }
  for (const auto& f : flags) {
    const std::string group = FlagGroup(f.name);
    std::printf("--%s (%s, default %s%s)\n    %s\n", f.name.c_str(), f.type.c_str(), FlagDefaultText(f).c_str(),
                group.empty() ? ", gflags" : (", " + group).c_str(), f.description.c_str());
  }
  return 0;
}

}  // namespace kiln::tools
