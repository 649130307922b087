// framework/checkpoint: the format, atomic saves, verified loads that change
// nothing on failure, and bit-exact resume through the trainer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/manifest.h"
#include "framework/data/npy.h"
#include "framework/executor.h"
#include "framework/file_util.h"
#include "framework/op_registry.h"
#include "framework/trainer.h"
#include "tests/op_test_util.h"
#include "tests/temp_dir.h"
#include "tests/test_jit.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// The MLP case's model with its parameters initialised in `scope`.
struct Initialised {
  Model model;
  Scope scope;
};

std::unique_ptr<Initialised> MlpInScope() {
  auto m = std::make_unique<Initialised>();
  m->model = test::SmallTrainCases()[0].model;
  Executor().RunProgram(m->model.startup, m->scope);
  return m;
}

std::vector<float> Values(const Scope& scope, const std::string& name) {
  const Tensor& t = scope.GetVar(name)->Get();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(CheckpointTest, SavesEveryPersistableVarAsNpyWithAVerifiedManifest) {
  test::TempDir dir("kiln_ckpt");
  auto m = MlpInScope();
  const LoopState at{7, 0, 7, 3, 32};
  const std::string ckpt = SaveCheckpoint(dir.path(), m->model.train, m->scope, at, {0, {{"note.txt", "hi"}}});
  EXPECT_EQ(ckpt, dir.path() + "/ckpt-7");
  EXPECT_EQ(LatestCheckpoint(dir.path()), ckpt);
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> files;
  const CheckpointManifest man = ReadCheckpoint(ckpt, &tensors, &files);
  EXPECT_EQ(man.loop.step, 7);
  EXPECT_EQ(man.loop.shuffle_seed, 3u);
  EXPECT_EQ(man.kiln_version, KilnVersion());
  EXPECT_EQ(man.program_fingerprint, ProgramFingerprint(m->model.train));
  EXPECT_EQ(files.at("note.txt"), "hi");
  const std::vector<std::string> names = CheckpointVars(m->model.train);
  ASSERT_EQ(man.vars.size(), names.size());
  for (const std::string& name : names) {
    ASSERT_TRUE(tensors.count(name)) << name;
    // Each file is a plain .npy of the var.
    const Tensor t = ReadNpy(ckpt + "/" + name + ".npy");
    EXPECT_EQ(test::CompareTensors(t, m->scope.GetVar(name)->Get(), 0, 0), "") << name;
  }
  // Adam's state is part of it.
  EXPECT_TRUE(tensors.count("fc0.w.moment1") && tensors.count("fc0.w.beta1_pow") && tensors.count("learning_rate"));
}

TEST(CheckpointTest, LoadRestoresTheVarsAndKeepsTheNewestK) {
  test::TempDir dir("kiln_ckpt");
  auto m = MlpInScope();
  const std::vector<float> saved = Values(m->scope, "fc0.w");
  for (int step = 1; step <= 5; ++step) {
    SaveCheckpoint(dir.path(), m->model.train, m->scope, LoopState{step, 0, step, 1, 32}, SaveOptions{2, {}});
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"ckpt-4", "ckpt-5"}));
  Scope fresh;
  Executor().RunProgram(m->model.startup, fresh);
  fresh.GetVar("fc0.w")->GetMutable()->mutable_data<float>()[0] = 42.f;
  fresh.GetVar("fc0.w")->set_origin(9);  // as the Python front end marks a startup's vars
  const CheckpointManifest man = LoadCheckpoint(dir.path(), m->model.train, &fresh);
  EXPECT_EQ(man.loop.step, 5);
  EXPECT_EQ(Values(fresh, "fc0.w"), saved);
  // Loaded, no longer the startup program's value (Variable::origin).
  EXPECT_EQ(fresh.GetVar("fc0.w")->origin(), 0);
}

TEST(CheckpointTest, AStaleTemporaryIsNeverPickedAndTheNextSaveRemovesIt) {
  test::TempDir dir("kiln_ckpt");
  auto m = MlpInScope();
  SaveCheckpoint(dir.path(), m->model.train, m->scope, LoopState{1, 0, 1, 1, 32});
  fs::create_directories(dir.path() + "/.tmp-ckpt-9-1");
  std::ofstream(dir.path() + "/.tmp-ckpt-9-1/manifest.json") << "{";
  fs::create_directories(dir.path() + "/ckpt-8");  // a folder without a manifest is not a checkpoint
  EXPECT_EQ(LatestCheckpoint(dir.path()), dir.path() + "/ckpt-1");
  SaveCheckpoint(dir.path(), m->model.train, m->scope, LoopState{2, 0, 2, 1, 32});
  EXPECT_FALSE(fs::exists(dir.path() + "/.tmp-ckpt-9-1"));
  EXPECT_EQ(LatestCheckpoint(dir.path()), dir.path() + "/ckpt-2");
}

// Every way a checkpoint can be wrong is an error naming the var or file,
// and the scope is unchanged.
TEST(CheckpointTest, BadCheckpointsAreErrorsAndNothingIsHalfLoaded) {
  auto m = MlpInScope();
  struct Damage {
    std::string what;
    std::function<void(const std::string& ckpt)> apply;
    std::vector<std::string> message;
  };
  auto overwrite = [](const std::string& path, const std::string& bytes) { std::ofstream(path) << bytes; };
  const std::vector<Damage> cases = {
      {"flipped byte", [](const std::string& c) {
         std::fstream f(c + "/fc1.w.npy", std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(200);
         f.put('\x7f');
       }, {"fc1.w.npy", "corrupt"}},
      {"truncated", [](const std::string& c) { fs::resize_file(c + "/fc0.b.npy", 100); }, {"fc0.b.npy"}},
      {"missing file", [](const std::string& c) { fs::remove(c + "/fc0.w.npy"); }, {"fc0.w.npy"}},
      {"not json", [&](const std::string& c) { overwrite(c + "/manifest.json", "{\"format\": "); },
       {"manifest.json", "not JSON"}},
      {"missing field", [&](const std::string& c) {
         std::string t = ReadFile(c + "/manifest.json");
         t.replace(t.find("\"loop\""), 6, "\"lop\"");
         overwrite(c + "/manifest.json", t);
       }, {"manifest.json", "loop"}},
  };
  for (const Damage& d : cases) {
    SCOPED_TRACE(d.what);
    test::TempDir dir("kiln_ckpt");
    const std::string ckpt = SaveCheckpoint(dir.path(), m->model.train, m->scope, LoopState{1, 0, 1, 1, 32});
    d.apply(ckpt);
    Scope fresh;
    Executor().RunProgram(m->model.startup, fresh);
    fresh.GetVar("fc0.w")->GetMutable()->mutable_data<float>()[0] = 42.f;
    const std::string error = test::ErrorOf([&] { LoadCheckpoint(ckpt, m->model.train, &fresh); });
    for (const auto& part : d.message) EXPECT_NE(error.find(part), std::string::npos) << error;
    EXPECT_EQ(fresh.GetVar("fc0.w")->Get().data<float>()[0], 42.f) << "the scope changed";
  }
}

// A manifest is input: a crafted one must not make the loader read files
// outside its directory (found while writing tests/fuzz/fuzz_checkpoint.cc:
// "../x" was read, and loaded when its sha256 matched), nor list a var twice.
TEST(CheckpointTest, AManifestNamingFilesOutsideItsDirectoryIsAnError) {
  auto m = MlpInScope();
  auto overwrite = [](const std::string& path, const std::string& bytes) { std::ofstream(path) << bytes; };
  struct Case {
    std::string from, to;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"\"fc0.b.npy\"", "\"../outside.npy\"", {".file", "../outside.npy", "within the checkpoint directory"}},
      {"\"fc0.b.npy\"", "\"sub/fc0.b.npy\"", {".file", "sub/fc0.b.npy"}},
      {"\"fc0.b.npy\"", "\"..\"", {".file", "expected a file name"}},
      {"\"fc0.b.npy\"", "\"\"", {".file", "expected a file name"}},
      {"\"name\": \"fc0.w\"", "\"name\": \"fc0.b\"", {"].name", "repeats var 'fc0.b'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.to);
    test::TempDir dir("kiln_ckpt");
    const std::string ckpt = SaveCheckpoint(dir.path(), m->model.train, m->scope, LoopState{1, 0, 1, 1, 32});
    // The same bytes outside the checkpoint: its sha256 matches the manifest's.
    fs::copy_file(ckpt + "/fc0.b.npy", dir.path() + "/outside.npy");
    fs::create_directories(ckpt + "/sub");
    fs::copy_file(ckpt + "/fc0.b.npy", ckpt + "/sub/fc0.b.npy");
    std::string t = ReadFile(ckpt + "/manifest.json");
    ASSERT_NE(t.find(c.from), std::string::npos);
    t.replace(t.find(c.from), c.from.size(), c.to);
    overwrite(ckpt + "/manifest.json", t);
    Scope fresh;
    const std::string error = test::ErrorOf([&] { LoadCheckpoint(ckpt, m->model.train, &fresh); });
    for (const auto& part : c.message) EXPECT_NE(error.find(part), std::string::npos) << error;
    EXPECT_TRUE(fresh.LocalVarNames().empty()) << "the scope changed";
  }
}

TEST(CheckpointTest, AProgramThatDoesNotMatchIsNamedVarByVar) {
  test::TempDir dir("kiln_ckpt");
  auto m = MlpInScope();
  const std::string ckpt = SaveCheckpoint(dir.path(), m->model.train, m->scope, LoopState{1, 0, 1, 1, 32});
  // The same MLP trained with sgd has no Adam state: extra vars.
  TrainConfig sgd;
  const Model other = BuildMlp(MlpConfig{}, sgd);
  Scope scope;
  EXPECT_NE(test::ErrorOf([&] { LoadCheckpoint(ckpt, other.train, &scope); }).find("that the program does not have"),
            std::string::npos);
  // A wider hidden layer: a shape mismatch naming the var and file.
  TrainConfig adam;
  adam.optimizer = OptimizerKind::kAdam;
  MlpConfig wide;
  wide.hidden = {7};
  const Model wider = BuildMlp(wide, adam);
  const std::string error = test::ErrorOf([&] { LoadCheckpoint(ckpt, wider.train, &scope); });
  EXPECT_NE(error.find("has shape"), std::string::npos) << error;
  EXPECT_NE(error.find(".npy"), std::string::npos) << error;
  EXPECT_NE(test::ErrorOf([&] { LoadCheckpoint(dir.path() + "/nothing", m->model.train, &scope); }).find("no checkpoint"),
            std::string::npos);
}

// A run stopped at step `stop` and resumed gives the losses of an
// uninterrupted run bit for bit: JIT on and off, sgd, momentum and adam,
// across an epoch boundary (digits: 44 batches of 32 an epoch).
TEST(CheckpointTest, ResumeIsBitExact) {
  const test::TrainCase base = test::SmallTrainCases()[0];
  for (OptimizerKind opt : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
    TrainConfig tc;
    tc.optimizer = opt;
    const Model model = BuildMlp(MlpConfig{64, {32}, 10}, tc);
    for (bool jit : {false, true}) {
      SCOPED_TRACE(std::string(jit ? "jit " : "no jit ") + std::to_string(static_cast<int>(opt)));
      test::TestJit own_jit;
      TrainOptions o;
      o.epochs = 3;
      o.max_steps = 70;
      if (jit) {
        o.registry = &own_jit.registry();
        o.program_transform = [&own_jit](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
          BuildJitPassOptions bo;
          bo.keep_vars = keep;
          return own_jit.ApplyBuildJit(p, bo);
        };
      }
      const TrainResult straight = Train(model, base.train, base.test, o);
      test::TempDir dir("kiln_ckpt");
      TrainOptions first = o;
      first.max_steps = 30;
      first.save_dir = dir.path();
      first.save_every_steps = 10;
      Train(model, base.train, base.test, first);
      TrainOptions second = o;
      second.resume_from = dir.path();
      const TrainResult resumed = Train(model, base.train, base.test, second);
      ASSERT_EQ(resumed.first_step, 31);
      ASSERT_EQ(resumed.losses.size(), 40u);
      for (size_t i = 0; i < resumed.losses.size(); ++i) {
        ASSERT_EQ(resumed.losses[i], straight.losses[30 + i]) << "step " << 31 + i;
      }
      EXPECT_EQ(resumed.test_accuracy, straight.test_accuracy);
      EXPECT_EQ(own_jit->stats().compiles > 0, jit);
    }
  }
}

TEST(CheckpointTest, ResumeAtAnotherBatchSizeIsAnError) {
  const test::TrainCase c = test::SmallTrainCases()[0];
  test::TempDir dir("kiln_ckpt");
  TrainOptions o;
  o.max_steps = 3;
  o.save_dir = dir.path();
  Train(c.model, c.train, c.test, o);
  o.resume_from = dir.path();
  o.batch_size = 16;
  const std::string error = test::ErrorOf([&] { Train(c.model, c.train, c.test, o); });
  EXPECT_NE(error.find("batch size 32"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln
