#include "passes/pass_registry.h"

#include <utility>

#include "framework/error.h"

namespace kiln {

const PassRegistry& PassRegistry::Global() {
  static const PassRegistry* registry = [] {
    auto* r = new PassRegistry;
    RegisterAllPasses(*r);
    return r;
  }();
  return *registry;
}

void PassRegistry::Add(PassInfo info) {
  KILN_CHECK(!info.name.empty() && info.create, "PassRegistry::Add: pass without name or factory");
  KILN_CHECK(passes_.count(info.name) == 0, "PassRegistry::Add: pass '", info.name, "' registered twice");
  std::string name = info.name;
  passes_.emplace(std::move(name), std::move(info));
}

const PassInfo* PassRegistry::Find(std::string_view name) const {
  auto it = passes_.find(name);
  return it == passes_.end() ? nullptr : &it->second;
}

std::vector<std::string> PassRegistry::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : passes_) out.push_back(name);
  return out;
}

std::unique_ptr<Pass> PassRegistry::Create(std::string_view name, const PassConfig& config) const {
  const PassInfo* info = Find(name);
  if (info == nullptr) {
    std::string known;
    for (const auto& [n, i] : passes_) known += (known.empty() ? "" : ", ") + n;
    ThrowNotFound("unknown pass '", name, "' (known: ", known, ")");
  }
  std::unique_ptr<Pass> pass = info->create(config);
  KILN_CHECK(pass != nullptr && pass->name() == info->name, "PassRegistry: factory of '", info->name,
             "' made a pass with another name");
  return pass;
}

std::vector<std::unique_ptr<Pass>> PassRegistry::CreatePipeline(const std::vector<std::string>& names,
                                                                const PassConfig& config) const {
  std::vector<std::unique_ptr<Pass>> out;
  for (const auto& name : names) out.push_back(Create(name, config));
  return out;
}

void RegisterAllPasses(PassRegistry& registry) {
  registry.Add({"decomposition_fusion_pass",
                "turn an exporter's decomposed LayerNorm (reduce_mean/sub/pow/sqrt/div) and erf GELU back into "
                "layer_norm and gelu (--fuse_decompositions; kiln.onnx.load and kiln import run it; before "
                "attention_fusion_pass and build_jit_pass)",
                [](const PassConfig& c) -> std::unique_ptr<Pass> {
                  return std::make_unique<DecompositionFusionPass>(c.decomposition_fusion,
                                                                   c.decomposition_fusion_report);
                }});
  registry.Add({"attention_fusion_pass",
                "rewrite matmul/softmax/matmul attention and its grad ops into fused_attention ops that never store "
                "the probabilities (--fuse_attention; run before recompute_pass and build_jit_pass)",
                [](const PassConfig& c) -> std::unique_ptr<Pass> {
                  return std::make_unique<AttentionFusionPass>(c.attention_fusion, c.attention_fusion_report);
                }});
  registry.Add({"recompute_pass",
                "copy cheap forward ops into the backward pass so their outputs are not kept from forward to "
                "backward (--recompute, --recompute_ops; run before build_jit_pass)",
                [](const PassConfig& c) -> std::unique_ptr<Pass> {
                  return std::make_unique<RecomputePass>(c.recompute, c.recompute_report);
                }});
  registry.Add({"build_jit_pass",
                "replace clusters of JIT-lowerable ops by jit_launch ops (--jit_allow_ops, --jit_deny_ops, "
                "--jit_min_cluster_size)",
                [](const PassConfig& c) -> std::unique_ptr<Pass> {
                  if (!c.jit_sink) ThrowInvalidArgument("build_jit_pass needs a subgraph sink (the JIT compiler)");
                  return std::make_unique<BuildJitPass>(c.build_jit, c.jit_sink, c.build_jit_report);
                }});
  registry.Add({"inplace_pass",
                "let activations, softmax, elementwise_add and sum write their output into an input that dies "
                "there (--use_inplace; run after build_jit_pass)",
                [](const PassConfig& c) -> std::unique_ptr<Pass> {
                  return std::make_unique<InplacePass>(c.inplace, c.inplace_report);
                }});
}

namespace {

void VerifyAfter(const ir::Graph& graph, const Pass* pass) {
  const std::string problems = graph.VerifyMessage();
  if (problems.empty()) return;
  const std::string where = pass == nullptr ? "before any pass" : StrCat("after pass '", pass->name(), "'");
  throw Error(ErrorCode::kInternal, StrCat("invalid graph ", where, ":\n", problems));
}

}  // namespace

bool RunPasses(ir::Graph& graph, const std::vector<const Pass*>& pipeline, const PassDumpFn& dump) {
  VerifyAfter(graph, nullptr);
  bool changed = false;
  for (const Pass* pass : pipeline) {
    KILN_CHECK(pass != nullptr, "RunPasses: null pass");
    const bool this_changed = pass->Run(graph);
    VerifyAfter(graph, pass);
    if (dump) dump(*pass, graph, this_changed);
    changed = changed || this_changed;
  }
  return changed;
}

bool RunPasses(ir::Graph& graph, const std::vector<std::unique_ptr<Pass>>& pipeline, const PassDumpFn& dump) {
  std::vector<const Pass*> passes;
  for (const auto& p : pipeline) passes.push_back(p.get());
  return RunPasses(graph, passes, dump);
}

}  // namespace kiln
