#include "compiler/lower.h"

#include <chrono>

#include "compiler/lowering/batch_one.h"
#include "compiler/lowering/bf16_activations.h"
#include "compiler/lowering/bf16_weight_copies.h"
#include "compiler/lowering/blocked_batch_norm.h"
#include "compiler/lowering/blocked_layout.h"
#include "compiler/lowering/buffers.h"
#include "compiler/lowering/conv_epilogue.h"
#include "compiler/lowering/dead_ops.h"
#include "compiler/lowering/early_updates.h"
#include "compiler/lowering/elementwise_groups.h"
#include "compiler/lowering/framework_fallback.h"
#include "compiler/lowering/fused_attention.h"
#include "compiler/lowering/kept_activations.h"
#include "compiler/lowering/layout_ops.h"
#include "compiler/lowering/matmul_epilogue.h"
#include "compiler/lowering/max_pool_grad.h"
#include "compiler/lowering/onednn_anchors.h"
#include "compiler/lowering/sgd_before_dx.h"
#include "compiler/lowering/trace.h"
#include "compiler/lowering/weight_grad_fold.h"

namespace kiln::jit {
namespace {

// The pipeline. Every op starts pending; each step claims what it matches.
Units RunSteps(const Cluster& c, LoweringTrace& t) {
  Units units;
  t.clock().Begin("pending");
  for (int i = 0; i < c.num_ops(); ++i) units.push_back(std::make_unique<PendingOp>(c, i));
  units = DropDeadOps(c, std::move(units),
                      t.Step(kDeadOpsStep, "first: no pattern should match, or keep a value for, an op whose "
                                           "results nothing uses"));
  units = FuseMatmulEpilogue(c, std::move(units),
                             t.Step(kMatmulEpilogueStep, "before the other patterns: it takes bias adds and "
                                                         "activations that elementwise grouping would otherwise "
                                                         "claim"));
  units = FuseConvEpilogue(c, std::move(units),
                           t.Step(kConvEpilogueStep, "likewise, before grouping takes the bias add and relu"));
  units = KeepBatchNormBlocked(c, std::move(units),
                               t.Step(kBlockedBatchNormStep, "after conv_epilogue, which takes the convs with a bias "
                                                             "or activation; before grouping takes relu and "
                                                             "relu_grad and the anchors conv2d, batch_norm and their "
                                                             "gradients"));
  units = KeepActivations(c, std::move(units),
                          t.Step(kKeptActivationsStep, "after blocked_batch_norm, whose batch norm, convolution and "
                                                        "residual units it rewrites"));
  units = FoldWeightGradIntoSgd(c, std::move(units),
                                t.Step(kWeightGradFoldStep, "before grouping, which would take the sgd step"));
  units = UseGemvAtBatchOne(c, std::move(units),
                            t.Step(kBatchOneStep, "after the matmul steps: it rewrites their units for one row"));
  units = RunSgdBeforeDx(c, std::move(units),
                         t.Step(kSgdBeforeDxStep, "after batch_one: a one-row fold does dX and the step in one "
                                                  "pass over W instead"));
  units = CopyBf16Weights(c, std::move(units),
                          t.Step(kBf16WeightCopiesStep, "after the matmul steps, whose units it rewrites to read "
                                                        "one bf16 copy of a weight"));
  units = LowerMaxPoolGrad(c, std::move(units),
                           t.Step(kMaxPoolGradStep, "before the oneDNN anchors, which would take pool2d_grad"));
  units = KeepBlockedLayout(c, std::move(units),
                            t.Step(kBlockedLayoutStep, "after the conv and max-pool-gradient units it rewrites, "
                                                       "before grouping and the anchors take relu_grad, pool2d, "
                                                       "conv2d_grad"));
  units = LowerFusedAttention(c, std::move(units),
                              t.Step(kFusedAttentionStep, "before the fallback, which would run the fused ops' "
                                                          "reference kernels"));
  units = LowerLayoutOps(c, std::move(units),
                         t.Step(kLayoutOpsStep, "before the fallback, which would run the reference kernels"));
  units = RunUpdatesEarly(c, std::move(units),
                          t.Step(kEarlyUpdatesStep, "after the pattern steps, before grouping: it moves the "
                                                    "parameter updates no pattern took next to their gradients"));
  units = GroupElementwise(c, std::move(units),
                           t.Step(kElementwiseGroupsStep, "after every pattern step: it groups the elementwise "
                                                          "ops no pattern took"));
  units = StoreBf16Activations(c, std::move(units),
                               t.Step(kBf16ActivationsStep, "after grouping: it makes generated kernels store "
                                                            "values that only bf16 matmuls read in bf16"));
  units = ClaimOneDnnAnchors(c, std::move(units),
                             t.Step(kOneDnnAnchorsStep, "the ops left that have a oneDNN kernel"));
  units = FallBackToFramework(c, std::move(units),
                              t.Step(kFrameworkFallbackStep, "last: every op left runs its reference kernel"));
  return units;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Emits every unit's kernels. Returns false after the first unit that cannot
// be compiled: its ops are then kept out of the step that made it (the
// caller runs the steps again) and the trace says why. Each unit's time goes
// to the phase "emit <kind>" of the trace's clock.
bool EmitAll(Cluster& c, const Units& units, LoweringTrace& trace, std::vector<EmittedKernel>* out) {
  trace.clock().Begin("var uses");
  const VarUses uses(units);
  trace.clock().End();
  int current = -1;
  EmitContext ctx(c, [&](const std::string& var) {
    if (c.IsOutput(var)) return true;
    for (int u : uses.Readers(var)) {
      if (u != current) return true;
    }
    return false;
  });
  for (current = 0; current < static_cast<int>(units.size()); ++current) {
    const Unit& unit = *units[current];
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ThreadCpuMs();
    const std::string phase = std::string("emit ") + unit.kind();
    try {
      for (auto& k : unit.Emit(ctx)) out->push_back(std::move(k));
      trace.clock().Add(phase, MsSince(t0), ThreadCpuMs() - cpu0);
    } catch (const Error& e) {
      trace.clock().Add(phase, MsSince(t0), ThreadCpuMs() - cpu0);
      bool excluded_any = false;
      for (int op : unit.FallbackOps()) {
        excluded_any = excluded_any || (!unit.step().empty() && !c.Excluded(unit.step(), op));
        c.Exclude(unit.step(), op);
      }
      // A framework kernel that cannot be made: nothing smaller to fall back to.
      if (!excluded_any || unit.step() == kFrameworkFallbackStep) throw;
      trace.AddFallback(std::string(unit.kind()) + " of " + OpList(c, unit.FallbackOps()) + " (step " + unit.step() +
                        ") could not be compiled: " + e.what() + "; its ops are lowered without that step");
      return false;
    }
  }
  return true;
}

}  // namespace

std::unique_ptr<CompiledObject> Lower(const std::string& key, const JitSubgraph& sg, const ShapeSignature& signature,
                                      const CompileOptions& options, const OpRegistry& registry) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuMs();
  auto obj = std::make_unique<CompiledObject>();
  obj->key = key;
  obj->signature = signature;
  obj->options = options;
  obj->input_names = sg.inputs;
  obj->output_names = sg.outputs;
  LoweringTrace trace;
  PhaseClock& clock = trace.clock();
  clock.Begin("cluster");
  Cluster cluster(sg, signature, options, registry);
  std::vector<EmittedKernel> kernels;
  Units units;
  for (;;) {
    trace.ClearSteps();
    kernels.clear();
    units = RunSteps(cluster, trace);
    clock.End();
    if (EmitAll(cluster, units, trace, &kernels)) break;
  }
  clock.Begin("trace");
  std::vector<std::string> lines;
  for (const auto& u : units) {
    lines.push_back(OpList(cluster, u->ops()) + " -> " + u->kind() + ": " + u->Describe(cluster));
  }
  trace.SetUnits(std::move(lines));
  obj->unit_fallbacks = trace.fallbacks();
  obj->lowering = trace.ToString();
  clock.Begin("plan");
  // What units read as data from other units (a group's reads of values it
  // computes itself stay in registers).
  std::set<std::string> data_reads;
  for (const auto& u : units) {
    for (const std::string& v : u->reads()) {
      if (u->writes().count(v) == 0) data_reads.insert(v);
    }
  }
  BuildProgram(cluster, kernels, data_reads, obj.get());
  clock.End();
  for (const PhaseTime& p : clock.phases()) obj->compile_phases.push_back({p.name, p.wall_ms, p.cpu_ms});
  obj->compile_ms = MsSince(t0);
  obj->compile_cpu_ms = ThreadCpuMs() - cpu0;
  return obj;
}

}  // namespace kiln::jit
