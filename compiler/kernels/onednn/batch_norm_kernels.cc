#include "compiler/kernels/onednn/batch_norm_kernels.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "compiler/kernels/onednn/onednn_kernel_util.h"
#include "dnnl.hpp"
#include "framework/error.h"
#include "framework/onednn/batch_norm_handler.h"

namespace kiln::jit {
namespace {

using onednn::BatchNormHandler;
using onednn::ExecArgs;
using onednn::PrimitiveEntry;

dnnl::memory Bind(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, onednn::OneDnnHandler::Engine(), const_cast<void*>(data));
}

// A reorder between the plain NCHW buffer of Y or dY and the kept layout
// the primitive works in.
struct Reorder {
  dnnl::reorder::primitive_desc pd;
  dnnl::primitive p;
  // What it moves, for argument `arg` of `entry`'s primitive.
  onednn::ReorderNote Note(int arg, bool output, const PrimitiveEntry& entry) const {
    return onednn::NoteOf(pd.src_desc(), pd.dst_desc(), arg, output, onednn::PrimitiveLabel(entry.pd));
  }
};

// The handler of `spec` with its layout kept; throws for bad dims.
std::unique_ptr<BatchNormHandler> HandlerOf(const BatchNormSpec& spec, const onednn::Settings& settings) {
  const Dims& d = spec.x_dims;
  if (d.size() != 4 || Numel(d) <= 0 || spec.layout == ActLayout::kPlain ||
      (spec.y_layout != ActLayout::kPlain && spec.y_layout != spec.layout)) {
    ThrowInvalidArgument("oneDNN batch norm: expected X [N,C,H,W] without a zero dim, kept blocked, with Y plain or "
                         "in X's layout, got ", DimsToString(d), " in ", ActLayoutName(spec.layout), ", Y in ",
                         ActLayoutName(spec.y_layout));
  }
  auto h = std::make_unique<BatchNormHandler>(onednn::PrimitiveCache::Global(), settings, d[0], d[1], d[2] * d[3],
                                              spec.epsilon, /*global_stats=*/false);
  h->KeepLayout(spec.layout, spec.fuse_relu);
  return h;
}

std::string What(const BatchNormSpec& spec) {
  return "batch norm of " + DimsToString(spec.x_dims) + " in " + ActLayoutName(spec.layout) +
         (spec.fuse_relu ? " with relu" : "");
}

std::shared_ptr<const PrimitiveEntry> Entry(const BatchNormHandler& h, const BatchNormSpec& spec) {
  std::shared_ptr<const PrimitiveEntry> e = h.acquired_entry();
  if (!e || !e->primitive) ThrowUnimplemented("oneDNN has no ", What(spec));
  if (spec.fuse_relu && static_cast<int64_t>(e->pd.workspace_desc().get_size()) > BatchNormReluMaskBytes(spec)) {
    ThrowUnimplemented("oneDNN's relu workspace for the ", What(spec), " needs ", e->pd.workspace_desc().get_size(),
                       " bytes, more than the ", BatchNormReluMaskBytes(spec), " of its mask");
  }
  return e;
}

// X's dims as the handler views them: [N, C, H * W, 1] (the same memory).
Dims ViewDims(const BatchNormSpec& spec) {
  const Dims& d = spec.x_dims;
  return {d[0], d[1], d[2] * d[3], 1};
}

// Y or dY reordered between plain and the kept layout, when it is plain.
std::optional<Reorder> PlainReorder(const BatchNormSpec& spec, const dnnl::memory::desc& kept, bool to_plain) {
  if (spec.y_layout != ActLayout::kPlain) return std::nullopt;
  const dnnl::memory::desc plain = onednn::PlainDesc(ViewDims(spec));
  const auto& eng = onednn::OneDnnHandler::Engine();
  dnnl::reorder::primitive_desc pd = to_plain
                                         ? dnnl::reorder::primitive_desc(eng, kept, eng, plain, onednn::OneDnnHandler::DefaultAttr())
                                         : dnnl::reorder::primitive_desc(eng, plain, eng, kept, onednn::OneDnnHandler::DefaultAttr());
  return Reorder{pd, dnnl::reorder(pd)};
}

// Resize's guard: the new X (argument 0, in the kept layout) with the
// channels the kernel was made for (N, H and W may change); then every
// argument's dims for that X. The spec of the new X in `resized`; "" when
// the dims pass, else what is wrong.
std::string BatchNormDimsMismatch(const BatchNormSpec& spec, const std::vector<Dims>& dims, bool backward,
                                  bool want_dscale, bool want_dbias, BatchNormSpec* resized) {
  const int64_t c = spec.x_dims[1];
  const Dims x = dims.empty() ? Dims{} : KeptLogicalDims(spec.layout, dims[0], c);
  if (x.empty() || Numel(x) <= 0) {
    return StrCat("X must be an [N, ", c, ", H, W] activation stored in ", ActLayoutName(spec.layout),
                  " without a zero dim, got ", dims.empty() ? std::string("none") : DimsToString(dims[0]));
  }
  *resized = spec;
  resized->x_dims = x;
  const Dims stored = ActStoredDims(spec.layout, x), y = ActStoredDims(spec.y_layout, x), channel = {c};
  const Dims mask = {BatchNormReluMaskBytes(*resized)};
  std::vector<Dims> want;
  if (backward) {
    want = {stored, channel, channel, channel, y};
    if (spec.fuse_relu) want.push_back(mask);
    want.push_back(stored);
    if (want_dscale) want.push_back(channel);
    if (want_dbias) want.push_back(channel);
  } else {
    want = {stored, channel, channel, channel, channel, y, channel, channel, channel, channel};
    if (spec.fuse_relu) want.push_back(mask);
  }
  return onednn_kernels::ArgDimsMismatch(dims, want);
}

std::string ReorderText(const BatchNormSpec& spec, const char* arg, bool out) {
  if (spec.y_layout != ActLayout::kPlain) return std::string(", ") + arg + " kept";
  return std::string("; reorders ") + arg + (out ? " to nchw" : " from nchw");
}

class BatchNormKernel final : public runtime::Kernel {
 public:
  BatchNormKernel(const BatchNormSpec& spec, const onednn::Settings& settings, std::string name)
      : name_(std::move(name)), spec_(spec), settings_(settings) {
    auto h = HandlerOf(spec, settings);
    h->AcquireForwardPrimitive();
    entry_ = Entry(*h, spec);
    data_md_ = h->DataDesc();
    reorder_ = PlainReorder(spec, data_md_, /*to_plain=*/true);
  }
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN batch norm forward (" + entry_->impl + "), X in " + ActLayoutName(spec_.layout) +
           (spec_.fuse_relu ? ", relu fused (its mask kept for the backward)" : "") + ReorderText(spec_, "dst", true);
  }
  // X of a new N, H, W: the primitive of those dims from the global cache.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    BatchNormSpec spec;
    const std::string bad = BatchNormDimsMismatch(spec_, dims, false, false, false, &spec);
    if (!bad.empty()) return onednn_kernels::Refuse(name_, bad, why);
    return onednn_kernels::Remake(name_, [&] { return std::make_shared<BatchNormKernel>(spec, settings_, name_); },
                                  why);
  }
  // args: X, Scale, Bias, Mean, Variance -> Y, MeanOut, VarianceOut,
  // SavedMean, SavedVariance[, mask].
  void Run(const runtime::BufferView* args) const override {
    const int64_t c = spec_.x_dims[1];
    const dnnl::memory::desc channel = onednn::PlainDesc({c});
    Allocation mean(c * sizeof(float)), var(c * sizeof(float));
    std::optional<Allocation> y;
    if (reorder_) y.emplace(data_md_.get_size());
    void* y_kept = y ? y->ptr() : args[5].data;
    ExecArgs a = {{DNNL_ARG_SRC, Bind(data_md_, args[0].data)}, {DNNL_ARG_DST, Bind(data_md_, y_kept)},
                  {DNNL_ARG_SCALE, Bind(channel, args[1].data)}, {DNNL_ARG_SHIFT, Bind(channel, args[2].data)},
                  {DNNL_ARG_MEAN, Bind(channel, mean.ptr())},    {DNNL_ARG_VARIANCE, Bind(channel, var.ptr())}};
    if (spec_.fuse_relu) a[DNNL_ARG_WORKSPACE] = Bind(entry_->pd.workspace_desc(), args[10].data);
    onednn::ExecuteEntry(*entry_, std::move(a));
    if (reorder_) {
      onednn::ExecutePrimitive(reorder_->p, reorder_->pd,
                               {{DNNL_ARG_FROM, Bind(data_md_, y_kept)},
                                {DNNL_ARG_TO, Bind(onednn::PlainDesc(ViewDims(spec_)), args[5].data)}},
                               entry_->threads);
    }
    UpdateStatistics(static_cast<const float*>(mean.ptr()), static_cast<const float*>(var.ptr()), args);
  }
  // The entry's, then Y's from the kept layout into plain NCHW.
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView*) const override {
    std::vector<onednn::ReorderNote> notes = onednn::EntryReorders(*entry_);
    if (reorder_) notes.push_back(reorder_->Note(DNNL_ARG_DST, /*output=*/true, *entry_));
    return notes;
  }

 private:
  // As the op defines them (batch_norm_kernels.h); MeanOut and VarianceOut
  // may be Mean and Variance: each channel is read before it is written.
  void UpdateStatistics(const float* mean, const float* var, const runtime::BufferView* args) const {
    const Dims& d = spec_.x_dims;
    const double m = static_cast<double>(d[0] * d[2] * d[3]), momentum = spec_.momentum;
    const auto* old_mean = static_cast<const float*>(args[3].data);
    const auto* old_var = static_cast<const float*>(args[4].data);
    auto* mean_out = static_cast<float*>(args[6].data);
    auto* var_out = static_cast<float*>(args[7].data);
    auto* saved_mean = static_cast<float*>(args[8].data);
    auto* saved_inv_std = static_cast<float*>(args[9].data);
    for (int64_t ch = 0; ch < d[1]; ++ch) {
      const double om = old_mean[ch], ov = old_var[ch];
      mean_out[ch] = static_cast<float>(momentum * om + (1 - momentum) * mean[ch]);
      var_out[ch] = static_cast<float>(momentum * ov + (1 - momentum) * (static_cast<double>(var[ch]) * m / (m - 1)));
      saved_mean[ch] = mean[ch];
      saved_inv_std[ch] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[ch]) + spec_.epsilon));
    }
  }

  std::string name_;
  BatchNormSpec spec_;
  onednn::Settings settings_;
  std::shared_ptr<const PrimitiveEntry> entry_;
  dnnl::memory::desc data_md_;
  std::optional<Reorder> reorder_;
};

class BatchNormGradKernel final : public runtime::Kernel {
 public:
  BatchNormGradKernel(const BatchNormSpec& spec, bool want_dscale, bool want_dbias, const onednn::Settings& settings,
                      std::string name)
      : name_(std::move(name)), spec_(spec), settings_(settings), want_dscale_(want_dscale), want_dbias_(want_dbias) {
    auto h = HandlerOf(spec, settings);
    h->AcquireBackwardPrimitive();
    entry_ = Entry(*h, spec);
    data_md_ = h->DataDesc();
    reorder_ = PlainReorder(spec, data_md_, /*to_plain=*/false);
  }
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN batch norm backward (" + entry_->impl + "), X and dX in " + ActLayoutName(spec_.layout) +
           (spec_.fuse_relu ? ", relu's gradient from the forward's mask" : "") +
           ReorderText(spec_, "diff_dst", false);
  }
  // X of a new N, H, W: the primitive of those dims from the global cache.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    BatchNormSpec spec;
    const std::string bad = BatchNormDimsMismatch(spec_, dims, true, want_dscale_, want_dbias_, &spec);
    if (!bad.empty()) return onednn_kernels::Refuse(name_, bad, why);
    return onednn_kernels::Remake(name_, [&] {
      return std::make_shared<BatchNormGradKernel>(spec, want_dscale_, want_dbias_, settings_, name_);
    }, why);
  }
  // args: X, Scale, SavedMean, SavedVariance, dY[, mask] -> dX[, dScale][, dBias].
  void Run(const runtime::BufferView* args) const override {
    const int64_t c = spec_.x_dims[1];
    const dnnl::memory::desc channel = onednn::PlainDesc({c});
    const int in = spec_.fuse_relu ? 6 : 5;
    // The variance behind SavedVariance = 1/sqrt(var + eps), in double:
    // oneDNN adds eps back, so var + eps is 1/r^2 within float rounding.
    Allocation var(c * sizeof(float)), shift(c * sizeof(float));
    const auto* r = static_cast<const float*>(args[3].data);
    for (int64_t ch = 0; ch < c; ++ch) {
      const double rr = r[ch];
      static_cast<float*>(var.ptr())[ch] = static_cast<float>(1.0 / (rr * rr) - spec_.epsilon);
    }
    // oneDNN 2.6 wants a shift bound to run a use_shift backward though no
    // gradient depends on it (batch_norm_handler.cc); zeros.
    std::memset(shift.ptr(), 0, c * sizeof(float));
    std::optional<Allocation> dy, dscale, dbias;
    if (reorder_) {
      dy.emplace(data_md_.get_size());
      onednn::ExecutePrimitive(reorder_->p, reorder_->pd,
                               {{DNNL_ARG_FROM, Bind(onednn::PlainDesc(ViewDims(spec_)), args[4].data)},
                                {DNNL_ARG_TO, Bind(data_md_, dy->ptr())}},
                               entry_->threads);
    }
    if (!want_dscale_) dscale.emplace(c * sizeof(float));
    if (!want_dbias_) dbias.emplace(c * sizeof(float));
    int out = in + 1;
    void* ds = want_dscale_ ? args[out++].data : dscale->ptr();
    void* db = want_dbias_ ? args[out].data : dbias->ptr();
    ExecArgs a = {{DNNL_ARG_SRC, Bind(data_md_, args[0].data)},
                  {DNNL_ARG_DIFF_DST, Bind(data_md_, dy ? dy->ptr() : args[4].data)},
                  {DNNL_ARG_MEAN, Bind(channel, args[2].data)},
                  {DNNL_ARG_VARIANCE, Bind(channel, var.ptr())},
                  {DNNL_ARG_SCALE, Bind(channel, args[1].data)},
                  {DNNL_ARG_SHIFT, Bind(channel, shift.ptr())},
                  {DNNL_ARG_DIFF_SRC, Bind(data_md_, args[in].data)},
                  {DNNL_ARG_DIFF_SCALE, Bind(channel, ds)},
                  {DNNL_ARG_DIFF_SHIFT, Bind(channel, db)}};
    if (spec_.fuse_relu) a[DNNL_ARG_WORKSPACE] = Bind(entry_->pd.workspace_desc(), args[5].data);
    onednn::ExecuteEntry(*entry_, std::move(a));
  }
  // dY's from plain NCHW into the kept layout, then the entry's.
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView*) const override {
    std::vector<onednn::ReorderNote> notes;
    if (reorder_) notes.push_back(reorder_->Note(DNNL_ARG_DIFF_DST, /*output=*/false, *entry_));
    for (onednn::ReorderNote& r : onednn::EntryReorders(*entry_)) notes.push_back(std::move(r));
    return notes;
  }

 private:
  std::string name_;
  BatchNormSpec spec_;
  onednn::Settings settings_;
  bool want_dscale_ = false, want_dbias_ = false;
  std::shared_ptr<const PrimitiveEntry> entry_;
  dnnl::memory::desc data_md_;
  std::optional<Reorder> reorder_;
};

}  // namespace

int64_t BatchNormReluMaskBytes(ActLayout layout, const Dims& x_dims) {
  return (Numel(ActStoredDims(layout, x_dims)) + 7) / 8;
}
int64_t BatchNormReluMaskBytes(const BatchNormSpec& spec) { return BatchNormReluMaskBytes(spec.layout, spec.x_dims); }

bool BatchNormReluFits(const BatchNormSpec& spec, const onednn::Settings& settings) {
  if (!spec.fuse_relu) return false;
  try {
    auto h = HandlerOf(spec, settings);
    h->AcquireForwardPrimitive();
    Entry(*h, spec);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::shared_ptr<const runtime::Kernel> MakeBatchNormKernel(const BatchNormSpec& spec, const onednn::Settings& settings,
                                                           const std::string& name) {
  try {
    return std::make_shared<BatchNormKernel>(spec, settings, name);
  } catch (const dnnl::error& e) {
    ThrowUnimplemented("oneDNN cannot make the ", What(spec), ": ", e.what());
  }
}

std::shared_ptr<const runtime::Kernel> MakeBatchNormGradKernel(const BatchNormSpec& spec, bool want_dscale,
                                                               bool want_dbias, const onednn::Settings& settings,
                                                               const std::string& name) {
  try {
    return std::make_shared<BatchNormGradKernel>(spec, want_dscale, want_dbias, settings, name);
  } catch (const dnnl::error& e) {
    ThrowUnimplemented("oneDNN cannot make the gradient of the ", What(spec), ": ", e.what());
  }
}

}  // namespace kiln::jit
