// kiln: the command line. `kiln <command> [--flags]`; `kiln help` lists commands.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/flags.h"
#include "tools/commands.h"
#include "tools/jit_setup.h"
#include "tools/memory_setup.h"

namespace {

const char* kUsage =
    "usage: kiln <command> [--flags]\n"
    "commands:\n"
    "  train    train a model (--model mlp|cnn|transformer --dataset digits|fashion-mnist|synthetic ...)\n"
    "  run      run a program file (--program P.pbtxt --feed NAME=FILE.npy ... --fetch A,B --out DIR)\n"
    "  program  write a model's training program (--model ... --out P.pbtxt)\n"
    "  ops      list the registered ops with their slots and attributes (--markdown: docs/ops.md)\n"
    "  dump     compile a model's or program's clusters and write what was compiled (--model M | --program P "
    "--out DIR)\n"
    "  flags    list kiln's flags with defaults (--markdown: docs/flags.md)\n"
    "  bench    time training steps of a model on random data, or oneDNN matmul / copy bandwidth; one JSON line\n"
    "           (--model ... --batch_size N --bench_steps N [--use_jit] | --bench_what matmul|copy|churn)\n"
    "  export   a checkpoint of kiln train --save_dir as an inference model (--from CKPT --out MODEL_DIR)\n"
    "  predict  run an exported model (--model MODEL_DIR --feed NAME=FILE.npy ... [--fetch A,B] --out DIR; JIT on)\n"
    "Every flag can also be set as an environment variable FLAGS_<name>. `kiln <command> --help` lists flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // Collect the repeatable --feed before gflags sees the rest.
  std::vector<std::string> feeds;
  std::vector<char*> args = {argv[0]};
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--feed") == 0 || std::strcmp(argv[i], "-feed") == 0) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kiln: --feed needs NAME=FILE.npy\n");
        return 2;
      }
      feeds.push_back(argv[++i]);
    } else if (std::strncmp(argv[i], "--feed=", 7) == 0) {
      feeds.push_back(argv[i] + 7);
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  char** a = args.data();
  gflags::SetUsageMessage(kUsage);
  try {
    kiln::ApplyFlagsFromEnv();
    gflags::ParseCommandLineFlags(&n, &a, /*remove_flags=*/true);
    if (n > 1) {
      std::fprintf(stderr, "kiln %s: unexpected argument '%s'\n", command.c_str(), a[1]);
      return 2;
    }
    kiln::tools::ConfigureJitFromFlags();
    kiln::tools::ConfigureAllocatorFromFlags();
    if (command == "train") return kiln::tools::TrainCommand();
    if (command == "run") return kiln::tools::RunCommand(feeds);
    if (command == "program") return kiln::tools::ProgramCommand();
    if (command == "ops") return kiln::tools::OpsCommand();
    if (command == "dump") return kiln::tools::DumpCommand();
    if (command == "flags") return kiln::tools::FlagsCommand();
    if (command == "bench") return kiln::tools::BenchCommand();
    if (command == "export") return kiln::tools::ExportCommand();
    if (command == "predict") return kiln::tools::PredictCommand(feeds);
    std::fprintf(stderr, "kiln: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
