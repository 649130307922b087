// Running the kiln binary from tests (KILN_BINARY is defined per test target).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kiln::test {

struct CliResult {
  int code;
  std::string output;  // stdout + stderr
};

// Runs a shell command and collects what it writes to stdout (append
// " 2>&1" to collect stderr too).
inline CliResult RunCommand(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  std::string out;
  if (f == nullptr) return {-1, "popen failed"};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Runs `binary args`, collecting stdout and stderr.
inline CliResult RunKiln(const std::string& binary, const std::string& args) {
  return RunCommand(binary + " " + args + " 2>&1");
}

}  // namespace kiln::test
