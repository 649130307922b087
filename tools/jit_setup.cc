#include "tools/jit_setup.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "compiler/dump/jit_dump.h"
#include "framework/file_util.h"
#include "framework/flags.h"
#include "framework/onednn/handlers.h"
#include "framework/op_registry.h"
#include "launch_op/default_jit.h"
#include "launch_op/jit_launch_op.h"
#include "runtime/runner.h"
#include "tools/dump_report.h"
#include "tools/pipeline_setup.h"
#include "tools/svg_chart.h"

namespace kiln::tools {
namespace {

// What this run clustered. Written by the tool's thread and read from
// compiles on any thread.
struct RunRecord {
  std::mutex mu;
  std::map<std::string, std::string> id_of_key;
  std::vector<std::string> keys;  // by id
  std::vector<ExcludedOp> excluded;
  int programs = 0;
  std::map<std::string, std::vector<std::string>> signatures;  // key -> signatures dumped, in order
};

RunRecord& Record() {
  static RunRecord* record = new RunRecord();
  return *record;
}

// --jit_dump_dir: DIR/cluster_<id>_s<n>/, n numbering the key's signatures.
void DumpCompile(const std::string& dir, const jit::CompiledObject& obj, const JitSubgraph& subgraph) {
  const std::string id = ClusterName(obj.key);
  size_t n;
  {
    RunRecord& r = Record();
    std::lock_guard<std::mutex> lock(r.mu);
    auto& sigs = r.signatures[obj.key];
    const std::string sig = obj.signature.ToString() + " " + IsaName(obj.options.isa);
    n = std::find(sigs.begin(), sigs.end(), sig) - sigs.begin();
    if (n == sigs.size()) sigs.push_back(sig);
  }
  const std::string folder = id == obj.key ? "cluster_" + id : "cluster_" + id + "_" + obj.key;
  jit::WriteDumpFiles(dir + "/" + folder + "_s" + std::to_string(n), jit::ClusterDumpFiles(id, subgraph, obj));
}

}  // namespace

void RecordJitReport(const BuildJitReport& report) {
  RunRecord& r = Record();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string program = "program " + std::to_string(++r.programs);
  for (const auto& c : report.clusters) {
    if (r.id_of_key.count(c.key)) continue;
    r.id_of_key[c.key] = "c" + std::to_string(r.keys.size());
    r.keys.push_back(c.key);
  }
  for (const auto& e : report.excluded) r.excluded.push_back({program, e});
}

std::string ClusterName(const std::string& key) {
  RunRecord& r = Record();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.id_of_key.find(key);
  return it == r.id_of_key.end() ? key : it->second;
}

namespace {

// --jit_profile with --jit_dump_dir: the profile as a bar chart,
// DIR/profile.svg, beside the clusters' dumps.
void WriteProfileSvg() {
  if (FLAGS_jit_dump_dir.empty()) return;
  std::vector<Bar> bars;
  double total = 0;
  for (const auto& e : jit::DefaultJit().launch().profile().Entries()) total += e.ms;
  for (const auto& e : jit::DefaultJit().launch().profile().Entries()) {
    char detail[64];
    std::snprintf(detail, sizeof detail, "(%.1f%%, %lld calls)", total > 0 ? 100 * e.ms / total : 0.0,
                  static_cast<long long>(e.calls));
    bars.push_back({e.kernel.substr(0, e.kernel.find("  ")), e.ms, detail});
    if (bars.size() == 40) break;
  }
  const double height = 40 + 18 * static_cast<double>(bars.size());
  try {
    WriteFileAtomic(FLAGS_jit_dump_dir + "/profile.svg",
                    SvgDocument(900, height, BarChartSvg("JIT profile: time per compiled kernel", bars, "ms", 900)));
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: --jit_profile: %s\n", e.what());
  }
}

// --amp: what matmuls multiply in (OneDnnSettingsFromFlags). bf16 is
// checked here, by creating a small bf16 matmul, so a CPU without one (oneDNN
// needs AVX512_CORE; AVX512_BF16 makes it native) fails at start-up instead of
// silently falling back to f32 reference kernels.
ComputeType AmpComputeFromFlags() {
  const ComputeType amp = OneDnnSettingsFromFlags().amp_compute;
  if (amp == ComputeType::kF32) return amp;
  if (!FLAGS_use_onednn) ThrowInvalidArgument("--amp bf16 needs --use_onednn: the bf16 matmuls are oneDNN primitives");
  std::string why;
  if (!onednn::Bf16KernelsAvailable(&why)) {
    ThrowUnimplemented("--amp bf16: oneDNN has no usable bf16 matmul or convolution on this CPU (", why,
                       "; it needs AVX512_CORE, natively AVX512_BF16)");
  }
  return amp;
}

}  // namespace

void ConfigureJitFromFlags() {
  jit::RegisterJitOps(OpRegistry::GlobalForRegistration(), jit::DefaultJit());
  jit::JitOptions o;
  if (FLAGS_jit_cache_capacity < 1) ThrowInvalidArgument("--jit_cache_capacity must be at least 1");
  if (FLAGS_jit_recompile_limit < 1) ThrowInvalidArgument("--jit_recompile_limit must be at least 1");
  o.cache_capacity = static_cast<size_t>(FLAGS_jit_cache_capacity);
  o.recompile_limit = FLAGS_jit_recompile_limit;
  o.dynamic = jit::ParseDynamicPolicy(FLAGS_jit_dynamic);
  if (FLAGS_jit_isa.empty()) {
    o.compile.isa = HostIsa();
  } else if (FLAGS_jit_isa == "avx512" || FLAGS_jit_isa == "avx2") {
    o.compile.isa = FLAGS_jit_isa == "avx512" ? Isa::kAvx512 : Isa::kAvx2;
    if (o.compile.isa == Isa::kAvx512 && HostIsa() != Isa::kAvx512) {
      ThrowInvalidArgument("--jit_isa avx512: this CPU has no AVX-512");
    }
  } else {
    ThrowInvalidArgument("unknown --jit_isa '", FLAGS_jit_isa, "': expected avx512 or avx2");
  }
  o.compile.use_onednn = FLAGS_use_onednn;
  // --check_nan_inf names the op that first makes a NaN/Inf: inside a fused
  // kernel only the group's last output exists, so fusion is off with it.
  o.compile.fuse_elementwise = FLAGS_jit_fuse_elementwise && !FLAGS_check_nan_inf;
  o.compile.reuse_buffers = FLAGS_jit_reuse_buffers;
  // --deterministic and --amp: compiled clusters take them from these
  // options; the framework's kernels from ExecutorOptionsFromFlags(), which
  // reads the same flags.
  o.compile.deterministic = FLAGS_deterministic;
  o.compile.amp_compute = AmpComputeFromFlags();
  o.verbose = FLAGS_jit_verbose;
  for (const auto& key : SplitOpList(FLAGS_jit_deny_clusters)) o.deny_clusters.insert(key);
  if (FLAGS_jit_shadow_every < 0) ThrowInvalidArgument("--jit_shadow_every must be >= 0, got ", FLAGS_jit_shadow_every);
  for (const auto& [name, value] : {std::pair{"--jit_shadow_rtol", FLAGS_jit_shadow_rtol},
                                    std::pair{"--jit_shadow_atol", FLAGS_jit_shadow_atol}}) {
    if (!(std::isfinite(value) && value >= 0)) ThrowInvalidArgument(name, " must be a finite number >= 0, got ", value);
  }
  o.shadow.every = FLAGS_jit_shadow_every;
  o.shadow.rtol = FLAGS_jit_shadow_rtol;
  o.shadow.atol = FLAGS_jit_shadow_atol;
  o.cluster_name = ClusterName;
  if (!FLAGS_jit_dump_dir.empty()) {
    const std::string dir = FLAGS_jit_dump_dir;
    o.on_compile = [dir](const jit::CompiledObject& obj, const JitSubgraph& sg) { DumpCompile(dir, obj, sg); };
  }
  o.launch_mode = jit::ParseLaunchMode(FLAGS_jit_launch_mode);
  o.profile = FLAGS_jit_profile;
  jit::DefaultJit().Configure(o);
  if (FLAGS_jit_profile) {
    // Configured again (the Python front end's set_flags): report once.
    static bool report_at_exit = [] {
      return std::atexit([] {
               std::fputs(jit::DefaultJit().launch().profile().Report().c_str(), stderr);
               WriteProfileSvg();
             }) == 0;
    }();
    (void)report_at_exit;
  }
}

void MaybePrintJitExplain() {
  if (!FLAGS_jit_explain) return;
  jit::JitRuntime& jit = jit::DefaultJit();
  std::vector<ClusterRow> rows;
  std::vector<ExcludedOp> excluded;
  {
    RunRecord& r = Record();
    std::lock_guard<std::mutex> lock(r.mu);
    for (size_t i = 0; i < r.keys.size(); ++i) {
      ClusterRow row;
      row.id = "c" + std::to_string(i);
      row.key = r.keys[i];
      rows.push_back(std::move(row));
    }
    excluded = r.excluded;
  }
  const auto objects = jit.cache().CachedObjects();
  for (ClusterRow& row : rows) {
    row.subgraph = &jit.cache().GetSubgraph(row.key);
    for (const auto& obj : objects) {
      if (obj->key == row.key) row.objects.push_back(obj);
    }
    if (row.objects.empty()) row.failure = "not compiled in this run (never launched, failed or evicted)";
  }
  std::fputs(ExplainText(rows, excluded, jit.stats()).c_str(), stderr);
}

}  // namespace kiln::tools
