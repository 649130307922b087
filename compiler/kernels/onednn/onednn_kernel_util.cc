#include "compiler/kernels/onednn/onednn_kernel_util.h"

namespace kiln::jit::onednn_kernels {

using onednn::ExecArgs;
using onednn::PrimitiveEntry;

onednn::FusedOps Fusion(bool bias, MatmulActivation activation) {
  onednn::FusedOps fused;
  fused.bias = bias;
  switch (activation) {
    case MatmulActivation::kNone: break;
    case MatmulActivation::kRelu:
      // relu that keeps NaN: oneDNN's eltwise_relu (and clip, and a binary
      // max) turn NaN into 0; elu with alpha 0 is x > 0 ? x : 0 * (exp(x) - 1),
      // NaN for NaN and -0 for x <= 0, and the linear 1*y + 0 makes that +0.
      // About 2-3% slower than eltwise_relu on a 256x1024x1024 matmul.
      fused.post_ops.push_back(onednn::PostOp::Eltwise(dnnl::algorithm::eltwise_elu, 0.0f, 0.0f));
      fused.post_ops.push_back(onednn::PostOp::Eltwise(dnnl::algorithm::eltwise_linear, 1.0f, 0.0f));
      break;
    case MatmulActivation::kGelu:
      fused.post_ops.push_back(onednn::PostOp::Eltwise(dnnl::algorithm::eltwise_gelu_erf));
      break;
    case MatmulActivation::kGeluTanh:
      fused.post_ops.push_back(onednn::PostOp::Eltwise(dnnl::algorithm::eltwise_gelu_tanh));
      break;
  }
  return fused;
}

std::string ComputeSuffix(ComputeType compute) {
  return compute == ComputeType::kBF16 ? " in bf16 (f32 accumulation)" : "";
}

std::string FusionSuffix(bool bias, MatmulActivation activation) {
  std::string s = bias ? " + bias" : "";
  if (activation == MatmulActivation::kRelu) s += " + relu post-op";
  if (activation == MatmulActivation::kGelu) s += " + gelu_erf post-op";
  if (activation == MatmulActivation::kGeluTanh) s += " + gelu_tanh post-op";
  return s;
}

std::shared_ptr<const PrimitiveEntry> AcquiredEntry(const onednn::OneDnnHandler& h, const onednn::PrimitiveKey& key,
                                                    const std::string& what) {
  std::shared_ptr<const PrimitiveEntry> entry = h.acquired_entry();
  if (!entry || !entry->primitive) ThrowUnimplemented("oneDNN has no ", what, " (", key.ToString(), ")");
  // As the framework's kernels: a slow implementation is refused (the unit
  // then falls back) unless the settings allow it.
  if (entry->slow_impl && !h.settings().allow_slow_impls) {
    ThrowUnimplemented("oneDNN has only a slow implementation (", entry->impl, ") of ", what, " (", key.ToString(),
                       ")");
  }
  return entry;
}

std::shared_ptr<const PrimitiveEntry> AcquireEntry(onednn::OneDnnHandler& h, const std::string& what) {
  h.AcquireForwardPrimitive();
  return AcquiredEntry(h, h.forward_key(), what);
}

dnnl::memory Bind(const dnnl::memory::desc& md, void* data) {
  return dnnl::memory(md, onednn::OneDnnHandler::Engine(), data);
}

BoundEntry::BoundEntry(std::shared_ptr<const PrimitiveEntry> entry, const std::vector<int>& dnnl_args)
    : entry_(std::move(entry)) {
  for (int arg : dnnl_args) args_.emplace_back(arg, onednn::UserDesc(*entry_, arg));
}

std::string BoundEntry::ReorderText() const {
  std::string s;
  for (const auto& r : entry_->reorders) s += std::string(s.empty() ? "; reorders " : ", ") + onednn::ArgName(r.arg);
  return s;
}

std::vector<onednn::ReorderNote> BoundEntry::Reorders() const { return onednn::EntryReorders(*entry_); }

void BoundEntry::Run(const runtime::BufferView* bound, void* scratch) const {
  ExecArgs args;
  for (size_t i = 0; i < args_.size(); ++i) args[args_[i].first] = Bind(args_[i].second, bound[i].data);
  onednn::ExecuteEntry(*entry_, std::move(args), scratch);
}

std::vector<int> ForwardArgs(const PrimitiveEntry& entry, bool bias) {
  std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS};
  if (bias) args.push_back(entry.bias_arg);
  args.push_back(DNNL_ARG_DST);
  return args;
}

std::string ArgDimsMismatch(const std::vector<Dims>& got, const std::vector<Dims>& want) {
  if (got.size() != want.size()) return StrCat("expected dims for ", want.size(), " arguments, got ", got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (!want[i].empty() && got[i] != want[i]) {
      return StrCat("argument ", i, " must be ", DimsToString(want[i]), ", got ", DimsToString(got[i]));
    }
  }
  return "";
}

std::shared_ptr<const runtime::Kernel> Refuse(const std::string& kernel, const std::string& reason, std::string* why) {
  if (why != nullptr) *why = kernel + ": " + reason;
  return nullptr;
}

}  // namespace kiln::jit::onednn_kernels

namespace kiln::jit {

Dims KeptLogicalDims(ActLayout layout, const Dims& stored, int64_t c) {
  Dims nchw;
  if (layout == ActLayout::kPlain && stored.size() == 4) nchw = stored;
  if (layout == ActLayout::kNhwc && stored.size() == 4) nchw = {stored[0], stored[3], stored[1], stored[2]};
  if ((layout == ActLayout::kNChw8c || layout == ActLayout::kNChw16c) && stored.size() == 5) {
    nchw = {stored[0], c, stored[2], stored[3]};
  }
  if (nchw.empty() || nchw[1] != c || ActStoredDims(layout, nchw) != stored) return {};
  return nchw;
}

}  // namespace kiln::jit

