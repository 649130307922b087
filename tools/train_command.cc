// kiln train: trains a model on a dataset with a progress bar, prints test
// accuracy and optionally writes metrics JSON.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/durable_io.h"
#include "framework/data/digits.h"
#include "framework/data/idx.h"
#include "framework/data/synthetic.h"
#include "framework/file_util.h"
#include "framework/program_io.h"
#include "framework/flags.h"
#include "framework/trainer.h"
#include "tools/commands.h"
#include "tools/jit_setup.h"
#include "tools/memory_setup.h"
#include "tools/pipeline_setup.h"
#include "compiler/jit_compiler.h"
#include "launch_op/jit_launch_op.h"
#include "tools/model_flags.h"

namespace kiln::tools {
namespace {

// Loads the dataset and shapes its features as the model's samples.
TrainTest LoadDataset(const std::string& dataset, const Model& model) {
  TrainTest data;
  if (dataset == "digits") {
    data = LoadDigits(FLAGS_data_dir.empty() ? DefaultDigitsPath() : FLAGS_data_dir + "/digits.csv.gz", FLAGS_seed);
  } else if (dataset == "fashion-mnist") {
    data = LoadFashionMnist(FLAGS_data_dir.empty() ? kDefaultFashionMnistDir : FLAGS_data_dir);
  } else {
    const int64_t n = FLAGS_synthetic_size;
    if (n < 10) ThrowInvalidArgument("--synthetic_size must be at least 10, got ", n);
    const Dataset all = MakeSyntheticSequences(n, FLAGS_seq_len, FLAGS_d_model, 10, FLAGS_seed);
    auto split = SplitDataset(all, 0.8);
    data.train = std::move(split.first);
    data.test = std::move(split.second);
  }
  for (Dataset* d : {&data.train, &data.test}) {
    Dims dims = model.sample_dims;
    dims.insert(dims.begin(), d->size());
    if (Numel(dims) != d->features.numel()) {
      ThrowInvalidArgument("dataset ", dataset, " has samples of ", DimsToString(d->features.dims()),
                           ", the model takes ", DimsToString(model.sample_dims));
    }
    d->features.Resize(dims);
  }
  return data;
}

void PrintProgress(const TrainProgress& p, bool tty) {
  const int64_t every = std::max<int64_t>(1, p.batches / 50);
  const bool last = p.batch + 1 == p.batches;
  if (!tty) {
    if (last) {
      std::fprintf(stderr, "epoch %d/%d  loss %.4f  %.0f samples/s\n", p.epoch + 1, p.epochs, p.loss,
                   p.samples_per_sec);
    }
    return;
  }
  if (p.batch % every != 0 && !last) return;
  const int width = 30;
  const int filled = static_cast<int>(width * (p.batch + 1) / std::max<int64_t>(1, p.batches));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\repoch %d/%d [%s] %3d%%  loss %.4f  %.0f samples/s", p.epoch + 1, p.epochs, bar.c_str(),
               static_cast<int>(100 * (p.batch + 1) / std::max<int64_t>(1, p.batches)), p.loss, p.samples_per_sec);
  if (last) std::fputc('\n', stderr);
}

// What `kiln export` and `kiln predict` need besides the programs.
std::string ModelJson(const Model& model) {
  nlohmann::ordered_json j;
  j["model"] = FLAGS_model;
  j["features"] = model.features;
  j["labels"] = model.labels;
  j["probs"] = model.probs;
  j["loss"] = model.loss;
  j["sample_dims"] = model.sample_dims;
  j["params"] = model.params;
  return j.dump(2) + "\n";
}

// What the JIT did in the run: compiles, fallbacks, shadow checks and the
// clusters a failed check denied.
nlohmann::ordered_json JitJson() {
  const jit::JitStats s = jit::JitCompiler::Instance().stats();
  nlohmann::ordered_json j;
  j["compiles"] = s.compiles;
  j["cache_hits"] = s.hits;
  j["evictions"] = s.evictions;
  j["launches"] = s.launch.launches;
  j["framework_fallbacks"] = s.launch.framework_fallbacks;
  j["denied_calls"] = s.denied_calls;
  j["shadow_checks"] = s.shadow_checks;
  j["shadow_denied"] = nlohmann::ordered_json::array();
  for (const jit::ShadowFailure& f : s.shadow_failures) {
    nlohmann::ordered_json d;
    d["cluster"] = ClusterName(f.key);
    d["key"] = f.key;
    d["op"] = f.op;
    d["var"] = f.var;
    d["shape"] = f.shape;
    d["max_abs_error"] = f.max_abs_error;
    d["max_rel_error"] = f.max_rel_error;
    d["mismatches"] = f.mismatches;
    d["numel"] = f.numel;
    d["step"] = f.step;
    d["launch"] = f.launch;
    j["shadow_denied"].push_back(std::move(d));
  }
  return j;
}

std::string MetricsJson(const std::string& dataset, const TrainResult& r, const MemoryFigures& mem) {
  nlohmann::ordered_json j;
  j["model"] = FLAGS_model;
  j["dataset"] = dataset;
  j["test_accuracy"] = r.test_accuracy;
  j["first_loss"] = r.first_loss;
  j["final_loss"] = r.final_loss;
  j["steps"] = r.steps;
  j["first_step"] = r.first_step;
  j["step_ms_median"] = r.step_ms_median;
  j["train_seconds"] = r.train_seconds;
  j["peak_tensor_bytes"] = mem.peak_tensor_bytes;
  j["allocated_bytes"] = mem.allocated_bytes;
  if (!r.last_checkpoint.empty()) j["last_checkpoint"] = r.last_checkpoint;
  if (FLAGS_use_jit) j["jit"] = JitJson();
  return j.dump(2) + "\n";
}

// --save_dir, --save_every_steps, --keep_checkpoints, --resume. A checkpoint
// also holds the programs and the model's feed and fetch names (model.json),
// so that `kiln export` needs nothing else.
void SetCheckpointOptions(const Model& model, TrainOptions* options) {
  if (FLAGS_save_every_steps < 0) ThrowInvalidArgument("--save_every_steps must be >= 0");
  if (FLAGS_keep_checkpoints < 0) ThrowInvalidArgument("--keep_checkpoints must be >= 0");
  if (FLAGS_save_every_steps > 0 && FLAGS_save_dir.empty()) {
    ThrowInvalidArgument("--save_every_steps needs --save_dir");
  }
  if (!FLAGS_save_dir.empty()) {  // an unusable directory fails before training
    MakeDirsOrThrow(FLAGS_save_dir);
    CheckWritableDir(FLAGS_save_dir, "--save_dir");
  }
  if (!FLAGS_resume.empty()) ResolveCheckpoint(FLAGS_resume);    // so does a missing checkpoint
  options->save_dir = FLAGS_save_dir;
  options->save_every_steps = FLAGS_save_every_steps;
  options->keep_checkpoints = FLAGS_keep_checkpoints;
  options->resume_from = FLAGS_resume;
  if (FLAGS_save_dir.empty()) return;
  options->checkpoint_files = {{"startup.pbtxt", ProgramToText(model.startup)},
                               {"train.pbtxt", ProgramToText(model.train)},
                               {"forward.pbtxt", ProgramToText(model.forward)},
                               {"model.json", ModelJson(model)}};
}

// The jit: lines of kiln train: compiles, launches, fallbacks, shadow checks.
void PrintJitSummary() {
  const jit::JitStats js = jit::JitCompiler::Instance().stats();
  const jit::LaunchStats ls = jit::GetLaunchStats();
  std::printf("jit: %lld compiles (%.1f ms), %lld cache hits, %lld evictions, %lld failed, %lld units fell back "
              "alone; %lld launches, %lld in-place updates donated, %lld copy-protected, %lld ran the framework "
              "ops (%lld of a denied cluster)\n",
              static_cast<long long>(js.compiles), js.compile_ms, static_cast<long long>(js.hits),
              static_cast<long long>(js.evictions), static_cast<long long>(js.failures),
              static_cast<long long>(js.unit_fallbacks),
              static_cast<long long>(ls.launches), static_cast<long long>(ls.donated),
              static_cast<long long>(ls.copy_protected), static_cast<long long>(ls.framework_fallbacks), static_cast<long long>(js.denied_calls));
  if (js.shadow_checks > 0 || !js.shadow_failures.empty()) {
    std::string denied;
    for (const jit::ShadowFailure& f : js.shadow_failures) denied += (denied.empty() ? "" : ", ") + ClusterName(f.key);
    std::printf("jit shadow checks: %lld, clusters denied: %s\n", static_cast<long long>(js.shadow_checks),
                denied.empty() ? "none" : denied.c_str());
  }
}

}  // namespace

int TrainCommand() {
  CheckDumpPassesFlag();
  if (!(std::isfinite(FLAGS_lr) && FLAGS_lr > 0)) {
    ThrowInvalidArgument("--lr must be a finite number greater than 0, got ", FLAGS_lr);
  }
  // Every output path is checked before any training, not after it.
  if (!FLAGS_metrics_out.empty()) CheckWritableFile(FLAGS_metrics_out, "--metrics_out");
  const std::string dataset = DatasetFromFlags();
  const Model model = BuildModelFromFlags(dataset);
  const TrainTest data = LoadDataset(dataset, model);
  if (FLAGS_epochs < 1) ThrowInvalidArgument("--epochs must be at least 1, got ", FLAGS_epochs);

  TrainOptions options;
  options.epochs = FLAGS_epochs;
  options.stop_on_nonfinite = FLAGS_stop_on_nonfinite;
  options.batch_size = FLAGS_batch_size;
  options.seed = FLAGS_seed;
  options.max_steps = FLAGS_max_steps;
  options.exec = ExecutorOptionsFromFlags();
  SetCheckpointOptions(model, &options);
  // Both programs go through the pass pipeline; the training program's reports
  // are kept, the evaluation program's --dump_passes files go to DIR/forward/.
  PipelineReports train_reports;
  options.program_transform = [&](const proto::ProgramDesc& program, const std::set<std::string>& keep) {
    const bool train = keep.count(model.loss) > 0;
    return RunPipelineFromFlags(program, keep, train ? &train_reports : nullptr, train ? "" : "forward");
  };
  // Memory is measured over the training steps: from here (the dataset is
  // loaded) to the last step, before the final evaluation.
  CachingAllocator& allocator = CachingAllocator::Global();
  allocator.ResetStats();
  const AllocatorStats baseline = allocator.stats();
  AllocatorStats train_stats = baseline;
  ResetPeakRecord();
  PeakRecord train_peak;
  const bool tty = ::isatty(STDERR_FILENO);
  options.before_step = [](int64_t step) { jit::JitCompiler::Instance().SetStep(step); };
  options.on_step = [tty, &allocator, &train_stats, &train_peak](const TrainProgress& p) {
    jit::JitCompiler::Instance().SetStep(0);  // evaluation runs between steps
    train_stats = allocator.stats();
    if (FLAGS_memory_report) train_peak = PeakRecordOfRuns();
    if (FLAGS_progress) PrintProgress(p, tty);
  };

  std::fprintf(stderr, "kiln train: %s on %s (%lld train / %lld test rows), %s lr %g, batch %d, %d epochs, %s kernels\n",
               FLAGS_model.c_str(), dataset.c_str(), static_cast<long long>(data.train.size()),
               static_cast<long long>(data.test.size()), FLAGS_optimizer.c_str(), FLAGS_lr, FLAGS_batch_size,
               FLAGS_epochs, FLAGS_use_onednn ? "oneDNN" : "reference");
  if (FLAGS_use_jit) std::fprintf(stderr, "kiln train: JIT on (%s launch mode)\n", FLAGS_jit_launch_mode.c_str());
  const TrainResult r = Train(model, data.train, data.test, options);
  std::printf("test accuracy: %.4f  final loss: %.4f  steps: %lld  median step: %.3f ms\n", r.test_accuracy,
              r.final_loss, static_cast<long long>(r.steps), r.step_ms_median);

  if (FLAGS_use_jit) PrintJitSummary();
  MemoryFigures mem = ComputeMemoryFigures(train_stats, baseline, train_reports.inplace, FLAGS_batch_size, r.steps);
  if (!train_reports.recompute.vars.empty()) {
    mem.recomputed = train_reports.recompute.ToString();
    for (const auto& v : train_reports.recompute.vars) {
      mem.recompute_bytes_per_step += static_cast<size_t>(v.bytes_per_sample * FLAGS_batch_size);
    }
  }
  if (FLAGS_memory_report) {
    std::printf("%s", MemoryReport(mem, allocator.caching()).c_str());
    std::printf("%s", PeakReport(train_peak, baseline.in_use_bytes).c_str());
  }
  MaybePrintJitExplain();
  if (!FLAGS_metrics_out.empty()) WriteFileAtomic(FLAGS_metrics_out, MetricsJson(dataset, r, mem));
  return 0;
}

}  // namespace kiln::tools
