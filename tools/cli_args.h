// The command line's parser: `kiln <command> [args]`. gflags keeps the flags;
// this parser reads argv itself so that every mistake gets an error that
// says the fix (a did-you-mean for unknown commands and flags, the form a
// malformed argument takes) before anything runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

struct CliArgs {
  std::string command;               // "" with `kiln --help`
  bool help = false;                 // --help / -h, or `kiln help [COMMAND]`
  bool all = false;                  // kiln flags --all
  bool onnx = false;                 // kiln export --onnx
  std::vector<std::string> feeds;    // each --feed NAME=FILE.npy, as NAME=FILE.npy
  std::vector<std::string> positional;  // `kiln completion bash`: {"bash"}; kiln import's model
  std::vector<std::string> input_shapes;  // kiln import's --input_shape NAME=d0,d1,... entries
  std::optional<std::string> trainable;   // kiln import's --trainable NAME,NAME,...
};

// Parses argv[1..] and sets the flags it names (after the FLAGS_ environment
// variables, which the caller applies first). Throws kiln::Error
// (InvalidArgument) naming the argument and what it should be:
//   kiln trian            unknown command 'trian'; did you mean train?
//   --modle mlp           unknown flag --modle; did you mean --model?
//   --epochs ten          --epochs takes an int32 (N), got 'ten'
//   --feed x x.npy        --feed takes NAME=FILE.npy (one argument, no space), got 'x'
CliArgs ParseCommandLine(int argc, char** argv);

}  // namespace kiln::tools
