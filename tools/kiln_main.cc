// kiln: the command line. `kiln <command> [--flags]`; `kiln --help` lists the
// commands, `kiln <command> --help` one command's flags (tools/command_table.h).
#include <cstdio>
#include <string>

#include "framework/error.h"
#include "framework/flags.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/jit_setup.h"
#include "tools/memory_setup.h"

namespace {

int Dispatch(const kiln::tools::CliArgs& a) {
  namespace t = kiln::tools;
  const std::string& c = a.command;
  if (c == "train") return t::TrainCommand();
  if (c == "run") return t::RunCommand(a.feeds);
  if (c == "program") return t::ProgramCommand();
  if (c == "ops") return t::OpsCommand();
  if (c == "dump") return t::DumpCommand();
  if (c == "flags") return t::FlagsCommand(a.all);
  if (c == "bench") return t::BenchCommand();
  if (c == "export") return t::ExportCommand(a.onnx);
  if (c == "predict") return t::PredictCommand(a.feeds);
  if (c == "completion") return t::CompletionCommand(a.positional);
  if (c == "plot") return t::PlotCommand(a.positional);
  if (c == "import") return t::ImportCommand(a.positional, a.input_shapes, a.trainable);
  std::fputs(t::MainHelp().c_str(), stdout);  // kiln help
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace t = kiln::tools;
  if (argc < 2) {
    std::fputs(t::MainHelp().c_str(), stderr);
    return 2;
  }
  t::CliArgs args;
  try {
    kiln::ApplyFlagsFromEnv();
    args = t::ParseCommandLine(argc, argv);
  } catch (const kiln::Error& e) {
    const bool named = argv[1][0] != '-';
    std::fprintf(stderr, "kiln%s%s: error: %s\n", named ? " " : "", named ? argv[1] : "", e.what());
    return 2;
  }
  if (args.help) {
    const t::CommandInfo* command = args.command.empty() || args.command == "help" ? nullptr : t::FindCommand(args.command);
    std::fputs(command != nullptr ? t::CommandHelp(*command).c_str() : t::MainHelp().c_str(), stdout);
    return 0;
  }
  try {
    t::ConfigureJitFromFlags();
    t::ConfigureAllocatorFromFlags();
    return Dispatch(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln %s: error: %s\n", args.command.c_str(), e.what());
    return 1;
  }
}
