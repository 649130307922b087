// The command line's one table: every command with its usage line, what it
// does and the flags it reads, and every flag's group. `kiln COMMAND --help`,
// `kiln --help`, `kiln completion bash` and docs/flags.md are all written
// from it (tests/cli_help_test.cc checks that every kiln flag has a group
// and a command).
#pragma once

#include <gflags/gflags.h>

#include <string>
#include <vector>

namespace kiln::tools {

struct CommandInfo {
  std::string name;
  std::string usage;    // the arguments after `kiln <name>`
  std::string summary;  // one sentence
  std::vector<std::string> flags;  // the kiln flags it reads, in no order
  // Arguments that are not gflags flags (`--feed NAME=FILE.npy`, repeatable):
  // each with its form and what it does.
  std::vector<std::pair<std::string, std::string>> extra_args;
};

// The commands in the order `kiln --help` lists them.
const std::vector<CommandInfo>& Commands();
// nullptr for an unknown command.
const CommandInfo* FindCommand(const std::string& name);
std::vector<std::string> CommandNames();

// The groups in the order help shows them: model, data, training, program,
// JIT, kernels, memory, output, distributed, bench.
const std::vector<std::string>& FlagGroups();
// The group of a kiln flag ("" for a flag no group lists).
std::string FlagGroup(const std::string& flag);

// kiln's own flags (framework/flags.cc), sorted by name; gflags' own flags
// (--flagfile, --fromenv, ...) are not among them.
std::vector<gflags::CommandLineFlagInfo> KilnFlags();
std::vector<std::string> KilnFlagNames();
// A flag's default as help and docs show it ("mlp" in quotes, 0.1).
std::string FlagDefaultText(const gflags::CommandLineFlagInfo& f);

// `kiln COMMAND --help`: the usage line, the sentence, then the command's
// flags by group, each with its default and description.
std::string CommandHelp(const CommandInfo& command);
// `kiln --help`: the commands, one line each.
std::string MainHelp();

}  // namespace kiln::tools
