// The fused convolution and the convolution gradient kernels
// (onednn_kernels.h), and their Resize: the primitives of the new input dims
// from the global primitive cache.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernel_util.h"

namespace kiln::jit {
namespace {

using namespace onednn_kernels;  // NOLINT: the helpers of the oneDNN kernels
using onednn::PrimitiveEntry;

std::string ConvShapes(const FusedConvSpec& spec) {
  return "input " + DimsToString(spec.input_dims) + " filter " + DimsToString(spec.filter_dims) + " strides " +
         DimsToString(spec.strides) + " paddings " + DimsToString(spec.paddings) + " dilations " +
         DimsToString(spec.dilations) + " groups " + std::to_string(spec.groups) +
         (spec.src_layout != ActLayout::kPlain ? std::string(" input in ") + ActLayoutName(spec.src_layout) : "") +
         (spec.dst_layout != ActLayout::kPlain ? std::string(" output ") + ActLayoutName(spec.dst_layout) : "") +
         (spec.dinput_layout != ActLayout::kPlain ? std::string(" dInput in ") + ActLayoutName(spec.dinput_layout)
                                                  : "");
}

// The handler of `spec` (with its fusion when `fused`); throws when the dims
// do not make a convolution.
std::unique_ptr<onednn::ConvHandler> ConvHandlerOf(const FusedConvSpec& spec, const onednn::Settings& settings,
                                                   bool fused) {
  auto h = std::make_unique<onednn::ConvHandler>(
      onednn::PrimitiveCache::Global(), settings, spec.input_dims, spec.filter_dims, spec.strides, spec.paddings,
      spec.dilations, spec.groups, fused ? Fusion(spec.bias, spec.activation) : onednn::FusedOps{}, spec.compute);
  if (!h->valid()) {
    ThrowInvalidArgument("oneDNN convolution: ", ConvShapes(spec),
                         " do not make a 2-D convolution: expected input [N,C,H,W], filter [O,C/groups,KH,KW] with O "
                         "divisible by groups, 2 strides and dilations >= 1, 2 paddings >= 0, and a window that fits");
  }
  if (spec.dst_layout != ActLayout::kPlain) h->BindKept(spec.dst_layout);
  if (spec.src_layout != ActLayout::kPlain) {
    if (spec.compute != ComputeType::kF32) {
      ThrowInvalidArgument("oneDNN convolution: ", ConvShapes(spec), ": a kept input needs f32 compute");
    }
    h->BindKeptSrc(spec.src_layout);
  }
  if (spec.dinput_layout != ActLayout::kPlain) {
    if (spec.src_layout != ActLayout::kPlain) {
      ThrowInvalidArgument("oneDNN convolution: ", ConvShapes(spec), ": dInput is kept as Input when Input is kept");
    }
    h->BindKeptDiffSrc(spec.dinput_layout);
  }
  return h;
}

BoundEntry MakeFusedConv(const FusedConvSpec& spec, const onednn::Settings& settings) {
  auto h = ConvHandlerOf(spec, settings, /*fused=*/true);
  auto entry = AcquireEntry(*h, "convolution for " + ConvShapes(spec));
  return BoundEntry(entry, ForwardArgs(*entry, spec.bias));
}

// dInput = conv_backward_data(Filter, dY) and dFilter[, dBias] =
// conv_backward_weights(Input, dY): one or two cached entries.
// Resize's guard of a convolution: the new input [N, C, H, W] (stored in
// spec.src_layout) with the C it was made for (N, H and W may change) and a
// window that fits; "" with its [N, C, H, W] in `nchw` and its output's
// [N, O, OH, OW] in `out`, else what is wrong.
std::string ConvInputMismatch(const FusedConvSpec& spec, const Dims& stored, Dims* nchw, Dims* out) {
  const int64_t c = spec.input_dims[1];
  const Dims input = KeptLogicalDims(spec.src_layout, stored, c);
  if (input.empty() || Numel(input) <= 0) {
    return StrCat("Input must be [N, ", c, ", H, W] (the channels it was made for",
                  spec.src_layout != ActLayout::kPlain ? std::string(", stored in ") + ActLayoutName(spec.src_layout)
                                                       : std::string(),
                  ") without a zero dim, got ", DimsToString(stored));
  }
  *nchw = input;
  *out = {input[0], spec.filter_dims[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t window = spec.dilations[i] * (spec.filter_dims[2 + i] - 1) + 1;
    const int64_t span = input[2 + i] + 2 * spec.paddings[i] - window;
    if (span < 0) return StrCat("the ", window, "-wide window does not fit Input ", DimsToString(input));
    (*out)[2 + i] = span / spec.strides[i] + 1;
  }
  return "";
}

class ConvGradKernel final : public runtime::Kernel {
 public:
  ConvGradKernel(const FusedConvSpec& spec, const onednn::Settings& settings, bool want_dinput, bool want_dbias,
                 DataType dy_dtype, std::string name)
      : name_(std::move(name)),
        spec_(spec),
        settings_(settings),
        dy_dtype_(dy_dtype),
        want_dinput_(want_dinput),
        want_dbias_(want_dbias) {
    auto h = ConvHandlerOf(spec, settings, /*fused=*/false);
    if (dy_dtype != DataType::kFP32) {
      if (dy_dtype != DataType::kBF16 || spec.compute != ComputeType::kBF16) {
        ThrowInvalidArgument("oneDNN convolution gradient: dY as ", DataTypeName(dy_dtype),
                             " needs it bf16 under bf16 compute");
      }
      h->BindKept(spec.dst_layout, dy_dtype);
    }
    if (want_dbias) h->WithDiffBias();
    const std::string what = "convolution gradient for " + ConvShapes(spec);
    if (want_dinput) {
      h->AcquireBackwardData();
      data_.emplace(AcquiredEntry(*h, h->backward_key(), what),
                    std::vector<int>{DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC});
    }
    h->AcquireBackwardWeights();
    std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
    if (want_dbias) args.push_back(DNNL_ARG_DIFF_BIAS);
    weights_.emplace(AcquiredEntry(*h, h->backward_key(), what), args);
  }
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    std::string s = "oneDNN convolution gradients: ";
    if (data_) s += "data (" + data_->impl() + data_->ReorderText() + "), ";
    return s + "weights" + std::string(want_dbias_ ? " and bias" : "") + " (" + weights_->impl() +
           weights_->ReorderText() + ")";
  }
  // Input, dY and dInput of new N, H, W: the primitives of those dims.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    Dims in, out;
    std::string bad = dims.empty() ? "no argument dims" : ConvInputMismatch(spec_, dims[0], &in, &out);
    if (bad.empty()) {
      std::vector<Dims> want = {{}, spec_.filter_dims, ActStoredDims(spec_.dst_layout, out)};
      if (want_dinput_) {
        want.push_back(spec_.dinput_layout != ActLayout::kPlain ? ActStoredDims(spec_.dinput_layout, in) : dims[0]);
      }
      want.push_back(spec_.filter_dims);
      if (want_dbias_) want.push_back({spec_.filter_dims[0]});
      bad = ArgDimsMismatch(dims, want);
    }
    if (!bad.empty()) return Refuse(name_, bad, why);
    FusedConvSpec spec = spec_;
    spec.input_dims = in;
    return Remake(name_, [&] {
      return std::make_shared<ConvGradKernel>(spec, settings_, want_dinput_, want_dbias_, dy_dtype_, name_);
    }, why);
  }
  // args: Input, Filter, dY, [dInput,] dFilter[, dBias].
  void Run(const runtime::BufferView* args) const override { RunWithScratch(args, nullptr); }
  // The two passes run one after the other: one scratch serves both.
  size_t ScratchBytes() const override {
    return std::max(data_ ? data_->ScratchBytes() : 0, weights_->ScratchBytes());
  }
  void RunWithScratch(const runtime::BufferView* args, void* scratch) const override {
    const size_t out = want_dinput_ ? 4 : 3;
    if (data_) {
      const runtime::BufferView bound[3] = {args[1], args[2], args[3]};
      data_->Run(bound, scratch);
    }
    runtime::BufferView bound[4] = {args[0], args[2], args[out], {}};
    if (want_dbias_) bound[3] = args[out + 1];
    weights_->Run(bound, scratch);
  }
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView*) const override {
    std::vector<onednn::ReorderNote> notes = data_ ? data_->Reorders() : std::vector<onednn::ReorderNote>{};
    for (onednn::ReorderNote& r : weights_->Reorders()) notes.push_back(std::move(r));
    return notes;
  }

 private:
  std::string name_;
  FusedConvSpec spec_;
  onednn::Settings settings_;
  DataType dy_dtype_;
  bool want_dinput_ = false;
  bool want_dbias_ = false;
  std::optional<BoundEntry> data_, weights_;
};

class FusedConvKernel final : public runtime::Kernel {
 public:
  FusedConvKernel(const FusedConvSpec& spec, const onednn::Settings& settings, std::string name)
      : name_(std::move(name)), spec_(spec), settings_(settings), bound_(MakeFusedConv(spec, settings)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN convolution (" + bound_.impl() + bound_.ReorderText() + ")" + ComputeSuffix(spec_.compute) +
           FusionSuffix(spec_.bias, spec_.activation);
  }
  void Run(const runtime::BufferView* args) const override { bound_.Run(args); }
  size_t ScratchBytes() const override { return bound_.ScratchBytes(); }
  void RunWithScratch(const runtime::BufferView* args, void* scratch) const override { bound_.Run(args, scratch); }
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView*) const override { return bound_.Reorders(); }
  // Input and Output of new N, H, W: the primitive of those dims, Output in
  // the layout it was made for (a reorder when the new primitive prefers
  // another).
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    Dims in, out;
    std::string bad = dims.empty() ? "no argument dims" : ConvInputMismatch(spec_, dims[0], &in, &out);
    if (bad.empty()) {
      std::vector<Dims> want = {{}, spec_.filter_dims};
      if (spec_.bias) want.push_back({spec_.filter_dims[0]});
      want.push_back(ActStoredDims(spec_.dst_layout, out));
      bad = ArgDimsMismatch(dims, want);
    }
    if (!bad.empty()) return Refuse(name_, bad, why);
    FusedConvSpec spec = spec_;
    spec.input_dims = in;
    return Remake(name_, [&] { return std::make_shared<FusedConvKernel>(spec, settings_, name_); }, why);
  }

 private:
  std::string name_;
  FusedConvSpec spec_;
  onednn::Settings settings_;
  BoundEntry bound_;
};

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeFusedConvKernel(const FusedConvSpec& spec, const onednn::Settings& settings,
                                                           const std::string& name) {
  return std::make_shared<FusedConvKernel>(spec, settings, name);
}

ActLayout ConvForwardDstLayout(const FusedConvSpec& spec, const onednn::Settings& settings) {
  FusedConvSpec plain = spec;
  plain.dst_layout = ActLayout::kPlain;
  plain.src_layout = ActLayout::kPlain;
  return ConvHandlerOf(plain, settings, /*fused=*/true)->ForwardDstLayout();
}

ActLayout ConvForwardSrcLayout(const FusedConvSpec& spec, const onednn::Settings& settings) {
  FusedConvSpec plain = spec;
  plain.dst_layout = ActLayout::kPlain;
  plain.src_layout = ActLayout::kPlain;
  return ConvHandlerOf(plain, settings, /*fused=*/true)->ForwardSrcLayout();
}

ActLayout ConvBackwardDInputLayout(const FusedConvSpec& spec, const onednn::Settings& settings) {
  FusedConvSpec plain = spec;
  plain.src_layout = ActLayout::kPlain;
  plain.dinput_layout = ActLayout::kPlain;
  return ConvHandlerOf(plain, settings, /*fused=*/false)->BackwardDataDiffSrcLayout();
}

std::shared_ptr<const runtime::Kernel> MakeConvGradKernel(const FusedConvSpec& conv, bool want_dinput, bool want_dbias,
                                                          const onednn::Settings& settings, const std::string& name,
                                                          DataType dy_dtype) {
  return std::make_shared<ConvGradKernel>(conv, settings, want_dinput, want_dbias, dy_dtype, name);
}

}  // namespace kiln::jit
