// The subcommands of the `kiln` command line. Each returns the process exit
// code; errors are thrown as kiln::Error and reported by main.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

int TrainCommand();
// feeds: "NAME=FILE.npy" entries (gflags cannot repeat a flag, so main
// collects every --feed itself).
int RunCommand(const std::vector<std::string>& feeds);
int ProgramCommand();
int OpsCommand();
int DumpCommand();
// --all: gflags' own flags too.
int FlagsCommand(bool all);
int BenchCommand();
// kiln export --from CKPT --out MODEL_DIR [--onnx: --out is one .onnx file];
// kiln predict --model MODEL_DIR --feed ... --out DIR.
int ExportCommand(bool onnx);
int PredictCommand(const std::vector<std::string>& feeds);
// kiln import MODEL.onnx --out DIR [--input_shape NAME=d0,d1 ...]: positional
// holds the model file, input_shapes each NAME=d0,d1,... (repeatable).
// trainable: the initializers that train, comma-separated (unset: every
// finite float initializer; OnnxImportOptions::trainable).
int ImportCommand(const std::vector<std::string>& positional, const std::vector<std::string>& input_shapes,
                  const std::optional<std::string>& trainable);
// kiln plot A.jsonl [B.jsonl ...] --out curves.svg; PlotSvg is the document.
int PlotCommand(const std::vector<std::string>& paths);
std::string PlotSvg(const std::vector<std::string>& paths);
// kiln completion bash: the script BashCompletion returns.
int CompletionCommand(const std::vector<std::string>& args);
std::string BashCompletion();

}  // namespace kiln::tools
