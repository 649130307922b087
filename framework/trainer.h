// The training loop: runs a Model's startup program once, then its training
// program over mini-batches, and evaluates test accuracy with its forward
// program. Shared by `kiln train` and the end-to-end tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/executor.h"
#include "framework/models/models.h"

namespace kiln {

struct TrainProgress {
  int epoch = 0;  // 0-based
  int epochs = 0;
  int64_t batch = 0;  // 0-based within the epoch
  int64_t batches = 0;
  int64_t step = 0;  // global, 1-based after the step
  float loss = 0.f;
  double samples_per_sec = 0.0;  // over the epoch so far
  double step_ms = 0.0;          // this step's time
};

// Data-parallel training as the trainer sees it: this process is rank `rank`
// of `size` and trains rows [rank * B / size, (rank + 1) * B / size) of
// every global batch of B rows; the global order of the rows does not depend
// on `size`. The hooks do the communication (the tool wires them to
// framework/distributed/communicator.h).
struct DataParallelTraining {
  int rank = 0;
  int size = 1;
  // The job's loss of a step from this rank's (the mean over the ranks).
  std::function<float(float)> average_loss;
  // Called every check_every steps (0: never) after the step, to compare the
  // parameters across ranks.
  int64_t check_every = 0;
  std::function<void(const Scope&, int64_t step)> check;
};

struct TrainOptions {
  int epochs = 1;
  int64_t batch_size = 32;
  int64_t eval_batch_size = 0;  // evaluation's batch (0: batch_size)
  uint64_t seed = 1;      // shuffling
  // Threads that make the next batches (training and evaluation) while the
  // step runs (DataLoader; 0: each batch is made between steps). The batches,
  // and so the results, are the same for any value.
  int num_workers = 1;
  int64_t max_steps = 0;  // 0: no limit
  ExecutorOptions exec;
  // The ops the programs run with (a test's own JIT ops); OpRegistry::Global()
  // when null.
  const OpRegistry* registry = nullptr;
  std::function<void(int64_t step)> before_step;      // before every step, with its global 1-based number
  std::function<void(const TrainProgress&)> on_step;  // after every step
  std::function<void(int epoch, double test_accuracy)> on_epoch;  // after every epoch (evaluated)
  // Rewrites the training and forward programs before they run (the pass
  // pipeline); `keep` names the feeds and fetch targets.
  std::function<proto::ProgramDesc(const proto::ProgramDesc&, const std::set<std::string>& keep)> program_transform;
  // Checkpoints (framework/checkpoint/checkpoint.h) of the training
  // program's persistable vars: every save_every_steps steps and after the
  // last one, into save_dir, keeping the newest keep_checkpoints (0: all).
  // checkpoint_files are stored beside the vars (the programs, for export).
  std::string save_dir;
  int64_t save_every_steps = 0;
  int keep_checkpoints = 0;
  std::map<std::string, std::string> checkpoint_files;
  // A checkpoint directory, or a save directory (its newest checkpoint): the
  // run continues from there, with the checkpoint's parameters, optimizer
  // state, step count and data order. max_steps and epochs stay global.
  std::string resume_from;
  // A NaN or Inf loss stops training with an error naming the step and the
  // last finite loss (before any checkpoint of that step is written).
  bool stop_on_nonfinite = true;
  DataParallelTraining data_parallel;
};

struct TrainResult {
  std::vector<float> losses;  // one per step run here
  int64_t first_step = 1;     // the global step of losses[0] (after a resume, the step after the checkpoint's)
  std::string last_checkpoint;  // the directory of the last checkpoint saved, if any
  float first_loss = 0.f;     // mean of the first min(10, steps) losses
  float final_loss = 0.f;     // mean of the last min(10, steps) losses
  double test_accuracy = 0.0;
  int64_t steps = 0;  // steps run here
  double step_ms_median = 0.0;
  double train_seconds = 0.0;
  // Highest tensor bytes live during an evaluation above what was live when
  // it started (the allocator's window peak).
  size_t eval_peak_tensor_bytes = 0;
};

TrainResult Train(const Model& model, const Dataset& train, const Dataset& test, const TrainOptions& options);

// Fraction of rows of `data` whose arg-max probability is the label, using
// the parameters in `scope` and the model's forward program.
// `forward` is the model's forward program, possibly transformed; batches
// are made by `num_workers` threads ahead of the step (0: between steps).
double Evaluate(const Model& model, const proto::ProgramDesc& forward, Scope& scope, const Dataset& data,
                int64_t batch_size, const ExecutorOptions& exec_options, int num_workers = 1,
                const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln
