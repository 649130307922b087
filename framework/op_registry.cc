#include "framework/op_registry.h"

#include "framework/onednn/onednn_kernels.h"
#include "framework/ops/ops.h"
#include "framework/suggest.h"

namespace kiln {

OpRegistry& OpRegistry::GlobalForRegistration() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterAllOps(*r);
    return r;
  }();
  return *registry;
}

const OpRegistry& OpRegistry::Global() { return GlobalForRegistration(); }

OpInfo& OpRegistry::Add(OpInfo info) {
  KILN_CHECK(!info.type.empty());
  KILN_CHECK(ops_.find(info.type) == ops_.end(), "op '", info.type, "' registered twice");
  std::string type = info.type;
  auto& slot = ops_[type];
  slot = std::make_unique<OpInfo>(std::move(info));
  return *slot;
}

const OpInfo* OpRegistry::Find(std::string_view type) const {
  auto it = ops_.find(type);
  return it == ops_.end() ? nullptr : it->second.get();
}

OpInfo* OpRegistry::FindMutable(std::string_view type) {
  auto it = ops_.find(type);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpInfo& OpRegistry::Get(std::string_view type) const {
  const OpInfo* info = Find(type);
  if (info == nullptr) ThrowNotFound("unknown op type '", type, "'", DidYouMean(type, Types()));
  return *info;
}

std::vector<std::string> OpRegistry::Types() const {
  std::vector<std::string> out;
  for (const auto& kv : ops_) out.push_back(kv.first);
  return out;
}

bool IsParameterUpdate(const proto::OpDesc& op, const OpRegistry& registry) {
  const OpInfo* info = registry.Find(op.type());
  return info != nullptr && info->jit == JitLowering::kOptimizer;
}

void RegisterAllOps(OpRegistry& r) {
  RegisterElementwiseOps(r);
  RegisterActivationOps(r);
  RegisterMatmulOps(r);
  RegisterConvPoolOps(r);
  RegisterNormSoftmaxOps(r);
  RegisterLayerNormOps(r);
  RegisterReduceOps(r);
  RegisterShapeOps(r);
  RegisterFillOps(r);
  RegisterAssignValueOps(r);
  RegisterOptimizerOps(r);
  RegisterLrScheduleOps(r);
  RegisterGradClipOps(r);
  RegisterGradMergeOps(r);
  RegisterConcatSplitSliceOps(r);
  RegisterClipLogSoftmaxOps(r);
  RegisterBatchNormOps(r);
  RegisterLookupTableOps(r);
  RegisterDropoutOps(r);
  RegisterCollectiveOps(r);
  RegisterFusedAttentionOps(r);
  RegisterReduceMaxMinOps(r);
  RegisterArgCastOps(r);
  RegisterGatherOneHotOps(r);
  RegisterCompareWhereOps(r);
  RegisterMathOps(r);
  RegisterSigmoidCrossEntropyOps(r);
  RegisterUnaryMathOps(r);
  RegisterTrigOps(r);
  RegisterOnnxActivationOps(r);
  RegisterLogicalOps(r);
  RegisterBinaryOps(r);
  RegisterElementwisePowOps(r);
  RegisterTileExpandOps(r);
  RegisterPadOps(r);
  RegisterCumsumOps(r);
  RegisterReduceNormOps(r);
  RegisterInstanceNormOps(r);
  RegisterPreluOps(r);
  RegisterNllLossOps(r);
  RegisterTakeAlongAxisOps(r);
  AttachOneDnnKernels(r);
}

}  // namespace kiln
