// The commands docs/usage.md shows in its "Checkpoints" section run and
// succeed, in order (a doc example that stops working fails here).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "framework/file_util.h"
#include "tests/cli_util.h"

namespace kiln {
namespace {

// The lines of the first ```sh block after the heading `section`.
std::vector<std::string> ShellBlock(const std::string& doc, const std::string& section) {
  const size_t at = doc.find("\n" + section + "\n");
  EXPECT_NE(at, std::string::npos) << section;
  const size_t begin = doc.find("```sh\n", at);
  const size_t end = doc.find("```\n", begin + 6);
  std::vector<std::string> lines;
  std::istringstream in(doc.substr(begin + 6, end - begin - 6));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

TEST(DocsCommandsTest, UsageCheckpointsSectionRuns) {
  const std::string doc = ReadFile(std::string(KILN_SOURCE_DIR) + "/docs/usage.md");
  const std::vector<std::string> lines = ShellBlock(doc, "## Checkpoints");
  ASSERT_GE(lines.size(), 4u);
  const std::string tmp = (std::filesystem::temp_directory_path() / ("kiln-doc-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(tmp);
  for (const std::string& line : lines) {
    // Every path the commands use lives under /tmp/kiln-*: one folder per test run here.
    const std::string cmd = ReplaceAll(ReplaceAll(line, "./build/tools/kiln", KILN_BINARY), "/tmp/kiln-", tmp + "/");
    const test::CliResult r = test::RunCommand("FLAGS_progress=false " + cmd + " 2>&1");
    EXPECT_EQ(r.code, 0) << line << "\n" << r.output;
  }
  EXPECT_TRUE(std::filesystem::exists(tmp + "/pred"));
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace kiln
