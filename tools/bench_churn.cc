#include "tools/bench_churn.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "framework/allocator.h"
#include "framework/flags.h"
#include "framework/onednn/primitive_cache.h"
#include "launch_op/default_jit.h"
#include "tools/model_flags.h"
#include "tools/pipeline_setup.h"

namespace kiln::tools {
namespace {

ChurnPoint Measure(int64_t sizes_seen, const jit::JitRuntime& jit) {
  ChurnPoint p;
  p.sizes_seen = sizes_seen;
  p.rss_mib = CurrentRssMib();
  const struct mallinfo2 heap = mallinfo2();
  p.heap_in_use_mib = static_cast<double>(heap.uordblks + heap.hblkhd) / (1 << 20);
  p.jit_cache_entries = jit.cache().cache_size();
  p.jit_ids_tracked = jit.cache().ids_tracked();
  p.executor_programs = jit.executor_programs_alive();
  p.primitive_cache_entries = onednn::PrimitiveCache::Global().stats().size;
  p.allocator_held_bytes = CachingAllocator::Global().stats().held_bytes;
  const jit::JitStats s = jit.stats();
  p.jit_compiles = s.compiles;
  p.jit_evictions = s.evictions;
  p.framework_fallbacks = s.launch.framework_fallbacks;
  return p;
}

// Seeded random rows for the largest batch: features uniform in [0, 1),
// labels uniform over the classes. Each step feeds its first rows.
struct DataPool {
  Tensor features, labels;
};

DataPool MakePool(const Model& model, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Dims fdims = model.sample_dims;
  fdims.insert(fdims.begin(), rows);
  DataPool pool{Tensor(DataType::kFP32, fdims), Tensor(DataType::kINT64, {rows, 1})};
  std::uniform_real_distribution<float> uf(0.f, 1.f);
  float* f = pool.features.mutable_data<float>();
  for (int64_t i = 0; i < pool.features.numel(); ++i) f[i] = uf(rng);
  const proto::VarDesc* probs = FindVarDesc(model.train.blocks(0), model.probs);
  KILN_CHECK(probs != nullptr && probs->dims_size() == 2, "churn: probabilities var has no [batch, classes] dims");
  std::uniform_int_distribution<int64_t> ul(0, probs->dims(1) - 1);
  int64_t* l = pool.labels.mutable_data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) l[i] = ul(rng);
  return pool;
}

// The first `rows` rows of `t`, without a copy.
Tensor Rows(const Tensor& t, int64_t rows) {
  Dims dims = t.dims();
  dims[0] = rows;
  Tensor view;
  view.ShareExternalData(const_cast<void*>(t.raw_data()), t.dtype(), dims);
  return view;
}

}  // namespace

double CurrentRssMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    double kib = 0;
    in >> kib;
    return kib / 1024.0;
  }
  return 0.0;
}

std::vector<ChurnPoint> RunChurn(const Model& model, const proto::ProgramDesc& program, const ChurnOptions& options,
                                 const ExecutorOptions& exec_options, const jit::JitRuntime& jit,
                                 const OpRegistry& registry) {
  if (options.sizes < 1) ThrowInvalidArgument("churn: at least one batch size, got ", options.sizes);
  std::vector<int64_t> order(static_cast<size_t>(options.sizes));
  std::iota(order.begin(), order.end(), 1);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(options.seed));
  const DataPool pool = MakePool(model, options.sizes, options.seed + 1);

  Scope scope;
  Executor exec(exec_options, registry);
  exec.RunProgram(model.startup, scope);
  auto plan = exec.Prepare(program, 0, {model.loss});
  std::vector<ChurnPoint> points;
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t batch = order[i];
    FeedTensor(program.blocks(0), scope, model.features, Rows(pool.features, batch), /*share=*/true);
    FeedTensor(program.blocks(0), scope, model.labels, Rows(pool.labels, batch), /*share=*/true);
    exec.Run(*plan, scope);
    if (options.on_step) options.on_step(batch, scope.GetVar(model.loss)->Get().data<float>()[0]);
    const int64_t seen = static_cast<int64_t>(i) + 1;
    const auto& cp = options.checkpoints;
    if (seen == options.sizes || std::find(cp.begin(), cp.end(), seen) != cp.end()) points.push_back(Measure(seen, jit));
  }
  return points;
}

int BenchChurn() {
  const int64_t sizes = FLAGS_bench_churn_sizes;
  if (sizes < 1) ThrowInvalidArgument("--bench_churn_sizes must be at least 1, got ", sizes);
  const Model model = BuildModelFromFlags(DatasetFromFlags());
  const proto::ProgramDesc program = RunPipelineFromFlags(model.train, {model.features, model.labels, model.loss});
  ChurnOptions options;
  options.sizes = sizes;
  options.seed = FLAGS_seed;
  for (int64_t at = 1000; at < sizes; at += at < 5000 ? 4000 : 5000) options.checkpoints.push_back(at);
  const double rss_before = CurrentRssMib();
  const std::vector<ChurnPoint> points = RunChurn(model, program, options, ExecutorOptionsFromFlags(), jit::DefaultJit(), OpRegistry::Global());
  nlohmann::ordered_json j;
  j["what"] = "churn";
  j["model"] = FLAGS_model;
  j["use_jit"] = FLAGS_use_jit;
  j["launch_mode"] = FLAGS_jit_launch_mode;
  j["jit_cache_capacity"] = FLAGS_jit_cache_capacity;
  j["jit_recompile_limit"] = FLAGS_jit_recompile_limit;
  j["primitive_cache_capacity"] = onednn::PrimitiveCache::Global().stats().capacity;
  j["rss_mib_before"] = rss_before;
  for (const ChurnPoint& p : points) {
    j["points"].push_back({{"sizes_seen", p.sizes_seen},
                           {"rss_mib", p.rss_mib},
                           {"heap_in_use_mib", p.heap_in_use_mib},
                           {"jit_cache_entries", p.jit_cache_entries},
                           {"jit_ids_tracked", p.jit_ids_tracked},
                           {"executor_programs", p.executor_programs},
                           {"primitive_cache_entries", p.primitive_cache_entries},
                           {"allocator_held_mib", static_cast<double>(p.allocator_held_bytes) / (1 << 20)},
                           {"jit_compiles", p.jit_compiles},
                           {"jit_evictions", p.jit_evictions},
                           {"framework_fallbacks", p.framework_fallbacks}});
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace kiln::tools
