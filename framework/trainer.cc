#include "framework/trainer.h"

#include "framework/allocator.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/data/data_loader.h"
#include "framework/op_desc.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

float MeanOf(const std::vector<float>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return end > begin ? static_cast<float>(s / static_cast<double>(end - begin)) : 0.f;
}

void FeedBatch(const Model& m, const proto::ProgramDesc& program, Scope& scope, const Dataset& batch) {
  // Zero-copy: the batch is not touched until the next one replaces it.
  FeedTensor(program.blocks(0), scope, m.features, batch.features, /*share=*/true);
  FeedTensor(program.blocks(0), scope, m.labels, batch.labels, /*share=*/true);
}

}  // namespace

double Evaluate(const Model& model, const proto::ProgramDesc& forward, Scope& scope, const Dataset& data,
                int64_t batch_size, const ExecutorOptions& exec_options, int num_workers,
                const OpRegistry& registry) {
  if (data.size() == 0) return 0.0;
  Executor exec(exec_options, registry);
  auto plan = exec.Prepare(forward, 0, {model.probs});
  DataLoaderOptions lo;
  lo.batcher.batch_size = batch_size;
  lo.batcher.shuffle = false;
  lo.batcher.drop_last = false;
  lo.num_workers = num_workers;
  DataLoader loader(data, lo);
  loader.StartEpoch(0);
  // A program whose features have a fixed batch (an ONNX model imported at
  // batch B) takes the last, short batch padded with copies of its last row;
  // only the real rows count.
  const int64_t fixed_batch = VarDims(RequireVarDesc(forward.blocks(0), model.features, "features"))[0];
  Dataset batch;
  int64_t correct = 0, total = 0;
  while (loader.Next(&batch)) {
    const int64_t rows = batch.size();
    if (fixed_batch > 0 && rows < fixed_batch) {
      std::vector<int64_t> padded(static_cast<size_t>(fixed_batch), rows - 1);
      for (int64_t r = 0; r < rows; ++r) padded[static_cast<size_t>(r)] = r;
      batch = GatherRows(batch, padded);
    }
    FeedBatch(model, forward, scope, batch);
    exec.Run(*plan, scope);
    const Tensor& probs = scope.GetVar(model.probs)->Get();
    const int64_t classes = probs.dim(1);
    const float* p = probs.data<float>();
    const int64_t* labels = batch.labels.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = p + r * classes;
      const int64_t pred = std::max_element(row, row + classes) - row;
      correct += pred == labels[r];
    }
    total += rows;
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

namespace {

// Continues from a checkpoint: its vars into `scope`, its loop position out.
LoopState Resume(const Model& model, const TrainOptions& options, Scope& scope) {
  const CheckpointManifest m = LoadCheckpoint(options.resume_from, model.train, &scope);
  if (m.loop.batch_size != options.batch_size) {
    ThrowInvalidArgument("checkpoint '", options.resume_from, "' was taken at batch size ", m.loop.batch_size,
                         "; resume with that batch size (got ", options.batch_size, ")");
  }
  return m.loop;
}

// The loop's position after batch `b` of epoch `epoch` (of `batches`) ran.
LoopState After(int64_t step, int epoch, int64_t b, int64_t batches, const LoopState& base) {
  LoopState next = base;
  next.step = step;
  next.epoch = b + 1 < batches ? epoch : epoch + 1;
  next.batch = b + 1 < batches ? b + 1 : 0;
  return next;
}

std::string Save(const Model& model, const TrainOptions& options, const Scope& scope, const LoopState& at) {
  SaveOptions so;
  so.keep = options.keep_checkpoints;
  so.files = options.checkpoint_files;
  return SaveCheckpoint(options.save_dir, model.train, scope, at, so);
}

void Summarise(TrainResult* result, std::vector<double> step_ms) {
  result->steps = static_cast<int64_t>(result->losses.size());
  const size_t n = result->losses.size(), k = std::min<size_t>(10, n);
  result->first_loss = MeanOf(result->losses, 0, k);
  result->final_loss = MeanOf(result->losses, n - k, n);
  if (!step_ms.empty()) {
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    result->step_ms_median = step_ms[step_ms.size() / 2];
  }
}

void CheckOptions(const Dataset& train, const TrainOptions& options) {
  CheckDataset(train, "training data");
  if (options.batch_size < 1) ThrowInvalidArgument("batch size must be at least 1, got ", options.batch_size);
  const DataParallelTraining& dp = options.data_parallel;
  if (dp.size < 1 || dp.rank < 0 || dp.rank >= dp.size) {
    ThrowInvalidArgument("data parallel: rank ", dp.rank, " of ", dp.size, " ranks");
  }
  if (options.batch_size % dp.size != 0) {
    ThrowInvalidArgument("data parallel: the global batch size ", options.batch_size, " is not a multiple of the ",
                         dp.size, " ranks");
  }
  if (options.batch_size > train.size()) {
    ThrowInvalidArgument("batch size ", options.batch_size, " exceeds the ", train.size(), " training rows");
  }
  if (options.save_every_steps < 0) ThrowInvalidArgument("save_every_steps must be >= 0");
}

// Evaluate, measuring the tensor bytes it keeps live above what was live
// before it (into result->eval_peak_tensor_bytes, the highest so far).
double MeasuredEvaluate(const Model& model, const proto::ProgramDesc& forward, Scope& scope, const Dataset& test,
                        const TrainOptions& options, TrainResult* result) {
  CachingAllocator& allocator = CachingAllocator::Global();
  const size_t before = allocator.stats().in_use_bytes;
  allocator.ResetWindowPeak();
  const int64_t batch = options.eval_batch_size > 0 ? options.eval_batch_size : options.batch_size;
  const double accuracy = Evaluate(model, forward, scope, test, batch, options.exec, options.num_workers,
                                   options.registry != nullptr ? *options.registry : OpRegistry::Global());
  const size_t peak = allocator.stats().window_peak_in_use_bytes;
  result->eval_peak_tensor_bytes = std::max(result->eval_peak_tensor_bytes, peak > before ? peak - before : 0);
  return accuracy;
}

// --stop_on_nonfinite: the step, where it was, and the last finite loss.
void CheckLossFinite(float loss, int64_t step, int epoch, int64_t batch, const TrainResult& so_far) {
  if (std::isfinite(loss)) return;
  std::string last = "no step before it had a finite loss";
  for (size_t i = so_far.losses.size(); i-- > 0;) {
    if (!std::isfinite(so_far.losses[i])) continue;
    last = "the last finite loss was " + std::to_string(so_far.losses[i]) + " at step " +
           std::to_string(so_far.first_step + static_cast<int64_t>(i));
    break;
  }
  ThrowInvalidArgument("training stopped: the loss is ", std::isnan(loss) ? "NaN" : "Inf", " at step ", step,
                       " (epoch ", epoch + 1, ", batch ", batch + 1, "); ", last,
                       ". Try a smaller --lr, or --check_nan_inf to name the op that made it "
                       "(--stop_on_nonfinite=false trains on)");
}

}  // namespace

TrainResult Train(const Model& model, const Dataset& train, const Dataset& test, const TrainOptions& options) {
  CheckOptions(train, options);
  Scope scope;
  Executor exec(options.exec, options.registry != nullptr ? *options.registry : OpRegistry::Global());
  exec.RunProgram(model.startup, scope);
  LoopState at{0, 0, 0, options.seed, options.batch_size};
  if (!options.resume_from.empty()) at = Resume(model, options, scope);
  proto::ProgramDesc train_program = model.train, forward_program = model.forward;
  if (options.program_transform) {
    train_program = options.program_transform(model.train, {model.features, model.labels, model.loss});
    forward_program = options.program_transform(model.forward, {model.features, model.labels, model.probs});
  }
  auto plan = exec.Prepare(train_program, 0, {model.loss});
  DataLoaderOptions lo;
  lo.batcher.batch_size = options.batch_size;
  lo.batcher.seed = at.shuffle_seed;
  lo.num_workers = options.num_workers;
  DataLoader loader(train, lo);
  TrainResult result;
  result.first_step = at.step + 1;
  std::vector<double> step_ms;
  const auto t_start = Clock::now();
  int64_t step = at.step, saved_step = -1;
  bool stop = options.max_steps > 0 && step >= options.max_steps;
  for (int epoch = static_cast<int>(at.epoch); epoch < options.epochs && !stop; ++epoch) {
    // After a resume, the batches trained on before the checkpoint are skipped, not made.
    const int64_t first_batch = epoch == at.epoch ? at.batch : 0;
    loader.StartEpoch(epoch, first_batch);
    const auto t_epoch = Clock::now();
    int64_t samples = 0;
    Dataset batch;
    for (int64_t b = first_batch; loader.Next(&batch); ++b) {
      if (options.before_step) options.before_step(step + 1);
      const auto t0 = Clock::now();
      const DataParallelTraining& dp = options.data_parallel;
      const int64_t shard = batch.size() / dp.size;
      FeedBatch(model, train_program, scope,
                dp.size == 1 ? batch : SliceRows(batch, dp.rank * shard, (dp.rank + 1) * shard));
      exec.Run(*plan, scope);
      float loss = scope.GetVar(model.loss)->Get().data<float>()[0];
      if (dp.average_loss) loss = dp.average_loss(loss);
      if (options.stop_on_nonfinite) CheckLossFinite(loss, step + 1, epoch, b, result);
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      result.losses.push_back(loss);
      samples += batch.size();
      ++step;
      if (dp.check && dp.check_every > 0 && step % dp.check_every == 0) dp.check(scope, step);
      if (options.on_step) {
        const double secs = std::chrono::duration<double>(Clock::now() - t_epoch).count();
        options.on_step(TrainProgress{epoch, options.epochs, b, loader.num_batches(), step, loss,
                                      secs > 0 ? static_cast<double>(samples) / secs : 0.0, step_ms.back()});
      }
      stop = options.max_steps > 0 && step >= options.max_steps;
      if (!options.save_dir.empty() && ((options.save_every_steps > 0 && step % options.save_every_steps == 0) ||
                                        (stop && step != saved_step))) {
        result.last_checkpoint = Save(model, options, scope, After(step, epoch, b, loader.num_batches(), at));
        saved_step = step;
      }
      if (stop) break;
    }
    loader.Stop();  // after an early stop, no batch made ahead outlives the epoch
    if (options.on_epoch) {
      options.on_epoch(epoch, MeasuredEvaluate(model, forward_program, scope, test, options, &result));
    }
  }
  if (!options.save_dir.empty() && step != saved_step && step > at.step) {
    const LoopState end{step, options.epochs, 0, at.shuffle_seed, options.batch_size};
    result.last_checkpoint = Save(model, options, scope, end);
  }
  result.train_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  Summarise(&result, std::move(step_ms));
  result.test_accuracy = MeasuredEvaluate(model, forward_program, scope, test, options, &result);
  return result;
}

}  // namespace kiln
