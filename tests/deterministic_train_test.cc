// --deterministic end to end: training with the JIT on gives bitwise the same
// parameters and losses with 1 and with 2 OpenMP threads (separate kiln
// processes), for the MLP, the CNN and the transformer; without the flag at
// least one of them differs, which is what the flag is for.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "framework/file_util.h"
#include "tests/cli_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct Model {
  std::string name;
  std::string flags;
};

// Sizes that make the generated kernels split their row sums (more than
// FusedElementwiseKernel::kParallelMinElements) and oneDNN pick its
// blocking by the thread count.
std::vector<Model> Models() {
  return {{"mlp", "--model mlp --mlp_hidden 512,512 --batch_size 256 --optimizer adam"},
          {"cnn", "--model cnn --batch_size 64 --optimizer momentum"},
          {"transformer", "--model transformer --batch_size 64 --jit_launch_mode executor"}};
}

// The checkpoint's files (parameters and optimizer state, .npy) and the
// metrics' losses of one training run.
std::map<std::string, std::string> TrainAndRead(const Model& m, int threads, bool deterministic) {
  const std::string dir = ::testing::TempDir() + "/kiln_det_" + m.name + "_t" + std::to_string(threads) +
                          (deterministic ? "_det" : "");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cmd = "OMP_NUM_THREADS=" + std::to_string(threads) + " OMP_WAIT_POLICY=passive " +
                          KILN_BINARY + " train " + m.flags +
                          " --epochs 1 --max_steps 6 --progress=false --use_jit --save_dir " + dir +
                          " --metrics_out " + dir + "/m.json" + (deterministic ? " --deterministic" : "") + " 2>&1";
  const test::CliResult r = test::RunCommand(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".npy") files[fs::relative(e.path(), dir).string()] = ReadFile(e.path().string());
  }
  const std::string metrics = ReadFile(dir + "/m.json");
  for (const char* key : {"\"first_loss\"", "\"final_loss\"", "\"test_accuracy\""}) {
    const size_t at = metrics.find(key);
    EXPECT_NE(at, std::string::npos) << metrics;
    if (at != std::string::npos) files[key] = metrics.substr(at, metrics.find('\n', at) - at);
  }
  EXPECT_GT(files.size(), 4u) << dir;
  return files;
}

TEST(DeterministicTrainTest, OneAndTwoThreadsGiveTheSameBits) {
  int differ_without_flag = 0;
  for (const Model& m : Models()) {
    const auto one = TrainAndRead(m, 1, true);
    const auto two = TrainAndRead(m, 2, true);
    ASSERT_EQ(one.size(), two.size()) << m.name;
    for (const auto& [name, bytes] : one) {
      EXPECT_TRUE(two.at(name) == bytes) << m.name << ": " << name << " differs between 1 and 2 threads";
    }
    differ_without_flag += TrainAndRead(m, 1, false) != TrainAndRead(m, 2, false);
  }
  EXPECT_GT(differ_without_flag, 0) << "without --deterministic every model gave the same bits: this test shows "
                                       "nothing on this machine";
}

}  // namespace
}  // namespace kiln
