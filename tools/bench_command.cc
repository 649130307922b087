// kiln bench: times training steps of a model on seeded random data, or the
// machine's limits (oneDNN f32 matmul GFLOP/s, copy bandwidth), or measures
// what shape churn leaves behind (tools/bench_churn.h), and prints one JSON
// line. tools/bench/bench_vs_pytorch.py runs it against PyTorch.
//
// FLOPs of a step are counted from the training program's ops at the bench's
// batch size: matmul 2*numel(Out)*K (batched matmuls included), matmul_grad
// 2*numel(Out)*K for each gradient it really writes (the data input's
// gradient is "@EMPTY@" in model programs, so it is not counted), conv2d
// 2*numel(Output)*(C_in/groups)*KH*KW and conv2d_grad the same per written
// gradient. Elementwise ops, reductions, softmax, layer_norm, pooling and the
// optimizer are not FLOPs here; the elements they write are reported apart as
// "other_elements" (one per output element of every other op).
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dnnl.hpp"
#include "framework/allocator.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tools/bench_churn.h"
#include "tools/bench_compile.h"
#include "tools/bench_attention.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/pipeline_setup.h"
#include "tools/model_flags.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Timing {
  double median = 0, mean = 0, min = 0;
};

Timing Summarise(std::vector<double> ms) {
  Timing t;
  if (ms.empty()) return t;
  double sum = 0;
  for (double v : ms) sum += v;
  t.mean = sum / static_cast<double>(ms.size());
  std::sort(ms.begin(), ms.end());
  t.min = ms.front();
  const size_t n = ms.size();
  t.median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return t;
}

// Peak resident set of this process in MiB (Linux reports ru_maxrss in KiB).
double PeakRssMib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void CheckSteps() {
  if (FLAGS_bench_steps < 1) ThrowInvalidArgument("--bench_steps must be at least 1, got ", FLAGS_bench_steps);
  if (FLAGS_bench_warmup < 0) ThrowInvalidArgument("--bench_warmup must be at least 0, got ", FLAGS_bench_warmup);
}

bool BoolAttr(const proto::OpDesc& op, std::string_view name, bool fallback) {
  const proto::AttrDesc* a = FindAttr(op, name);
  return a == nullptr ? fallback : a->b();
}

int64_t IntAttr(const proto::OpDesc& op, std::string_view name, int64_t fallback) {
  const proto::AttrDesc* a = FindAttr(op, name);
  return a == nullptr ? fallback : a->i();
}

bool Writes(const proto::OpDesc& op, std::string_view slot) {
  const auto args = OutputArgs(op, slot);
  return !args.empty() && args[0] != kEmptyVarName;
}

struct FlopCount {
  double flops = 0;           // matmul and convolution multiply-adds, x2
  double other_elements = 0;  // output elements of every other op
};

// `train` with every non-persistable var re-inferred from features/labels of
// `batch` rows, so each op's dims are concrete; then the count above.
FlopCount CountFlops(const Model& model, int64_t batch) {
  proto::BlockDesc block = model.train.blocks(0);
  proto::BlockDesc concrete = block;
  concrete.clear_vars();
  for (const auto& v : block.vars()) {
    if (v.name() == model.features || v.name() == model.labels) {
      proto::VarDesc* c = concrete.add_vars();
      *c = v;
      if (c->dims_size() > 0) c->set_dims(0, batch);
    } else if (v.persistable()) {
      *concrete.add_vars() = v;
    }
  }
  BlockVarIndex index(&concrete);
  for (int i = 0; i < concrete.ops_size(); ++i) {
    InferShapeAtBuild(&concrete, i, /*declare_outputs=*/true, OpRegistry::Global(), &index);
  }

  auto dims_of = [&](const std::string& name) {
    const proto::VarDesc* v = FindVarDesc(concrete, name);
    KILN_CHECK(v != nullptr, "bench: var '", name, "' has no dims after shape inference");
    return VarDims(*v);
  };
  FlopCount count;
  for (const auto& op : concrete.ops()) {
    const std::string& type = op.type();
    if (type == "matmul" || type == "matmul_grad") {
      const Dims x = dims_of(InputArgs(op, "X")[0]);
      const bool tx = BoolAttr(op, "transpose_X", false);
      const int64_t k = tx ? x[x.size() - 2] : x.back();
      if (type == "matmul") {
        count.flops += 2.0 * static_cast<double>(Numel(dims_of(OutputArgs(op, "Out")[0]))) * k;
      } else {
        const double one = 2.0 * static_cast<double>(Numel(dims_of(InputArgs(op, "Out@GRAD")[0]))) * k;
        count.flops += one * (Writes(op, "X@GRAD") + Writes(op, "Y@GRAD"));
      }
    } else if (type == "conv2d" || type == "conv2d_grad") {
      const Dims in = dims_of(InputArgs(op, "Input")[0]);
      const Dims filter = dims_of(InputArgs(op, "Filter")[0]);
      const int64_t groups = IntAttr(op, "groups", 1);
      const double per_out = 2.0 * static_cast<double>(in[1] / groups * filter[2] * filter[3]);
      if (type == "conv2d") {
        count.flops += per_out * static_cast<double>(Numel(dims_of(OutputArgs(op, "Output")[0])));
      } else {
        const double one = per_out * static_cast<double>(Numel(dims_of(InputArgs(op, "Output@GRAD")[0])));
        count.flops += one * (Writes(op, "Input@GRAD") + Writes(op, "Filter@GRAD"));
      }
    } else {
      for (const auto& slot : op.outputs()) {
        for (const auto& arg : slot.args()) {
          if (arg != kEmptyVarName) count.other_elements += static_cast<double>(Numel(dims_of(arg)));
        }
      }
    }
  }
  return count;
}

std::string BenchDataset() {
  if (!FLAGS_dataset.empty()) return FLAGS_dataset;
  return SyntheticByDefault(FLAGS_model) ? "synthetic" : "fashion-mnist";
}

int BenchModel() {
  CheckSteps();
  CheckDumpPassesFlag();
  const int64_t batch = FLAGS_batch_size;
  if (batch < 1) ThrowInvalidArgument("--batch_size must be at least 1, got ", batch);
  const Model model = BuildModelFromFlags(BenchDataset());

  const RandomBatch data = MakeRandomBatch(model, batch, FLAGS_seed);
  const Tensor& features = data.features;
  const Tensor& labels = data.labels;

  const FlopCount flops = CountFlops(model, batch);
  int64_t params = 0;
  for (const std::string& name : model.params) {
    const proto::VarDesc* v = FindVarDesc(model.train.blocks(0), name);
    KILN_CHECK(v != nullptr, "bench: parameter '", name, "' is not declared");
    params += Numel(VarDims(*v));
  }

  Scope scope;
  Executor exec(ExecutorOptionsFromFlags());
  exec.RunProgram(model.startup, scope);
  const proto::ProgramDesc program = RunPipelineFromFlags(model.train, {model.features, model.labels, model.loss});
  auto plan = exec.Prepare(program, 0, {model.loss});

  // Feeding copies the batch into the scope; it is done before each step and
  // not timed (PyTorch's side reuses its input tensors). Peak tensor bytes
  // are counted over the steps above what the parameters and startup hold.
  CachingAllocator& allocator = CachingAllocator::Global();
  allocator.ResetStats();
  const size_t baseline = allocator.stats().in_use_bytes;
  std::vector<double> ms;
  float loss = 0.f;
  const int total = FLAGS_bench_warmup + FLAGS_bench_steps;
  ProgressBar bar("kiln bench", total, FLAGS_progress, /*delay_s=*/1.0);
  for (int s = 0; s < total; ++s) {
    bar.Update(s);
    FeedTensor(program.blocks(0), scope, model.features, features);
    FeedTensor(program.blocks(0), scope, model.labels, labels);
    const auto t0 = Clock::now();
    exec.Run(*plan, scope);
    loss = scope.GetVar(model.loss)->Get().data<float>()[0];
    const double t = MsSince(t0);
    if (s >= FLAGS_bench_warmup) ms.push_back(t);
  }
  bar.Update(total);
  bar.Finish();
  const size_t peak = allocator.stats().peak_in_use_bytes;
  const size_t peak_tensor_bytes = peak > baseline ? peak - baseline : 0;
  const Timing t = Summarise(ms);
  const double gflops = t.median > 0 ? flops.flops / (t.median * 1e6) : 0.0;
  std::printf(
      "{\"what\": \"model\", \"model\": \"%s\", \"batch\": %lld, \"use_jit\": %s, \"threads\": %d, "
      "\"warmup\": %d, \"steps\": %d, \"median_ms\": %.4f, \"mean_ms\": %.4f, \"min_ms\": %.4f, "
      "\"flops_per_step\": %.0f, \"other_elements_per_step\": %.0f, \"gflops\": %.3f, \"final_loss\": %.6f, "
      "\"params\": %lld, \"peak_tensor_bytes\": %zu, \"peak_rss_mib\": %.1f}\n",
      FLAGS_model.c_str(), static_cast<long long>(batch), FLAGS_use_jit ? "true" : "false", omp_get_max_threads(),
      FLAGS_bench_warmup, FLAGS_bench_steps, t.median, t.mean, t.min, flops.flops, flops.other_elements, gflops,
      loss, static_cast<long long>(params), peak_tensor_bytes, PeakRssMib());
  return 0;
}

// oneDNN f32 matmul of [n,n] x [n,n], plain row-major layouts (what kiln's
// matmul kernels hand oneDNN).
int BenchMatmul() {
  CheckSteps();
  const int64_t n = FLAGS_bench_matmul_size;
  if (n < 1) ThrowInvalidArgument("--bench_matmul_size must be at least 1, got ", n);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc md({n, n}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
  dnnl::matmul prim(pd);
  dnnl::memory a(md, engine), b(md, engine), c(md, engine);
  std::mt19937 rng(static_cast<uint32_t>(FLAGS_seed));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (dnnl::memory* m : {&a, &b, &c}) {
    float* p = static_cast<float*>(m->get_data_handle());
    for (int64_t i = 0; i < n * n; ++i) p[i] = u(rng);
  }
  std::vector<double> ms;
  ProgressBar bar("kiln bench", FLAGS_bench_warmup + FLAGS_bench_steps, FLAGS_progress, /*delay_s=*/1.0);
  for (int s = 0; s < FLAGS_bench_warmup + FLAGS_bench_steps; ++s) {
    bar.Update(s);
    const auto t0 = Clock::now();
    prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
    const double t = MsSince(t0);
    if (s >= FLAGS_bench_warmup) ms.push_back(t);
  }
  const Timing t = Summarise(ms);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  std::printf(
      "{\"what\": \"matmul\", \"size\": %lld, \"threads\": %d, \"impl\": \"%s\", \"steps\": %d, \"median_ms\": %.4f, "
      "\"min_ms\": %.4f, \"gflops\": %.3f, \"gflops_best\": %.3f, \"peak_rss_mib\": %.1f}\n",
      static_cast<long long>(n), omp_get_max_threads(), pd.impl_info_str(), FLAGS_bench_steps, t.median, t.min,
      flops / (t.median * 1e6), flops / (t.min * 1e6), PeakRssMib());
  return 0;
}

// memcpy of --bench_copy_mib MiB, split over the OpenMP threads. GB/s counts
// the bytes copied (each is read once and written once: memory traffic is
// twice that, plus write-allocate reads where the CPU does them).
int BenchCopy() {
  CheckSteps();
  const int64_t mib = FLAGS_bench_copy_mib;
  if (mib < 1) ThrowInvalidArgument("--bench_copy_mib must be at least 1, got ", mib);
  const size_t bytes = static_cast<size_t>(mib) << 20;
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  const int threads = omp_get_max_threads();
  const size_t chunk = (bytes / static_cast<size_t>(threads) + 63) & ~size_t{63};
  // First touch from the threads that copy.
#pragma omp parallel num_threads(threads)
  {
    const size_t begin = std::min(bytes, chunk * static_cast<size_t>(omp_get_thread_num()));
    const size_t end = std::min(bytes, begin + chunk);
    std::memset(src.get() + begin, 1, end - begin);
    std::memset(dst.get() + begin, 0, end - begin);
  }
  std::vector<double> ms;
  for (int s = 0; s < FLAGS_bench_warmup + FLAGS_bench_steps; ++s) {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      const size_t begin = std::min(bytes, chunk * static_cast<size_t>(omp_get_thread_num()));
      const size_t end = std::min(bytes, begin + chunk);
      std::memcpy(dst.get() + begin, src.get() + begin, end - begin);
    }
    const double t = MsSince(t0);
    if (s >= FLAGS_bench_warmup) ms.push_back(t);
  }
  if (dst[bytes - 1] != 1) ThrowInvalidArgument("bench copy: destination does not hold the source");
  const Timing t = Summarise(ms);
  std::printf(
      "{\"what\": \"copy\", \"mib\": %lld, \"threads\": %d, \"steps\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f, "
      "\"copy_gbs\": %.3f, \"copy_gbs_best\": %.3f, \"peak_rss_mib\": %.1f}\n",
      static_cast<long long>(mib), threads, FLAGS_bench_steps, t.median, t.min,
      static_cast<double>(bytes) / (t.median * 1e6), static_cast<double>(bytes) / (t.min * 1e6), PeakRssMib());
  return 0;
}

}  // namespace

int BenchCommand() {
  if (FLAGS_bench_what == "model") return BenchModel();
  if (FLAGS_bench_what == "matmul") return BenchMatmul();
  if (FLAGS_bench_what == "copy") return BenchCopy();
  if (FLAGS_bench_what == "churn") return BenchChurn();
  if (FLAGS_bench_what == "attention") return BenchAttention();
  if (FLAGS_bench_what == "compile") return BenchCompile();
  ThrowInvalidArgument("unknown --bench_what '", FLAGS_bench_what,
                       "': expected model, matmul, copy, churn, attention or compile");
}

}  // namespace kiln::tools
