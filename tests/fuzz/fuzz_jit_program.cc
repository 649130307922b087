// Differential fuzzer of the JIT: a random valid program (random_program.h)
// runs two steps with the JIT off and with it on (build_jit_pass, then the
// compiled clusters through jit_launch on a JIT of the input's own, in the
// launch mode and minimum cluster size the input picks, with or without
// inplace_pass); every fetched var (outputs, loss,
// gradients, updated parameters and running statistics) must agree within
// float tolerance. A program the framework runs but the JIT refuses, a
// mismatch, or a crash is a finding.
//
// KILN_FUZZ_STATS=1 prints at exit how many ops of each family were built,
// how many programs were compared, how many clusters they had and how many
// generated ops shape inference refused.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>

#include "framework/executor.h"
#include "framework/program_io.h"
#include "passes/pipeline.h"
#include "tests/fuzz/random_program.h"
#include "tests/test_jit.h"

namespace kiln::fuzz {
namespace {

struct Stats {
  std::map<std::string, int64_t> family_ops;
  int64_t programs = 0, compared = 0, with_backward = 0, refused_off = 0, rejected_ops = 0;
  int64_t launches = 0, clusters = 0, compiles = 0, compile_failures = 0, fallbacks = 0;
  std::map<std::string, int64_t> refusals;  // first words of the errors

  ~Stats() {
    if (std::getenv("KILN_FUZZ_STATS") == nullptr) return;
    std::cerr << "fuzz_jit_program: " << programs << " programs, " << compared << " compared (" << with_backward
              << " with backward), " << refused_off << " refused by the framework at run time, " << rejected_ops
              << " generated ops refused by shape inference; " << clusters << " clusters, " << compiles
              << " compiles, " << compile_failures << " compile failures, " << fallbacks
              << " framework fallbacks, " << launches << " launches\n  ops by family:";
    for (const auto& [f, n] : family_ops) std::cerr << " " << f << "=" << n;
    std::cerr << "\n";
    for (const auto& [what, n] : refusals) std::cerr << "  refused " << n << "x: " << what << "\n";
  }
};
Stats& GetStats() {
  static Stats s;
  return s;
}

using Fetched = std::vector<Tensor>;

// Two steps of `main`, its ops from `registry`, from a fresh startup; the
// fetches after each.
std::vector<Fetched> Execute(const RandomProgram& p, const proto::ProgramDesc& main,
                             const OpRegistry& registry = OpRegistry::Global()) {
  Scope scope;
  Executor({}, registry).RunProgram(p.startup, scope);
  Executor exec({}, registry);
  auto plan = exec.Prepare(main, 0, std::set<std::string>(p.fetches.begin(), p.fetches.end()));
  std::vector<Fetched> steps;
  for (int step = 0; step < 2; ++step) {
    for (const auto& [name, t] : p.feeds) FeedTensor(main.blocks(0), scope, name, t);
    exec.Run(*plan, scope);
    Fetched f;
    for (const std::string& name : p.fetches) {
      f.emplace_back();
      f.back().CopyFrom(scope.GetVar(name)->Get());
    }
    steps.push_back(std::move(f));
  }
  return steps;
}

double At(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFP32: return t.data<float>()[i];
    case DataType::kFP64: return t.data<double>()[i];
    case DataType::kINT64: return static_cast<double>(t.data<int64_t>()[i]);
    case DataType::kINT32: return t.data<int32_t>()[i];
    default: return t.data<bool>()[i];
  }
}

// "" when `got` matches `want`: same dtype and dims; NaN where NaN, the same
// infinities, and finite values within 1e-3 of the tensor's scale
// (max(1, max |want|)), which absorbs the JIT's other summation orders.
std::string Compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.dims() != want.dims()) {
    return "got " + got.ShapeString() + ", want " + want.ShapeString();
  }
  double scale = 1.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::isfinite(At(want, i))) scale = std::max(scale, std::fabs(At(want, i)));
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = At(got, i), b = At(want, i);
    const bool same = std::isnan(b) ? std::isnan(a) : std::isinf(b) ? a == b : std::fabs(a - b) <= 1e-3 * scale;
    if (!same) return "element " + std::to_string(i) + ": got " + std::to_string(a) + ", want " + std::to_string(b);
  }
  return "";
}

[[noreturn]] void Report(const RandomProgram& p, const proto::ProgramDesc& jitted, const std::string& what) {
  std::cerr << "---- program\n" << ProgramToText(p.main) << "---- with the JIT\n" << ProgramToText(jitted);
  Finding(what);
}

void Run(FuzzInput& in) {
  const bool executor_mode = in.Bool();
  const int min_cluster = in.Bool() ? 1 : 2;
  const bool inplace = in.Bool();
  const RandomProgram p = BuildRandomProgram(in);
  Stats& stats = GetStats();
  stats.rejected_ops += static_cast<int64_t>(p.rejected.size());
  for (const std::string& r : p.rejected) ++stats.refusals["shape inference: " + r.substr(0, 110)];
  if (p.main.blocks_size() == 0 || p.main.blocks(0).ops_size() == 0) return;
  ++stats.programs;
  for (const std::string& f : p.families) ++stats.family_ops[f];
  std::vector<Fetched> off;
  try {
    off = Execute(p, p.main);
  } catch (const Error& e) {
    ++stats.refused_off;
    ++stats.refusals["run: " + std::string(e.what()).substr(0, 110)];
    return;
  }
  jit::JitOptions jo;
  jo.launch_mode = executor_mode ? jit::LaunchMode::kExecutor : jit::LaunchMode::kRuntime;
  test::TestJit compiler(jo);
  BuildJitPassOptions bo;
  bo.min_cluster_size = min_cluster;
  PipelineOptions o = compiler.Pipeline(bo);
  o.inplace = inplace;
  for (const auto& [name, t] : p.feeds) o.keep_vars.insert(name);
  o.keep_vars.insert(p.fetches.begin(), p.fetches.end());
  proto::ProgramDesc jitted;
  std::vector<Fetched> on;
  try {
    jitted = RunPipeline(p.main, o, compiler.registry());
    on = Execute(p, jitted, compiler.registry());
  } catch (const Error& e) {
    Report(p, jitted, std::string("the JIT refused a program the framework ran: ") + e.what());
  }
  for (const auto& op : jitted.blocks(0).ops()) stats.clusters += op.type() == "jit_launch";
  const jit::JitStats js = compiler->stats();
  stats.compiles += js.compiles;
  stats.compile_failures += js.failures;
  stats.fallbacks += js.launch.framework_fallbacks;
  stats.launches += js.launch.launches;
  ++stats.compared;
  stats.with_backward += p.backward;
  for (size_t step = 0; step < off.size(); ++step) {
    for (size_t i = 0; i < p.fetches.size(); ++i) {
      const std::string diff = Compare(on[step][i], off[step][i]);
      if (!diff.empty()) {
        Report(p, jitted, "step " + std::to_string(step) + ", var '" + p.fetches[i] + "': JIT on and off differ: " + diff);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::FuzzInput in(data, size);
  kiln::fuzz::Run(in);
  return 0;
}
