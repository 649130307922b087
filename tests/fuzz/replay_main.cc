// The replay driver of the fuzz harnesses in builds without libFuzzer (gcc):
// runs LLVMFuzzerTestOneInput once on every file named on the command line
// or found in a directory named there, as `harness -runs=0 DIR` does with
// libFuzzer. Arguments starting with '-' (libFuzzer flags) are ignored, so
// fuzz_smoke.sh calls both kinds of binary the same way. A crash aborts, as
// under libFuzzer; an exception other than kiln::Error escapes and aborts.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "tests/fuzz/fuzz_util.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    if (!fs::is_directory(arg)) {
      inputs.push_back(arg);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(arg)) {
      if (e.is_regular_file()) found.push_back(e.path());
    }
    std::sort(found.begin(), found.end());
    inputs.insert(inputs.end(), found.begin(), found.end());
  }
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      std::cerr << "cannot read " << p << "\n";
      return 1;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::cout << argv[0] << ": replayed " << inputs.size() << " inputs\n";
  return inputs.empty() ? 1 : 0;
}
