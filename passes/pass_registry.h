// The pass registry and the pass runner. Passes are registered by name from
// one function (RegisterAllPasses), never by static initialisers, so tools
// and tests can list them and build a list of passes from names. The
// production pipeline is passes/pipeline.h. A list of passes runs in order
// (RunPasses); the graph is verified before the first pass and after every
// pass, and can be dumped after every pass.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "passes/attention_fusion_pass.h"
#include "passes/build_jit_pass.h"
#include "passes/decomposition_fusion_pass.h"
#include "passes/inplace_pass.h"
#include "passes/pass.h"
#include "passes/recompute_pass.h"

namespace kiln {

// What a tool hands the passes it builds from names: their options and the
// hooks into the rest of the system.
struct PassConfig {
  DecompositionFusionPassOptions decomposition_fusion;
  // When not null, decomposition_fusion_pass writes what it did here on every run.
  DecompositionFusionReport* decomposition_fusion_report = nullptr;
  AttentionFusionPassOptions attention_fusion;
  // When not null, attention_fusion_pass writes what it did here on every run.
  AttentionFusionReport* attention_fusion_report = nullptr;
  RecomputePassOptions recompute;
  // When not null, recompute_pass writes what it did here on every run.
  RecomputeReport* recompute_report = nullptr;
  BuildJitPassOptions build_jit;
  // Required by build_jit_pass (the tools: jit::DefaultJit()'s compile cache).
  SubgraphSink jit_sink;
  // When not null, build_jit_pass writes what it did here on every run.
  BuildJitReport* build_jit_report = nullptr;
  InplacePassOptions inplace;
  // When not null, inplace_pass writes what it did here on every run.
  InplaceReport* inplace_report = nullptr;
};

using PassFactory = std::function<std::unique_ptr<Pass>(const PassConfig&)>;

struct PassInfo {
  std::string name;
  std::string doc;  // one line for `kiln passes`
  PassFactory create;
};

class PassRegistry {
 public:
  // The process-wide registry with every built-in pass.
  static const PassRegistry& Global();

  void Add(PassInfo info);  // aborts on a duplicate name (programming error)
  const PassInfo* Find(std::string_view name) const;
  std::vector<std::string> Names() const;  // sorted
  // Throws NotFound: "unknown pass 'foo' (known: build_jit_pass)".
  std::unique_ptr<Pass> Create(std::string_view name, const PassConfig& config) const;
  // One pass per name, in order.
  std::vector<std::unique_ptr<Pass>> CreatePipeline(const std::vector<std::string>& names,
                                                    const PassConfig& config) const;

 private:
  std::map<std::string, PassInfo, std::less<>> passes_;
};

// Registers every built-in pass.
void RegisterAllPasses(PassRegistry& registry);

// Called after each pass with the graph it left and whether it changed it
// (the pipeline's dump directory, --dump_passes; tests).
using PassDumpFn = std::function<void(const Pass& pass, const ir::Graph& graph, bool changed)>;

// Runs the passes in order; returns true iff any changed the graph. Throws
// kiln::Error (kInternal) naming the pass after which graph.Verify() fails
// ("before any pass" for a broken input graph); errors from a pass propagate.
bool RunPasses(ir::Graph& graph, const std::vector<const Pass*>& pipeline, const PassDumpFn& dump = nullptr);
bool RunPasses(ir::Graph& graph, const std::vector<std::unique_ptr<Pass>>& pipeline,
               const PassDumpFn& dump = nullptr);

}  // namespace kiln
