#include "compiler/kernels/onednn/onednn_kernels.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "dnnl.hpp"
#include "framework/error.h"
#include "framework/onednn/handlers.h"

namespace kiln::jit {
namespace {

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

// " in bf16 (f32 accumulation)" for bf16 compute: part of a Describe() line.
std::string ComputeSuffix(ComputeType compute) {
  return compute == ComputeType::kBF16 ? " in bf16 (f32 accumulation)" : "";
}

// " + bias + relu post-op": the tail of a Describe() line.
std::string FusionSuffix(bool bias, MatmulActivation activation) {
  std::string s = bias ? " + bias" : "";
  if (activation == MatmulActivation::kRelu) s += " + relu post-op";
  if (activation == MatmulActivation::kGelu) s += " + gelu_erf post-op";
  if (activation == MatmulActivation::kGeluTanh) s += " + gelu_tanh post-op";
  return s;
}

// The entry `h` acquired last (its key `key`). Compiled code takes the
// implementation oneDNN has even when the framework would call it slow (the
// dump names it; Acquire*Primitive returned false for it); only a missing
// one is an error.
std::shared_ptr<const PrimitiveEntry> AcquiredEntry(const onednn::OneDnnHandler& h, const onednn::PrimitiveKey& key,
                                                    const std::string& what) {
  std::shared_ptr<const PrimitiveEntry> entry = h.acquired_entry();
  if (!entry || !entry->primitive) ThrowUnimplemented("oneDNN has no ", what, " (", key.ToString(), ")");
  return entry;
}

// The forward entry of `h` from the global cache.
std::shared_ptr<const PrimitiveEntry> AcquireEntry(onednn::OneDnnHandler& h, const std::string& what) {
  h.AcquireForwardPrimitive();
  return AcquiredEntry(h, h.forward_key(), what);
}

dnnl::memory Bind(const dnnl::memory::desc& md, void* data) {
  return dnnl::memory(md, onednn::OneDnnHandler::Engine(), data);
}

const char* ArgName(int arg) {
  switch (arg) {
    case DNNL_ARG_SRC: return "src";
    case DNNL_ARG_WEIGHTS: return "weights";
    case DNNL_ARG_DST: return "dst";
    case DNNL_ARG_DIFF_SRC: return "diff_src";
    case DNNL_ARG_DIFF_WEIGHTS: return "diff_weights";
    case DNNL_ARG_DIFF_DST: return "diff_dst";
    default: return "another argument";
  }
}

// A cached entry with, for each kernel argument in order, the oneDNN argument
// it binds and the descriptor of its buffer (plain, or a kept layout).
class BoundEntry {
 public:
  BoundEntry(std::shared_ptr<const PrimitiveEntry> entry, const std::vector<int>& dnnl_args)
      : entry_(std::move(entry)) {
    for (int arg : dnnl_args) args_.emplace_back(arg, onednn::UserDesc(*entry_, arg));
  }
  const std::string& impl() const { return entry_->impl; }
  // "; reorders src, weights": the arguments the entry moves between the
  // bound buffer's layout and its primitive's ("" when none).
  std::string ReorderText() const {
    std::string s;
    for (const auto& r : entry_->reorders) s += std::string(s.empty() ? "; reorders " : ", ") + ArgName(r.arg);
    return s;
  }
  void Run(const runtime::BufferView* bound) const {
    ExecArgs args;
    for (size_t i = 0; i < args_.size(); ++i) args[args_[i].first] = Bind(args_[i].second, bound[i].data);
    onednn::ExecuteEntry(*entry_, std::move(args));
  }

 private:
  std::shared_ptr<const PrimitiveEntry> entry_;
  std::vector<std::pair<int, dnnl::memory::desc>> args_;
};

// Src, weights[, bias], dst: a forward's kernel arguments.
std::vector<int> ForwardArgs(const PrimitiveEntry& entry, bool bias) {
  std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS};
  if (bias) args.push_back(entry.bias_arg);
  args.push_back(DNNL_ARG_DST);
  return args;
}

// [..., K] -> [M, K] with M the product of the leading dims.
Dims FoldRows(const Dims& dims, const char* what) {
  if (dims.empty() || dims.back() <= 0 || Numel(dims) <= 0) {
    ThrowInvalidArgument("oneDNN matmul: expected ", what, " [..., K] with K > 0 and no zero dim, got ",
                         DimsToString(dims));
  }
  return {Numel(dims) / dims.back(), dims.back()};
}

BoundEntry MakeFusedMatmul(const FusedMatmulSpec& spec, const onednn::Settings& settings) {
  onednn::MatmulHandler h(onednn::PrimitiveCache::Global(), settings, FoldRows(spec.x_dims, "x"), false, spec.w_dims,
                          spec.transpose_w, spec.alpha, Fusion(spec.bias, spec.activation), spec.compute,
                          spec.w_dtype, spec.x_dtype);
  const std::string shapes = "x " + DimsToString(spec.x_dims) + " w " + DimsToString(spec.w_dims) +
                             (spec.transpose_w ? " (transposed)" : "") +
                             (spec.w_dtype != DataType::kFP32 ? std::string(" ") + DataTypeName(spec.w_dtype) : "") +
                             (spec.x_dtype != DataType::kFP32 ? std::string(" x ") + DataTypeName(spec.x_dtype) : "");
  if (!h.valid() || h.dst_dims().size() != 2) {
    const std::string k = std::to_string(spec.x_dims.back());
    ThrowInvalidArgument("oneDNN matmul: ", shapes, " do not multiply: expected w ",
                         spec.transpose_w ? "[N," + k + "]" : "[" + k + ",N]");
  }
  auto entry = AcquireEntry(h, "matmul for " + shapes);
  return BoundEntry(entry, ForwardArgs(*entry, spec.bias));
}

class FusedMatmulKernel final : public runtime::Kernel {
 public:
  FusedMatmulKernel(const FusedMatmulSpec& spec, const onednn::Settings& settings, std::string name)
      : name_(std::move(name)), spec_(spec), bound_(MakeFusedMatmul(spec, settings)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN matmul (" + bound_.impl() + ")" + ComputeSuffix(spec_.compute) +
           (spec_.w_dtype == DataType::kBF16 ? ", W a bf16 copy" : "") +
           (spec_.x_dtype == DataType::kBF16 ? ", X stored in bf16" : "") + FusionSuffix(spec_.bias, spec_.activation);
  }
  void Run(const runtime::BufferView* args) const override { bound_.Run(args); }

 private:
  std::string name_;
  FusedMatmulSpec spec_;
  BoundEntry bound_;
};

// Below this many floats a loop runs on the calling thread alone.
constexpr int64_t kParallelMinFloats = 1 << 16;

// out[i] = scale * in[i], over the OpenMP threads for large n.
void ScaleInto(float* out, const float* in, float scale, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinFloats)
  for (int64_t i = 0; i < n; ++i) out[i] = scale * in[i];
}

// memcpy of n floats, split over the OpenMP threads for large n.
void CopyFloats(void* out, const void* in, int64_t n) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinFloats)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    std::memcpy(static_cast<float*>(out) + begin, static_cast<const float*>(in) + begin, count * sizeof(float));
  }
}

class MatmulSgdKernel final : public runtime::Kernel {
 public:
  MatmulSgdKernel(const Dims& x_dims, const Dims& w_dims, const onednn::Settings& settings, bool keep_old,
                  ComputeType compute, Isa isa, DataType dy_dtype, std::string name)
      : name_(std::move(name)), keep_old_(keep_old), compute_(compute), dy_bf16_(dy_dtype == DataType::kBF16) {
    const Dims x = FoldRows(x_dims, "x");
    if (w_dims.size() != 2 || w_dims[0] != x[1] || w_dims[1] <= 0) {
      ThrowInvalidArgument("oneDNN matmul sgd: x ", DimsToString(x_dims), " expects w [", x[1], ",N], got ",
                           DimsToString(w_dims));
    }
    x_numel_ = x[0] * x[1];
    dy_numel_ = x[0] * w_dims[1];
    w_numel_ = Numel(w_dims);
    scale_x_ = MatmulSgdScalesX(x_dims, w_dims, dy_dtype);
    if (dy_bf16_ && compute != ComputeType::kBF16) ThrowInvalidArgument("oneDNN matmul sgd: a bf16 dY needs bf16 compute");
    // bf16: the scaled operand is made in bf16 directly (bound as it is).
    const bool bf16 = compute == ComputeType::kBF16;
    const DataType scaled = bf16 ? DataType::kBF16 : DataType::kFP32;
    if (bf16) {
      scale_to_bf16_ = MakeToBf16Kernel(scale_x_ ? x_numel_ : dy_numel_, /*scaled=*/true, isa, name_ + "_scale");
    }
    // src = X^T [K, M] (X stored [M, K]), weights = dY [M, N], dst = W [K, N].
    // The learning rate is a tensor read at run time. A run-time output scale
    // makes oneDNN 2.6 drop from brgemm to its generic jit gemm (measured
    // 2-30x slower here), so lr scales a copy of X or dY (Run) and the fixed
    // scale -1 subtracts.
    onednn::FusedOps fused;
    fused.post_ops.push_back(onednn::PostOp::Sum(1.f));  // dst = scale * (src @ weights) + dst
    const DataType b_dtype = dy_bf16_ ? DataType::kBF16 : scale_x_ ? DataType::kFP32 : scaled;  // dY
    const DataType a_dtype = scale_x_ ? scaled : DataType::kFP32;                                 // X^T
    onednn::MatmulHandler h(onednn::PrimitiveCache::Global(), settings, x, /*trans_a=*/true, {x[0], w_dims[1]}, false,
                            -1.f, fused, compute, b_dtype, a_dtype);
    if (!h.valid()) ThrowInvalidArgument("oneDNN matmul sgd: no product for w ", DimsToString(w_dims));
    entry_ = AcquireEntry(h, "matmul for the update of w " + DimsToString(w_dims));
    src_md_ = onednn::UserDesc(*entry_, DNNL_ARG_SRC);
    wei_md_ = onednn::UserDesc(*entry_, DNNL_ARG_WEIGHTS);
    dst_md_ = onednn::UserDesc(*entry_, DNNL_ARG_DST);
  }
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN matmul (" + entry_->impl + ")" + ComputeSuffix(compute_) +
           " W -= lr * X^T dY: weight gradient and sgd step in one primitive" +
           (scale_to_bf16_ ? std::string(", lr * ") + (scale_x_ ? "X" : "dY") + " rounded to bf16 by " +
                                 IsaName(scale_to_bf16_->isa()) + " generated code"
                           : std::string()) +
           (dy_bf16_ ? ", dY stored in bf16" : "") +
           (keep_old_ ? std::string(", the old W copied out first for dX") : std::string());
  }
  void Run(const runtime::BufferView* args) const override {
    // lr scales a copy of the smaller operand (X or dY; in bf16 under bf16
    // compute) into the scaled-operand buffer (MatmulSgdScratch), a temp the
    // arena plan places like any other. Scaling and copying run on every
    // thread: serial, a [1024, 1024] dY cost the 2-thread transformer step 0.35 ms.
    const bool scale_x = scale_x_;
    const int64_t n = scale_x ? x_numel_ : dy_numel_;
    void* s = args[keep_old_ ? 5 : 4].data;
    if (scale_to_bf16_) {
      const void* in[] = {args[scale_x ? 0 : 1].data, args[2].data};
      void* out[] = {s};
      scale_to_bf16_->Run(in, out);
    } else {
      const float lr = *static_cast<const float*>(args[2].data);
      ScaleInto(static_cast<float*>(s), static_cast<const float*>(args[scale_x ? 0 : 1].data), lr, n);
    }
    // args[3] is W as read, the last arg W as written: one buffer (in place).
    // With keep_old, args[4] receives W before the step; the scaled operand
    // comes next.
    if (keep_old_) CopyFloats(args[4].data, args[3].data, w_numel_);
    ExecArgs exec_args = {
        {DNNL_ARG_SRC, Bind(src_md_, scale_x ? s : args[0].data)},
        {DNNL_ARG_WEIGHTS, Bind(wei_md_, scale_x ? args[1].data : s)},
        {DNNL_ARG_DST, Bind(dst_md_, args[keep_old_ ? 6 : 5].data)},
    };
    onednn::ExecuteEntry(*entry_, std::move(exec_args));
  }

 private:
  std::string name_;
  bool keep_old_ = false;
  ComputeType compute_ = ComputeType::kF32;
  int64_t x_numel_ = 0;
  int64_t dy_numel_ = 0;
  int64_t w_numel_ = 0;
  bool scale_x_ = false;
  bool dy_bf16_ = false;
  std::unique_ptr<jit::FusedElementwiseKernel> scale_to_bf16_;  // bf16 compute
  std::shared_ptr<const PrimitiveEntry> entry_;
  dnnl::memory::desc src_md_, wei_md_, dst_md_;
};

std::string ConvShapes(const FusedConvSpec& spec) {
  return "input " + DimsToString(spec.input_dims) + " filter " + DimsToString(spec.filter_dims) + " strides " +
         DimsToString(spec.strides) + " paddings " + DimsToString(spec.paddings) + " dilations " +
         DimsToString(spec.dilations) + " groups " + std::to_string(spec.groups) +
         (spec.dst_layout != ActLayout::kPlain ? std::string(" output ") + ActLayoutName(spec.dst_layout) : "");
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
  return h;
}

BoundEntry MakeFusedConv(const FusedConvSpec& spec, const onednn::Settings& settings) {
  auto h = ConvHandlerOf(spec, settings, /*fused=*/true);
  auto entry = AcquireEntry(*h, "convolution for " + ConvShapes(spec));
  return BoundEntry(entry, ForwardArgs(*entry, spec.bias));
}

// dInput = conv_backward_data(Filter, dY) and dFilter[, dBias] =
// conv_backward_weights(Input, dY): one or two cached entries.
class ConvGradKernel final : public runtime::Kernel {
 public:
  ConvGradKernel(const FusedConvSpec& spec, const onednn::Settings& settings, bool want_dinput, bool want_dbias,
                 DataType dy_dtype, std::string name)
      : name_(std::move(name)), want_dinput_(want_dinput), want_dbias_(want_dbias) {
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
  // args: Input, Filter, dY, [dInput,] dFilter[, dBias].
  void Run(const runtime::BufferView* args) const override {
    const size_t out = want_dinput_ ? 4 : 3;
    if (data_) {
      const runtime::BufferView bound[3] = {args[1], args[2], args[3]};
      data_->Run(bound);
    }
    runtime::BufferView bound[4] = {args[0], args[2], args[out], {}};
    if (want_dbias_) bound[3] = args[out + 1];
    weights_->Run(bound);
  }

 private:
  std::string name_;
  bool want_dinput_ = false;
  bool want_dbias_ = false;
  std::optional<BoundEntry> data_, weights_;
};

class FusedConvKernel final : public runtime::Kernel {
 public:
  FusedConvKernel(const FusedConvSpec& spec, const onednn::Settings& settings, std::string name)
      : name_(std::move(name)), spec_(spec), bound_(MakeFusedConv(spec, settings)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN convolution (" + bound_.impl() + bound_.ReorderText() + ")" + ComputeSuffix(spec_.compute) +
           FusionSuffix(spec_.bias, spec_.activation);
  }
  void Run(const runtime::BufferView* args) const override { bound_.Run(args); }

 private:
  std::string name_;
  FusedConvSpec spec_;
  BoundEntry bound_;
};

}  // namespace

bool MatmulSgdScalesX(const Dims& x_dims, const Dims& w_dims, DataType dy_dtype) {
  // A bf16 dY is bound as it comes: lr scales X then.
  const int64_t rows = w_dims.empty() || Numel(x_dims) == 0 ? 0 : Numel(x_dims) / x_dims.back();
  return dy_dtype == DataType::kBF16 || Numel(x_dims) < rows * (w_dims.size() == 2 ? w_dims[1] : 0);
}

MatmulSgdScratch MatmulSgdScratchOf(const Dims& x_dims, const Dims& w_dims, ComputeType compute, DataType dy_dtype) {
  const bool scale_x = MatmulSgdScalesX(x_dims, w_dims, dy_dtype);
  const int64_t rows = x_dims.empty() || x_dims.back() == 0 ? 0 : Numel(x_dims) / x_dims.back();
  return {scale_x ? Numel(x_dims) : rows * (w_dims.size() == 2 ? w_dims[1] : 0),
          compute == ComputeType::kBF16 ? DataType::kBF16 : DataType::kFP32};
}

std::shared_ptr<const runtime::Kernel> MakeMatmulSgdKernel(const Dims& x_dims, const Dims& w_dims,
                                                           const onednn::Settings& settings, const std::string& name,
                                                           bool keep_old, ComputeType compute, Isa isa,
                                                           DataType dy_dtype) {
  return std::make_shared<MatmulSgdKernel>(x_dims, w_dims, settings, keep_old, compute, isa, dy_dtype, name);
}

std::shared_ptr<const runtime::Kernel> MakeFusedMatmulKernel(const FusedMatmulSpec& spec,
                                                             const onednn::Settings& settings,
                                                             const std::string& name) {
  return std::make_shared<FusedMatmulKernel>(spec, settings, name);
}

std::shared_ptr<const runtime::Kernel> MakeFusedConvKernel(const FusedConvSpec& spec, const onednn::Settings& settings,
                                                           const std::string& name) {
  return std::make_shared<FusedConvKernel>(spec, settings, name);
}

ActLayout ConvForwardDstLayout(const FusedConvSpec& spec, const onednn::Settings& settings) {
  FusedConvSpec plain = spec;
  plain.dst_layout = ActLayout::kPlain;
  return ConvHandlerOf(plain, settings, /*fused=*/true)->ForwardDstLayout();
}

std::shared_ptr<const runtime::Kernel> MakeConvGradKernel(const FusedConvSpec& conv, bool want_dinput, bool want_dbias,
                                                          const onednn::Settings& settings, const std::string& name,
                                                          DataType dy_dtype) {
  return std::make_shared<ConvGradKernel>(conv, settings, want_dinput, want_dbias, dy_dtype, name);
}

std::unique_ptr<FusedElementwiseKernel> MakeToBf16Kernel(int64_t n, bool scaled, Isa isa, const std::string& name) {
  EwProgram p;
  // The scale is a broadcast input: a [1] buffer read at run time.
  p.Store(0, scaled ? p.Mul(p.Load(0), p.Load(1)) : p.Load(0));
  EwLayout l = scaled ? CollapseLayout({n}, {{n}, {1}}, {{n}}) : CollapseLayout({n}, {{n}}, {{n}});
  l.outputs[0].elem = EwElem::kBF16;
  auto k = std::make_unique<FusedElementwiseKernel>(name, p, l, isa);
  k->Create();
  return k;
}

}  // namespace kiln::jit
