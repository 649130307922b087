// docs/flags.md and docs/ops.md are generated (kiln flags --markdown, kiln ops
// --markdown) and must match the flag definitions and the op registry.
// Regenerate both with KILN_UPDATE_GOLDEN=1 (or the commands the files name).
#include <gtest/gtest.h>

#include "tests/cli_util.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace {

std::string Stdout(const std::string& args) {
  const std::string cmd = std::string(KILN_BINARY) + " " + args;
  const kiln::test::CliResult r = kiln::test::RunCommand(cmd);
  EXPECT_EQ(r.code, 0) << cmd;
  return r.output;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void CheckDoc(const std::string& doc, const std::string& args) {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/" + doc;
  const std::string generated = Stdout(args);
  if (std::getenv("KILN_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << generated;
    return;
  }
  EXPECT_EQ(Read(path), generated) << doc << " is out of date: regenerate with `./build/tools/kiln " << args
                                   << " > " << doc << "` (or KILN_UPDATE_GOLDEN=1 ctest -R docs_test)";
}

TEST(DocsTest, FlagsMdMatchesTheFlagDefinitions) {
  CheckDoc("docs/flags.md", "flags --markdown");
  const std::string doc = Read(std::string(KILN_SOURCE_DIR) + "/docs/flags.md");
  // Sanity: the generator sees kiln's flags, and only those.
  EXPECT_NE(doc.find("| `--use_jit` | bool | `false` |"), std::string::npos);
  EXPECT_NE(doc.find("| `--jit_dump_dir` | string | `\"\"` |"), std::string::npos);
  EXPECT_EQ(doc.find("--flagfile"), std::string::npos);
}

TEST(DocsTest, OpsMdMatchesTheRegistry) {
  CheckDoc("docs/ops.md", "ops --markdown");
  const std::string doc = Read(std::string(KILN_SOURCE_DIR) + "/docs/ops.md");
  EXPECT_NE(doc.find("| `matmul` |"), std::string::npos);
  EXPECT_NE(doc.find("| `jit_launch` |"), std::string::npos);
}

}  // namespace
