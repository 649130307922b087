// The command line as a user meets it: help per command from the command
// table, errors that say the fix (did you mean, the form an argument takes),
// and the bash completion script.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "framework/file_util.h"
#include "framework/flags.h"
#include "tests/cli_util.h"
#include "tools/command_table.h"

namespace kiln {
namespace {

using test::CliResult;

CliResult Kiln(const std::string& args) { return test::RunKiln(KILN_BINARY, args); }

void ExpectHas(const CliResult& r, const std::string& text) {
  EXPECT_NE(r.output.find(text), std::string::npos) << "missing: " << text << "\n" << r.output;
}

// Every kiln flag belongs to a group and is read by some command: a flag
// added to framework/flags.cc without a place in the table fails here.
TEST(CliHelpTest, EveryFlagHasAGroupAndACommand) {
  // A reference to one flag links framework/flags.cc, and so every flag, into
  // this binary (a static library contributes only the objects used).
  ASSERT_FALSE(FLAGS_use_jit);
  ASSERT_GT(tools::KilnFlagNames().size(), 50u);
  for (const std::string& flag : tools::KilnFlagNames()) {
    EXPECT_FALSE(tools::FlagGroup(flag).empty()) << "--" << flag << " has no group in tools/command_table.cc";
    bool read = false;
    for (const auto& c : tools::Commands()) {
      for (const auto& f : c.flags) read = read || f == flag;
    }
    EXPECT_TRUE(read) << "--" << flag << " is read by no command in tools/command_table.cc";
  }
  // And the table names no flag that does not exist.
  const auto names = tools::KilnFlagNames();
  for (const auto& c : tools::Commands()) {
    for (const auto& f : c.flags) EXPECT_NE(std::find(names.begin(), names.end(), f), names.end()) << c.name << " " << f;
  }
}

TEST(CliHelpTest, HelpPerCommandShowsOnlyItsFlags) {
  for (const auto& c : tools::Commands()) {
    if (c.name == "help") continue;  // kiln help --help: the command list
    const CliResult r = Kiln(c.name + " --help");
    EXPECT_EQ(r.code, 0) << c.name << "\n" << r.output;
    ExpectHas(r, "usage: kiln " + c.name + " " + c.usage);
    ExpectHas(r, c.summary);
    EXPECT_EQ(Kiln("help " + c.name).output, r.output) << c.name;
    EXPECT_EQ(r.output.find("--flagfile"), std::string::npos) << c.name;  // gflags' own flags: only kiln flags --all
  }
  const CliResult train = Kiln("train --help");
  ExpectHas(train, "\nmodel:\n  --d_model=N");
  ExpectHas(train, "--model=NAME                   Model to build: mlp | cnn | transformer | resnet | gpt (default \"mlp\")");
  ExpectHas(train, "--lr=X                         Learning rate (a finite number > 0) (default 0.1)");
  EXPECT_EQ(train.output.find("--bench_steps"), std::string::npos) << train.output;
  EXPECT_EQ(train.output.find("--fetch"), std::string::npos) << train.output;
  ExpectHas(train, "\nprogram:\n  --from=CKPT");  // kiln train --from DIR: an imported program
  ExpectHas(train, "--program=P.pbtxt");
  const CliResult run = Kiln("run --help");
  ExpectHas(run, "--feed NAME=FILE.npy");
  ExpectHas(run, "--fetch=NAME[,NAME]");
  EXPECT_EQ(run.output.find("--epochs"), std::string::npos) << run.output;
  const CliResult main_help = Kiln("--help");
  EXPECT_EQ(main_help.code, 0);
  for (const auto& c : tools::Commands()) ExpectHas(main_help, "\n  " + c.name);
  EXPECT_EQ(Kiln("help").output, main_help.output);
  EXPECT_EQ(Kiln("").code, 2);  // no command: the list, on stderr, as a usage error
  ExpectHas(Kiln("flags --all"), "--flagfile");
  EXPECT_EQ(Kiln("flags").output.find("--flagfile"), std::string::npos);
}

TEST(CliHelpTest, ErrorsSuggestTheFix) {
  const std::string dir = ::testing::TempDir() + "/kiln_cli_help_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  WriteFileAtomic(dir + "/p.pbtxt", R"pb(
blocks { idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: 2 }
  vars { name: "y" dtype: FP32 dims: 2 }
  ops { type: "relo" inputs { name: "X" args: "x" } outputs { name: "Out" args: "y" } } }
)pb");
  WriteFileAtomic(dir + "/q.pbtxt", R"pb(
blocks { idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: 2 }
  vars { name: "hidden" dtype: FP32 dims: 2 }
  ops { type: "relu" inputs { name: "X" args: "x" } outputs { name: "Out" args: "hidden" } } }
)pb");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"trian", "kiln trian: error: unknown command 'trian'; did you mean train?"},
      {"train --modle mlp", "unknown flag --modle; did you mean --model?"},
      {"train --epocs=3", "unknown flag --epocs; did you mean --epochs?"},
      {"train --model mpl", "unknown model 'mpl': expected mlp, cnn, transformer, resnet or gpt; did you mean 'mlp'?"},
      {"train --model resnet --resnet_widths ,", "--resnet_widths is empty: give the channels of each stage"},
      {"train --model resnet --resnet_widths 32,x", "--resnet_widths: 'x' is not a positive channel count"},
      {"train --model resnet --resnet_blocks 0", "--resnet_blocks must be at least 1, got 0"},
      {"train --model gpt --d_model 32 --num_heads 3",
       "gpt: num_heads (--num_heads) 3 does not divide d_model (--d_model) 32"},
      {"train --model gpt --vocab 1", "gpt: vocab (--vocab) must be at least 2, got 1"},
      {"train --model gpt --dataset digits", "--model gpt trains on synthetic token sequences, not digits"},
      {"train --optimizer adma", "unknown optimizer 'adma': expected sgd, momentum, adam or adamw; did you mean 'adam'?"},
      {"train --dataset digit", "did you mean 'digits'?"},
      {"train --epochs ten", "--epochs takes an integer (int32), got 'ten'"},
      {"train --lr", "--lr needs a value: --lr N"},
      {"run --feed x x.npy", "--feed takes NAME=FILE.npy (one argument, no space), got 'x'"},
      {"train --feed x=x.npy", "kiln train takes no --feed"},
      {"train mlp", "unexpected argument 'mlp': flags are --name=value or --name value"},
      {"run --program " + dir + "/p.pbtxt --fetch y --out " + dir + "/o",
       "unknown op type 'relo'; did you mean 'relu'"},
      {"run --program " + dir + "/q.pbtxt --feed x=" + dir + "/none.npy --fetch hiden --out " + dir + "/o",
       "fetch 'hiden': the program declares no such variable; did you mean 'hidden'?"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = Kiln(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }
  std::filesystem::remove_all(dir);
}

// On a terminal (script(1) gives the command one), kiln train draws a bar
// with the step, the steps in all and an ETA; piped, it prints plain lines.
TEST(CliHelpTest, ProgressOnATerminalAndPlainLinesOtherwise) {
  if (test::RunCommand("command -v script >/dev/null").code != 0) GTEST_SKIP() << "script(1) is not installed";
  const std::string train = std::string(KILN_BINARY) + " train --model mlp --epochs 2";
  const CliResult tty = test::RunCommand("script -qec '" + train + "' /dev/null");
  EXPECT_EQ(tty.code, 0) << tty.output;
  ExpectHas(tty, "epoch 2/2 [##############################] 88/88  ETA 0:00  loss ");
  const CliResult piped = test::RunCommand(train + " 2>&1 | cat");
  ExpectHas(piped, "epoch 1/2  loss ");
  EXPECT_EQ(piped.output.find("ETA"), std::string::npos) << piped.output;
}

// Drives the completion function as bash would: COMP_WORDS and COMP_CWORD.
std::string Complete(const std::string& words, int cword) {
  const std::string script = std::string(KILN_BINARY) + " completion bash";
  const std::string cmd = "bash -c 'eval \"$(" + script + ")\"; COMP_WORDS=(" + words + "); COMP_CWORD=" +
                          std::to_string(cword) + "; _kiln; echo \"${COMPREPLY[*]}\"'";
  return test::RunCommand(cmd).output;
}

TEST(CliHelpTest, BashCompletion) {
  EXPECT_EQ(Complete("kiln tr", 1), "train\n");
  EXPECT_EQ(Complete("kiln train --mo", 2), "--model\n");
  EXPECT_EQ(Complete("kiln train --model \"\"", 3), "mlp cnn transformer resnet gpt\n");
  EXPECT_EQ(Complete("kiln train --optimizer = a", 4), "adam adamw\n");  // --optimizer=a
  EXPECT_EQ(Complete("kiln train --jit_launch_mode \"\"", 3), "runtime executor\n");
  EXPECT_EQ(Complete("kiln run --fe", 2), "--fetch --feed\n");
  EXPECT_EQ(Complete("kiln help pr", 2), "program predict\n");
  EXPECT_NE(Kiln("completion zsh").code, 0);
}

}  // namespace
}  // namespace kiln
