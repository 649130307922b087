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
#include "framework/data/synthetic_tasks.h"
#include "framework/file_util.h"
#include "framework/program_io.h"
#include "framework/flags.h"
#include "framework/trainer.h"
#include "framework/trace.h"
#include "tools/commands.h"
#include "tools/data_parallel_setup.h"
#include "tools/progress.h"
#include "tools/jit_setup.h"
#include "tools/memory_setup.h"
#include "tools/pipeline_setup.h"
#include "launch_op/default_jit.h"
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
    const Dims& sample = model.sample_dims;
    Dataset all;
    if (model.token_vocab > 0) {  // gpt: seq_len + 1 tokens a row
      all = MakeSyntheticTokens(n, sample[0], model.token_vocab, FLAGS_seed);
    } else if (sample.size() == 3) {  // resnet: images
      all = MakeSyntheticImages(n, sample[0], sample[1], sample[2], 10, FLAGS_seed);
    } else {
      // The rows are made a batch at a time: at --seq_len 1024 --d_model 256
      // the default 2048 sequences would hold 2 GiB.
      all = MakeSyntheticSequences(n, FLAGS_seq_len, FLAGS_d_model, 10, FLAGS_seed, kSyntheticTeacherSeed,
                                   /*hold_features=*/false);
    }
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

// Piped: one plain line per epoch. On a terminal: a bar over the whole run
// with the step, the steps in all and an ETA, one line per epoch.
class TrainProgressPrinter {
 public:
  explicit TrainProgressPrinter(int64_t max_steps) : max_steps_(max_steps), tty_(::isatty(STDERR_FILENO)) {}
  void operator()(const TrainProgress& p) {
    const bool last = p.batch + 1 == p.batches;
    if (!tty_) {
      if (last) {
        std::fprintf(stderr, "epoch %d/%d  loss %.4f  %.0f samples/s\n", p.epoch + 1, p.epochs, p.loss,
                     p.samples_per_sec);
      }
      return;
    }
    if (!bar_) {
      int64_t total = p.batches * p.epochs;
      if (max_steps_ > 0) total = std::min(total, max_steps_);
      bar_ = std::make_unique<ProgressBar>("", total, true, 0.0, p.step - 1);
    }
    bar_->set_label("epoch " + std::to_string(p.epoch + 1) + "/" + std::to_string(p.epochs));
    char detail[64];
    std::snprintf(detail, sizeof detail, "loss %.4f  %.0f samples/s", p.loss, p.samples_per_sec);
    bar_->Update(p.step, detail);
    if (last) bar_->Finish();
  }

 private:
  int64_t max_steps_;
  bool tty_;
  std::shared_ptr<ProgressBar> bar_;
};

// --model's name, or "program" for kiln train --from DIR.
std::string ModelName() { return ProgramModelFlagsSet() ? "program" : FLAGS_model; }

// What `kiln export` and `kiln predict` need besides the programs.
std::string ModelJson(const Model& model) {
  nlohmann::ordered_json j;
  j["model"] = ModelName();
  if (ProgramModelFlagsSet()) j["from"] = FLAGS_from;
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
  const jit::JitStats s = jit::DefaultJit().stats();
  nlohmann::ordered_json j;
  j["compiles"] = s.compiles;
  j["dynamic_compiles"] = s.dynamic_compiles;
  j["instances"] = s.instances;
  j["guard_failures"] = s.guard_failures;
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
  j["model"] = ModelName();
  j["dataset"] = dataset;
  j["test_accuracy"] = r.test_accuracy;
  j["first_loss"] = r.first_loss;
  j["final_loss"] = r.final_loss;
  j["steps"] = r.steps;
  j["first_step"] = r.first_step;
  j["step_ms_median"] = r.step_ms_median;
  j["train_seconds"] = r.train_seconds;
  j["peak_tensor_bytes"] = mem.peak_tensor_bytes;
  j["eval_peak_tensor_bytes"] = r.eval_peak_tensor_bytes;
  j["allocated_bytes"] = mem.allocated_bytes;
  if (!r.last_checkpoint.empty()) j["last_checkpoint"] = r.last_checkpoint;
  if (FLAGS_use_jit) j["jit"] = JitJson();
  return j.dump(2) + "\n";
}

// --save_dir, --save_every_steps, --keep_checkpoints, --resume. A checkpoint
// also holds the programs and the model's feed and fetch names (model.json),
// so that `kiln export` needs nothing else. Only a process that `writes`
// (rank 0 of a data-parallel job) saves; every one resumes.
void SetCheckpointOptions(const Model& model, bool writes, TrainOptions* options) {
  if (FLAGS_save_every_steps < 0) ThrowInvalidArgument("--save_every_steps must be >= 0");
  if (FLAGS_keep_checkpoints < 0) ThrowInvalidArgument("--keep_checkpoints must be >= 0");
  if (FLAGS_save_every_steps > 0 && FLAGS_save_dir.empty()) {
    ThrowInvalidArgument("--save_every_steps needs --save_dir");
  }
  if (!FLAGS_resume.empty()) ResolveCheckpoint(FLAGS_resume);  // a missing checkpoint fails before training
  options->resume_from = FLAGS_resume;
  if (!writes || FLAGS_save_dir.empty()) return;
  MakeDirsOrThrow(FLAGS_save_dir);  // so does an unusable directory
  CheckWritableDir(FLAGS_save_dir, "--save_dir");
  options->save_dir = FLAGS_save_dir;
  options->save_every_steps = FLAGS_save_every_steps;
  options->keep_checkpoints = FLAGS_keep_checkpoints;
  options->checkpoint_files = {{"train.pbtxt", ProgramToText(model.train)},
                               {"forward.pbtxt", ProgramToText(model.forward)},
                               {"model.json", ModelJson(model)}};
  // An imported program's startup holds every imported value as text (six
  // times the .npy bytes, each save); its start is --from DIR instead.
  if (!ProgramModelFlagsSet()) options->checkpoint_files["startup.pbtxt"] = ProgramToText(model.startup);
}

TrainOptions OptionsFromFlags() {
  if (FLAGS_epochs < 1) ThrowInvalidArgument("--epochs must be at least 1, got ", FLAGS_epochs);
  if (FLAGS_eval_batch_size < 0) ThrowInvalidArgument("--eval_batch_size must be >= 0, got ", FLAGS_eval_batch_size);
  if (FLAGS_num_workers < 0) ThrowInvalidArgument("--num_workers must be >= 0, got ", FLAGS_num_workers);
  TrainOptions options;
  options.epochs = FLAGS_epochs;
  options.stop_on_nonfinite = FLAGS_stop_on_nonfinite;
  options.batch_size = FLAGS_batch_size;
  options.eval_batch_size = FLAGS_eval_batch_size;
  options.num_workers = FLAGS_num_workers;
  options.seed = FLAGS_seed;
  options.max_steps = FLAGS_max_steps;
  options.exec = ExecutorOptionsFromFlags();
  return options;
}

// --history: one JSON line per step and per evaluated epoch, written whole
// (atomically) at the end.
class History {
 public:
  void Step(const TrainProgress& p) {
    nlohmann::ordered_json j;
    j["step"] = p.step;
    j["epoch"] = p.epoch + 1;
    j["loss"] = p.loss;
    j["samples_per_s"] = p.samples_per_sec;
    j["step_ms"] = p.step_ms;
    text_ += j.dump() + "\n";
  }
  void Epoch(int epoch, double accuracy) {
    nlohmann::ordered_json j;
    j["epoch"] = epoch + 1;
    j["test_accuracy"] = accuracy;
    text_ += j.dump() + "\n";
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// The jit: lines of kiln train: compiles, launches, fallbacks, shadow checks.
void PrintJitSummary() {
  const jit::JitStats js = jit::DefaultJit().stats();
  const jit::LaunchStats& ls = js.launch;
  std::printf("jit: %lld compiles (%.1f ms), %lld cache hits, %lld evictions, %lld failed, %lld units fell back "
              "alone; %lld launches, %lld in-place updates donated, %lld copy-protected, %lld ran the framework "
              "ops (%lld of a denied cluster)\n",
              static_cast<long long>(js.compiles), js.compile_ms, static_cast<long long>(js.hits),
              static_cast<long long>(js.evictions), static_cast<long long>(js.failures),
              static_cast<long long>(js.unit_fallbacks), static_cast<long long>(ls.launches),
              static_cast<long long>(ls.donated), static_cast<long long>(ls.copy_protected),
              static_cast<long long>(ls.framework_fallbacks), static_cast<long long>(js.denied_calls));
  if (js.dynamic_compiles > 0 || js.dynamic_failures > 0) {
    std::printf("jit dynamic shapes: %lld compiles for every value of their symbolic dims, %lld instances of them "
                "for new values (%.1f ms), %lld dynamic compiles not made, %lld new values compiled on their own\n",
                static_cast<long long>(js.dynamic_compiles), static_cast<long long>(js.instances), js.instance_ms,
                static_cast<long long>(js.dynamic_failures), static_cast<long long>(js.guard_failures));
  }
  if (js.shadow_checks > 0 || !js.shadow_failures.empty()) {
    std::string denied;
    for (const jit::ShadowFailure& f : js.shadow_failures) denied += (denied.empty() ? "" : ", ") + ClusterName(f.key);
    std::printf("jit shadow checks: %lld, clusters denied: %s\n", static_cast<long long>(js.shadow_checks),
                denied.empty() ? "none" : denied.c_str());
  }
}

// --trace: record steps trace_warmup + 1 .. trace_warmup + trace_steps.
void TraceWindow(int64_t step_done) {
  if (step_done == FLAGS_trace_warmup) Tracer::Global().Start();
  if (step_done == FLAGS_trace_warmup + FLAGS_trace_steps) Tracer::Global().Stop();
}

void PrintStart(const std::string& dataset, const TrainTest& data, const DataParallelSetup& dp) {
  const std::string model = ProgramModelFlagsSet() ? "the program of " + FLAGS_from : FLAGS_model;
  std::fprintf(stderr, "kiln train: %s on %s (%lld train / %lld test rows), %s lr %g, batch %d, %d epochs, %s kernels\n",
               model.c_str(), dataset.c_str(), static_cast<long long>(data.train.size()),
               static_cast<long long>(data.test.size()), FLAGS_optimizer.c_str(), FLAGS_lr, FLAGS_batch_size,
               FLAGS_epochs, FLAGS_use_onednn ? "oneDNN" : "reference");
  if (FLAGS_use_jit) std::fprintf(stderr, "kiln train: JIT on (%s launch mode)\n", FLAGS_jit_launch_mode.c_str());
  if (dp.on) {
    std::fprintf(stderr, "kiln train: data parallel over %d ranks, %d rows each per step, %zu gradient buckets\n",
                 dp.size, FLAGS_batch_size / dp.size, dp.report.buckets.size());
  }
}

}  // namespace

int TrainCommand() {
  CheckDumpPassesFlag();
  if (!(std::isfinite(FLAGS_lr) && FLAGS_lr > 0)) {
    ThrowInvalidArgument("--lr must be a finite number greater than 0, got ", FLAGS_lr);
  }
  const std::string dataset = DatasetFromFlags();
  Model model = ProgramModelFlagsSet() ? BuildProgramModelFromFlags(dataset) : BuildModelFromFlags(dataset);
  TrainOptions options = OptionsFromFlags();
  const DataParallelSetup dp = SetUpDataParallel(&model, &options);
  // Rank 0 alone writes files and prints; every output path is checked
  // before any training, not after it.
  const bool lead = dp.rank == 0;
  if (lead && !FLAGS_metrics_out.empty()) CheckWritableFile(FLAGS_metrics_out, "--metrics_out");
  if (lead && !FLAGS_history.empty()) CheckWritableFile(FLAGS_history, "--history");
  if (lead && !FLAGS_trace.empty()) CheckWritableFile(FLAGS_trace, "--trace");
  if (FLAGS_trace_steps < 1 || FLAGS_trace_warmup < 0) {
    ThrowInvalidArgument("--trace_steps must be >= 1 and --trace_warmup >= 0, got ", FLAGS_trace_steps, " and ",
                         FLAGS_trace_warmup);
  }
  SetCheckpointOptions(model, lead, &options);
  const TrainTest data = LoadDataset(dataset, model);
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
  PeakTracker peak_tracker;  // --memory_report: where the training steps' executors peaked
  if (FLAGS_memory_report) options.exec.peak = &peak_tracker;
  PeakRecord train_peak;
  TrainProgressPrinter progress(FLAGS_max_steps);
  History history;
  const bool keep_history = lead && !FLAGS_history.empty();
  const bool tracing = lead && !FLAGS_trace.empty();
  options.before_step = [](int64_t step) { jit::DefaultJit().launch().SetStep(step); };
  options.on_step = [&, lead](const TrainProgress& p) {
    jit::DefaultJit().launch().SetStep(0);  // evaluation runs between steps
    train_stats = allocator.stats();
    if (FLAGS_memory_report) train_peak = peak_tracker.Get();
    if (FLAGS_progress && lead) progress(p);
    if (keep_history) history.Step(p);
    if (tracing) TraceWindow(p.step);
  };
  if (tracing && FLAGS_trace_warmup == 0) Tracer::Global().Start();
  if (keep_history) options.on_epoch = [&history](int epoch, double accuracy) { history.Epoch(epoch, accuracy); };

  if (lead) PrintStart(dataset, data, dp);
  const TrainResult r = Train(model, data.train, data.test, options);
  if (!lead) return 0;
  std::printf("test accuracy: %.4f  final loss: %.4f  steps: %lld  median step: %.3f ms\n", r.test_accuracy,
              r.final_loss, static_cast<long long>(r.steps), r.step_ms_median);
  if (FLAGS_use_jit) PrintJitSummary();
  if (dp.on) PrintDataParallelLine(r.steps);
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
  if (keep_history) WriteFileAtomic(FLAGS_history, history.text());
  if (tracing) {
    Tracer::Global().Stop();  // a run shorter than the window keeps what it recorded
    WriteFileAtomic(FLAGS_trace, Tracer::Global().ToJson());
  }
  return 0;
}

}  // namespace kiln::tools
