// Internal to the oneDNN kernels of the JIT (onednn_kernels.cc,
// onednn_conv_kernels.cc, batch_norm_kernels.cc): the post-ops of a fusion,
// the cached entry bound to kernel arguments, and the guards of Resize.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "dnnl.hpp"
#include "framework/error.h"
#include "framework/onednn/handlers.h"

namespace kiln::jit::onednn_kernels {

// The bias and activation as oneDNN post-ops (relu keeps NaN).
onednn::FusedOps Fusion(bool bias, MatmulActivation activation);
// " in bf16 (f32 accumulation)" for bf16 compute: part of a Describe() line.
std::string ComputeSuffix(ComputeType compute);
// " + bias + relu post-op": the tail of a Describe() line.
std::string FusionSuffix(bool bias, MatmulActivation activation);

// The entry `h` acquired last (its key `key`). Compiled code takes the
// implementation oneDNN has even when the framework would call it slow (the
// dump names it; Acquire*Primitive returned false for it); only a missing
// one is an error.
std::shared_ptr<const onednn::PrimitiveEntry> AcquiredEntry(const onednn::OneDnnHandler& h,
                                                            const onednn::PrimitiveKey& key, const std::string& what);
// The forward entry of `h` from the global cache.
std::shared_ptr<const onednn::PrimitiveEntry> AcquireEntry(onednn::OneDnnHandler& h, const std::string& what);

dnnl::memory Bind(const dnnl::memory::desc& md, void* data);

// A cached entry with, for each kernel argument in order, the oneDNN argument
// it binds and the descriptor of its buffer (plain, or a kept layout).
class BoundEntry {
 public:
  BoundEntry(std::shared_ptr<const onednn::PrimitiveEntry> entry, const std::vector<int>& dnnl_args);
  const std::string& impl() const { return entry_->impl; }
  // "; reorders src, weights": the arguments the entry moves between the
  // bound buffer's layout and its primitive's ("" when none).
  std::string ReorderText() const;
  // Those reorders as Run does them (runtime::Kernel::Reorders).
  std::vector<onednn::ReorderNote> Reorders() const;
  // With `scratch` (ScratchBytes(), runtime::Kernel::ScratchBytes) the
  // reordered arguments and the scratchpad live there.
  void Run(const runtime::BufferView* bound, void* scratch = nullptr) const;
  size_t ScratchBytes() const { return onednn::EntryScratchBytes(*entry_); }

 private:
  std::shared_ptr<const onednn::PrimitiveEntry> entry_;
  std::vector<std::pair<int, dnnl::memory::desc>> args_;
};

// Src, weights[, bias], dst: a forward's kernel arguments.
std::vector<int> ForwardArgs(const onednn::PrimitiveEntry& entry, bool bias);

// ---- Resize (runtime::Kernel::Resize) ----------------------------------------
// "" when `got` (the dims Resize was given) has want.size() entries and
// got[i] == want[i] wherever want[i] is not empty (an empty Dims: not
// checked here); else what differs, naming the argument.
std::string ArgDimsMismatch(const std::vector<Dims>& got, const std::vector<Dims>& want);
// nullptr, with "<kernel>: <reason>" in `why`: a failed guard.
std::shared_ptr<const runtime::Kernel> Refuse(const std::string& kernel, const std::string& reason, std::string* why);
// make(), or nullptr with the reason in `why` when it throws (oneDNN has no
// primitive for the new dims, or they make none).
template <typename Make>
std::shared_ptr<const runtime::Kernel> Remake(const std::string& kernel, Make make, std::string* why) {
  try {
    return make();
  } catch (const Error& e) {
    return Refuse(kernel, e.what(), why);
  } catch (const dnnl::error& e) {
    return Refuse(kernel, std::string("oneDNN: ") + e.what(), why);
  }
}

}  // namespace kiln::jit::onednn_kernels
