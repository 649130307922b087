#include "tools/bench_compile.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/executor.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "launch_op/default_jit.h"
#include "tools/jit_setup.h"
#include "tools/model_flags.h"
#include "tools/pipeline_setup.h"

namespace kiln::tools {
namespace {

// One compile as the on_compile hook saw it.
struct CompileRecord {
  std::string key;
  std::string signature;
  int ops = 0;
  double ms = 0.0;
  double cpu_ms = 0.0;
  std::vector<jit::CompiledObject::Phase> phases;
};

}  // namespace

RandomBatch MakeRandomBatch(const Model& model, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Dims fdims = model.sample_dims;
  fdims.insert(fdims.begin(), rows);
  RandomBatch b{Tensor(DataType::kFP32, fdims), Tensor(DataType::kINT64, {rows, 1})};
  float* f = b.features.mutable_data<float>();
  std::uniform_real_distribution<float> uf(0.f, 1.f);
  std::uniform_int_distribution<int64_t> token(0, std::max<int64_t>(model.token_vocab - 1, 0));
  for (int64_t i = 0; i < b.features.numel(); ++i) {
    f[i] = model.token_vocab > 0 ? static_cast<float>(token(rng)) : uf(rng);
  }
  const proto::VarDesc* probs = FindVarDesc(model.train.blocks(0), model.probs);
  KILN_CHECK(probs != nullptr && probs->dims_size() == 2, "bench: probabilities var has no [batch, classes] dims");
  std::uniform_int_distribution<int64_t> ul(0, probs->dims(1) - 1);
  int64_t* l = b.labels.mutable_data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) l[i] = ul(rng);
  return b;
}

int BenchCompile() {
  if (!FLAGS_use_jit) ThrowInvalidArgument("kiln bench --bench_what compile: needs --use_jit");
  const int64_t batch = FLAGS_batch_size;
  if (batch < 1) ThrowInvalidArgument("--batch_size must be at least 1, got ", batch);
  CheckDumpPassesFlag();
  const Model model = BuildModelFromFlags(DatasetFromFlags());
  const RandomBatch data = MakeRandomBatch(model, batch, FLAGS_seed);

  // Every compile of the step, recorded by the hook (a hook already set,
  // --jit_dump_dir's, still runs).
  std::mutex mu;
  std::vector<CompileRecord> records;
  jit::JitRuntime& jit = jit::DefaultJit();
  const jit::JitOptions saved = jit.options();
  jit::JitOptions options = saved;
  options.on_compile = [&](const jit::CompiledObject& obj, const JitSubgraph& sg) {
    {
      std::lock_guard<std::mutex> lock(mu);
      records.push_back({obj.key, obj.signature.ToString(), sg.block.ops_size(), obj.compile_ms, obj.compile_cpu_ms,
                         obj.compile_phases});
    }
    if (saved.on_compile) saved.on_compile(obj, sg);
  };
  jit.Configure(options);

  Scope scope;
  Executor exec(ExecutorOptionsFromFlags());
  exec.RunProgram(model.startup, scope);
  const proto::ProgramDesc program = RunPipelineFromFlags(model.train, {model.features, model.labels, model.loss});
  auto plan = exec.Prepare(program, 0, {model.loss});
  FeedTensor(program.blocks(0), scope, model.features, data.features);
  FeedTensor(program.blocks(0), scope, model.labels, data.labels);
  const auto t0 = std::chrono::steady_clock::now();
  exec.Run(*plan, scope);
  const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  jit.Configure(saved);

  nlohmann::ordered_json j;
  j["what"] = "compile";
  j["model"] = FLAGS_model;
  j["batch"] = batch;
  j["threads"] = omp_get_max_threads();
  j["first_step_ms"] = step_ms;
  j["loss"] = scope.GetVar(model.loss)->Get().data<float>()[0];
  double total = 0.0, total_cpu = 0.0;
  int max_ops = 0;
  j["compiles"] = nlohmann::ordered_json::array();
  for (const CompileRecord& r : records) {
    nlohmann::ordered_json phases = nlohmann::ordered_json::object();
    for (const auto& p : r.phases) phases[p.name] = {{"wall_ms", p.wall_ms}, {"cpu_ms", p.cpu_ms}};
    j["compiles"].push_back({{"cluster", ClusterName(r.key)},
                             {"key", r.key},
                             {"ops", r.ops},
                             {"signature", r.signature},
                             {"compile_ms", r.ms},
                             {"compile_cpu_ms", r.cpu_ms},
                             {"phases", phases}});
    total += r.ms;
    total_cpu += r.cpu_ms;
    max_ops = std::max(max_ops, r.ops);
  }
  j["total_compile_ms"] = total;
  j["total_compile_cpu_ms"] = total_cpu;
  j["largest_cluster_ops"] = max_ops;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace kiln::tools
