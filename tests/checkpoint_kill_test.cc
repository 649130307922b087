// Atomic checkpoints under SIGKILL: `kiln train` saving a checkpoint every
// step is killed at random moments (60 times, seeded), each run resuming from
// the newest checkpoint of the one before. After every kill the newest
// checkpoint must read and verify (manifest, sha256 of every file, dtypes and
// shapes) and load into the program it came from; a half-written one must
// never be picked.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "framework/checkpoint/checkpoint.h"
#include "framework/program_io.h"
#include "framework/scope.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Starts `kiln train` writing to `dir` (resuming from it when it holds a
// checkpoint), output to /dev/null; returns its pid.
pid_t StartTraining(const std::string& dir) {
  std::vector<std::string> args = {KILN_BINARY, "train", "--model", "mlp", "--dataset", "digits",
                                   "--mlp_hidden", "256,256", "--optimizer", "adam", "--epochs", "1000",
                                   "--save_dir", dir, "--save_every_steps", "1", "--keep_checkpoints", "3",
                                   "--progress=false"};
  if (!LatestCheckpoint(dir).empty()) args.insert(args.end(), {"--resume", dir});
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST(CheckpointKillTest, TheNewestCheckpointAlwaysVerifiesAfterSigkill) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::mt19937 rng(20261123);
  std::uniform_int_distribution<int> delay_ms(150, 900);
  int kills = 0, verified = 0, steps_seen = 0, mid_save = 0;
  int64_t last_step = -1;
  for (int round = 0; round < 60; ++round) {
    const pid_t pid = StartTraining(dir.string());
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    // A temporary directory left behind: this kill landed inside a save.
    for (const auto& e : fs::directory_iterator(dir)) mid_save += e.path().filename().string().rfind(".tmp-", 0) == 0;
    const std::string latest = LatestCheckpoint(dir.string());
    if (latest.empty()) continue;  // killed before the first save
    // The newest one reads, verifies and loads into its own program.
    std::map<std::string, std::string> files;
    CheckpointManifest m;
    ASSERT_NO_THROW(m = ReadCheckpoint(latest, nullptr, &files)) << latest;
    const proto::ProgramDesc train = ParseProgramText(files.at("train.pbtxt"), latest + "/train.pbtxt");
    Scope scope;
    ASSERT_NO_THROW(LoadCheckpoint(latest, train, &scope)) << latest;
    ++verified;
    // Training goes on across kills: each run resumed from the last.
    EXPECT_GE(m.loop.step, last_step) << latest;
    steps_seen += m.loop.step > last_step;
    last_step = m.loop.step;
  }
  fs::remove_all(dir);
  std::printf("%d kills, %d inside a save, %d newest checkpoints verified, last step %lld\n", kills, mid_save,
              verified, static_cast<long long>(last_step));
  EXPECT_GE(kills, 50);
  EXPECT_GE(verified, 50);
  EXPECT_GT(steps_seen, 10);
}

}  // namespace
}  // namespace kiln
