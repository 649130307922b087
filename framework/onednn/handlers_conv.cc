// ConvHandler: 2-D convolution forward (with a fused bias and post-ops: the
// JIT's conv epilogue) and its two gradients, each in the activation layout
// that gets oneDNN's best implementation for its shape.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/onednn/handler_util.h"
#include "framework/onednn/handlers.h"

namespace kiln::onednn {

using detail::AllPositive;
using detail::AnyDesc;
using detail::BindBias;
using detail::D;
using detail::FusedAttr;
using detail::KeptDesc;
using detail::MakeEntry;
using detail::OperandType;
using detail::SetFusion;
using dnnl::algorithm;
using dnnl::prop_kind;

namespace {

// The family of primitive layouts `kept` belongs to.
ConvLayout FamilyOf(ActLayout kept) {
  return kept == ActLayout::kNhwc ? ConvLayout::kChannelsLast : ConvLayout::kBlocked;
}

// The descriptor of activations `dims` in `layout`.
dnnl::memory::desc ActivationDesc(const Dims& dims, ConvLayout layout, dnnl::memory::data_type type) {
  switch (layout) {
    case ConvLayout::kBlocked: return AnyDesc(dims, type);
    case ConvLayout::kChannelsLast: return dnnl::memory::desc(D(dims), type, dnnl::memory::format_tag::nhwc);
    case ConvLayout::kPlain: break;
  }
  return PlainDesc(dims, type);
}

// The primitive descriptor `make(layout)` of the first of `candidates`,
// unless a later candidate gets an implementation of a higher ISA rank (a
// layout oneDNN has no implementation for is skipped). Where each gets only
// oneDNN's reference implementation, or none, plain NCHW (gemm-based) is
// tried too: on an AVX2 CPU the blocked weights' gradient of a 3x3
// convolution over a 1x1 image (resnet18's last stage at 32x32 inputs) is
// reference-only, 0.9 s a call at batch 32. Deterministic for a shape on a
// CPU, so runs, resumes and JIT on/off take the same kernels.
// Measured (1 thread, LeNet's second layer, 6 -> 16 channels, batch 64): the
// filter gradient runs at jit:avx2 blocked (0.60 ms) and jit:avx512_core in
// channels-last (0.26 ms); the forward passes run fastest blocked.
template <class Pd, class MakePd>
Pd ChooseLayout(const std::vector<ConvLayout>& candidates, const MakePd& make) {
  std::optional<Pd> best;
  int best_rank = -2;
  const auto consider = [&](ConvLayout layout) {
    try {
      Pd pd = make(layout);
      const int rank = IsaRank(pd.impl_info_str());
      if (rank > best_rank) {
        best.emplace(pd);
        best_rank = rank;
      }
    } catch (const dnnl::error&) {
      // No implementation in this layout: the next candidate.
    }
  };
  for (ConvLayout layout : candidates) consider(layout);
  if (best_rank < 0 && std::find(candidates.begin(), candidates.end(), ConvLayout::kPlain) == candidates.end()) {
    consider(ConvLayout::kPlain);
  }
  if (!best) return make(candidates.front());  // throws oneDNN's error for the caller
  return *best;
}

}  // namespace

ConvHandler::ConvHandler(PrimitiveCache& cache, const Settings& settings, const Dims& in, const Dims& f,
                         const Dims& strides, const Dims& paddings, const Dims& dilations, int64_t groups,
                         const FusedOps& fused, ComputeType compute)
    : OneDnnHandler(cache, settings) {
  if (in.size() != 4 || f.size() != 4 || strides.size() != 2 || paddings.size() != 2 || dilations.size() != 2) {
    return;
  }
  if (!AllPositive(in) || !AllPositive(f) || groups < 1 || in[1] != f[1] * groups || f[0] % groups != 0) return;
  Dims out = {in[0], f[0], 0, 0};
  Dims pad_r(2);
  for (int i = 0; i < 2; ++i) {
    if (strides[i] < 1 || dilations[i] < 1 || paddings[i] < 0) return;
    const int64_t span = dilations[i] * (f[2 + i] - 1) + 1;
    const int64_t room = in[2 + i] + 2 * paddings[i] - span;
    if (room < 0) return;
    out[2 + i] = room / strides[i] + 1;
    pad_r[i] = detail::PaddingRight(in[2 + i], out[2 + i], span, strides[i], paddings[i]);
  }
  output_dims_ = out;
  fwd_key_.kind = PrimitiveKind::kConvForward;
  fwd_key_.dims = {in, f};
  fwd_key_.groups = groups;
  fwd_key_.strides = strides;
  fwd_key_.dilations = {dilations[0] - 1, dilations[1] - 1};
  fwd_key_.padding_l = paddings;
  fwd_key_.padding_r = pad_r;
  fwd_key_.compute = compute;
  // The backward passes are those of the plain convolution.
  bwd_key_ = fwd_key_;
  SetFusion(&fwd_key_, fused);
  valid_ = true;
}

dnnl::memory::desc ConvHandler::FilterDesc(bool any, dnnl::memory::data_type type) const {
  const Dims& f = fwd_key_.dims[1];
  const int64_t g = fwd_key_.groups;
  // OIHW with groups is the same buffer as GOIHW: [g, O/g, I/g, KH, KW].
  const Dims dims = g == 1 ? f : Dims{g, f[0] / g, f[1], f[2], f[3]};
  return any ? AnyDesc(dims, type) : PlainDesc(dims, type);
}

// With bf16 compute src and weights are bf16; dst and the bias stay f32.
dnnl::convolution_forward::primitive_desc ConvHandler::ForwardPd(const PrimitiveKey& k, ConvLayout layout) const {
  const dnnl::memory::data_type type = OperandType(k.compute), f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc src = SrcDesc(k, layout, type);
  // A sum post-op reads dst: it stays plain, so the tensor's contents are
  // what the primitive adds to (an output reorder would start from garbage).
  const dnnl::memory::desc dst = detail::ReadsDst(k) ? PlainDesc(output_dims_)
                                 : k.kept_layout != ActLayout::kPlain && layout == FamilyOf(k.kept_layout)
                                     ? KeptDesc(output_dims_, k.kept_layout, f32)
                                     : ActivationDesc(output_dims_, layout, f32);
  const dnnl::memory::desc filter = FilterDesc(layout != ConvLayout::kPlain, type);
  const dnnl::primitive_attr attr = FusedAttr(k, PlainDesc({1, k.dims[1][0], 1, 1}));
  if (k.bias && !detail::BiasIsPostOp(k)) {
    dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, src, filter,
                                         PlainDesc({k.dims[1][0]}), dst, D(k.strides), D(k.dilations),
                                         D(k.padding_l), D(k.padding_r));
    return dnnl::convolution_forward::primitive_desc(desc, attr, Engine());
  }
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, src, filter,
                                       dst, D(k.strides), D(k.dilations), D(k.padding_l), D(k.padding_r));
  return dnnl::convolution_forward::primitive_desc(desc, attr, Engine());
}

// Layouts: the primitives work blocked (format "any") or channels-last,
// chosen per shape by ChooseLayout, and the entry reorders the plain tensors
// in and out. Measured on LeNet-sized layers either is 1.5-4x faster than
// the gemm-based implementation oneDNN uses for plain layouts, reorders
// included.
PrimitiveEntry ConvHandler::CreateForward() const {
  const PrimitiveKey& k = fwd_key_;
  using Pd = dnnl::convolution_forward::primitive_desc;
  const ActLayout kept = k.kept_layout != ActLayout::kPlain ? k.kept_layout : k.src_kept_layout;
  const Pd pd = kept != ActLayout::kPlain ? ForwardPd(k, FamilyOf(kept))
                                          : ChooseLayout<Pd>({ConvLayout::kBlocked, ConvLayout::kChannelsLast},
                                                             [&](ConvLayout layout) { return ForwardPd(k, layout); });
  PrimitiveEntry e = MakeEntry(pd, dnnl::convolution_forward(pd));
  if (detail::BiasIsPostOp(k)) e.bias_arg = detail::kBiasPostOpArg;
  AddReorder(&e, DNNL_ARG_SRC, false, SrcUserDesc(k), pd.src_desc());
  AddReorder(&e, DNNL_ARG_WEIGHTS, false, FilterDesc(false), pd.weights_desc());
  AddReorder(&e, DNNL_ARG_DST, true, DiffDstUserDesc(k), pd.dst_desc());
  return e;
}

dnnl::memory::desc ConvHandler::DiffDstUserDesc(const PrimitiveKey& k) const {
  const dnnl::memory::data_type f32 = dnnl::memory::data_type::f32;
  return KeptDesc(output_dims_, k.kept_layout, k.kept_dtype == DataType::kBF16 ? dnnl::memory::data_type::bf16 : f32);
}

dnnl::memory::desc ConvHandler::DiffDstDesc(const PrimitiveKey& k, ConvLayout layout,
                                            dnnl::memory::data_type type) const {
  if (k.kept_layout != ActLayout::kPlain && layout == FamilyOf(k.kept_layout)) {
    return KeptDesc(output_dims_, k.kept_layout, type);
  }
  return ActivationDesc(output_dims_, layout, type);
}

dnnl::memory::desc ConvHandler::SrcUserDesc(const PrimitiveKey& k) const {
  return KeptDesc(k.dims[0], k.src_kept_layout, dnnl::memory::data_type::f32);
}

dnnl::memory::desc ConvHandler::SrcDesc(const PrimitiveKey& k, ConvLayout layout, dnnl::memory::data_type type) const {
  if (k.src_kept_layout != ActLayout::kPlain && layout == FamilyOf(k.src_kept_layout)) {
    return KeptDesc(k.dims[0], k.src_kept_layout, type);
  }
  return ActivationDesc(k.dims[0], layout, type);
}

dnnl::memory::desc ConvHandler::DiffSrcUserDesc(const PrimitiveKey& k) const {
  const ActLayout kept = k.diff_src_kept_layout != ActLayout::kPlain ? k.diff_src_kept_layout : k.src_kept_layout;
  return KeptDesc(k.dims[0], kept, dnnl::memory::data_type::f32);
}

dnnl::memory::desc ConvHandler::DiffSrcDesc(const PrimitiveKey& k, ConvLayout layout) const {
  const dnnl::memory::data_type f32 = dnnl::memory::data_type::f32;
  if (k.diff_src_kept_layout != ActLayout::kPlain && layout == FamilyOf(k.diff_src_kept_layout)) {
    return KeptDesc(k.dims[0], k.diff_src_kept_layout, f32);
  }
  return SrcDesc(k, layout, f32);
}

ActLayout ConvHandler::ForwardKeepableLayout(bool src) const {
  if (!valid_ || detail::ReadsDst(fwd_key_) || (src && fwd_key_.compute != ComputeType::kF32)) {
    return ActLayout::kPlain;
  }
  PrimitiveKey k = fwd_key_;
  k.kept_layout = ActLayout::kPlain;
  k.src_kept_layout = ActLayout::kPlain;
  using Pd = dnnl::convolution_forward::primitive_desc;
  try {
    const Pd pd = ChooseLayout<Pd>({ConvLayout::kBlocked, ConvLayout::kChannelsLast},
                                   [&](ConvLayout layout) { return ForwardPd(k, layout); });
    const dnnl::memory::desc& chosen = src ? pd.src_desc() : pd.dst_desc();
    const Dims& dims = src ? k.dims[0] : output_dims_;
    for (ActLayout layout : {ActLayout::kNChw16c, ActLayout::kNChw8c, ActLayout::kNhwc}) {
      if (chosen == KeptDesc(dims, layout, dnnl::memory::data_type::f32)) return layout;
    }
  } catch (const dnnl::error&) {
  }
  return ActLayout::kPlain;
}

ActLayout ConvHandler::ForwardDstLayout() const { return ForwardKeepableLayout(/*src=*/false); }

ActLayout ConvHandler::ForwardSrcLayout() const { return ForwardKeepableLayout(/*src=*/true); }

void ConvHandler::BindKept(ActLayout layout, DataType diff_dst) {
  KILN_CHECK(diff_dst == DataType::kFP32 || (diff_dst == DataType::kBF16 && bwd_key_.compute == ComputeType::kBF16));
  fwd_key_.kept_layout = layout;
  bwd_key_.kept_layout = layout;
  bwd_key_.kept_dtype = diff_dst;
}

void ConvHandler::BindKeptSrc(ActLayout layout) {
  KILN_CHECK(fwd_key_.compute == ComputeType::kF32);
  fwd_key_.src_kept_layout = layout;
  bwd_key_.src_kept_layout = layout;
}

void ConvHandler::WithDiffBias() { bwd_key_.bias = true; }

bool ConvHandler::AcquireBackwardData() {
  if (!valid_) return false;
  bwd_key_.kind = PrimitiveKind::kConvBackwardData;
  return AcquireBackwardPrimitive();
}

bool ConvHandler::AcquireBackwardWeights() {
  if (!valid_) return false;
  bwd_key_.kind = PrimitiveKind::kConvBackwardWeights;
  // A kept diff_src is the data pass's: the weights pass shares the entry of
  // a plain dInput's.
  const ActLayout diff_src = std::exchange(bwd_key_.diff_src_kept_layout, ActLayout::kPlain);
  const bool acquired = AcquireBackwardPrimitive();
  bwd_key_.diff_src_kept_layout = diff_src;
  return acquired;
}

dnnl::convolution_backward_data::primitive_desc ConvHandler::BackwardDataPd(const PrimitiveKey& k) const {
  const dnnl::memory::data_type type = OperandType(k.compute);
  using Pd = dnnl::convolution_backward_data::primitive_desc;
  auto make = [&](ConvLayout layout) {
    dnnl::convolution_backward_data::desc desc(
        algorithm::convolution_direct, DiffSrcDesc(k, layout), FilterDesc(layout != ConvLayout::kPlain, type),
        DiffDstDesc(k, layout, type), D(k.strides), D(k.dilations), D(k.padding_l), D(k.padding_r));
    return Pd(desc, DefaultAttr(), Engine(), ForwardPd(k, layout));
  };
  // A kept diff_src decides the family.
  if (k.diff_src_kept_layout != ActLayout::kPlain) return make(FamilyOf(k.diff_src_kept_layout));
  // Blocked pads few input channels per group up to a block, and runs
  // slower than the gemm-based plain implementation there.
  const ConvLayout first = k.dims[1][1] >= 4 ? ConvLayout::kBlocked : ConvLayout::kPlain;
  return ChooseLayout<Pd>({first, ConvLayout::kChannelsLast}, make);
}

PrimitiveEntry ConvHandler::CreateBackwardData() const {
  const PrimitiveKey& k = bwd_key_;
  const dnnl::convolution_backward_data::primitive_desc pd = BackwardDataPd(k);
  PrimitiveEntry e = MakeEntry(pd, dnnl::convolution_backward_data(pd));
  AddReorder(&e, DNNL_ARG_WEIGHTS, false, FilterDesc(false), pd.weights_desc());
  AddReorder(&e, DNNL_ARG_DIFF_DST, false, DiffDstUserDesc(k), pd.diff_dst_desc());
  AddReorder(&e, DNNL_ARG_DIFF_SRC, true, DiffSrcUserDesc(k), pd.diff_src_desc());
  return e;
}

ActLayout ConvHandler::BackwardDataDiffSrcLayout() const {
  if (!valid_ || fwd_key_.src_kept_layout != ActLayout::kPlain) return ActLayout::kPlain;
  PrimitiveKey k = bwd_key_;
  k.kind = PrimitiveKind::kConvBackwardData;
  k.diff_src_kept_layout = ActLayout::kPlain;
  try {
    const dnnl::convolution_backward_data::primitive_desc pd = BackwardDataPd(k);
    // A kernel would refuse a slow implementation: nothing to keep for it.
    if (IsSlowImplementation(pd.impl_info_str()) && !settings().allow_slow_impls) return ActLayout::kPlain;
    const dnnl::memory::desc chosen = pd.diff_src_desc();
    for (ActLayout layout : {ActLayout::kNChw16c, ActLayout::kNChw8c, ActLayout::kNhwc}) {
      if (chosen == KeptDesc(k.dims[0], layout, dnnl::memory::data_type::f32)) return layout;
    }
  } catch (const dnnl::error&) {
  }
  return ActLayout::kPlain;
}

void ConvHandler::BindKeptDiffSrc(ActLayout layout) {
  KILN_CHECK(fwd_key_.src_kept_layout == ActLayout::kPlain);
  bwd_key_.diff_src_kept_layout = layout;
}

PrimitiveEntry ConvHandler::CreateBackwardWeights() const {
  const PrimitiveKey& k = bwd_key_;
  const dnnl::memory::data_type type = OperandType(k.compute);
  using Pd = dnnl::convolution_backward_weights::primitive_desc;
  auto make = [&](ConvLayout layout) {
    const dnnl::memory::desc src = SrcDesc(k, layout, type), diff_dst = DiffDstDesc(k, layout, type);
    if (k.bias) {
      dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, src, FilterDesc(true),
                                                    PlainDesc({k.dims[1][0]}), diff_dst, D(k.strides),
                                                    D(k.dilations), D(k.padding_l), D(k.padding_r));
      return Pd(desc, DefaultAttr(), Engine(), ForwardPd(k, layout));
    }
    dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, src, FilterDesc(true), diff_dst,
                                                  D(k.strides), D(k.dilations), D(k.padding_l), D(k.padding_r));
    return Pd(desc, DefaultAttr(), Engine(), ForwardPd(k, layout));
  };
  const Pd pd = ChooseLayout<Pd>({ConvLayout::kBlocked, ConvLayout::kChannelsLast}, make);
  PrimitiveEntry e = MakeEntry(pd, dnnl::convolution_backward_weights(pd));
  AddReorder(&e, DNNL_ARG_SRC, false, SrcUserDesc(k), pd.src_desc());
  AddReorder(&e, DNNL_ARG_DIFF_DST, false, DiffDstUserDesc(k), pd.diff_dst_desc());
  AddReorder(&e, DNNL_ARG_DIFF_WEIGHTS, true, FilterDesc(false), pd.diff_weights_desc());
  return e;
}

// With bf16 compute the operands are bf16 and the gradient written is f32.
PrimitiveEntry ConvHandler::CreateBackward() const {
  if (bwd_key_.kind == PrimitiveKind::kConvBackwardData) return CreateBackwardData();
  KILN_CHECK(bwd_key_.kind == PrimitiveKind::kConvBackwardWeights);
  return CreateBackwardWeights();
}

bool ConvHandler::RunForward(const Tensor& input, const Tensor& filter, Tensor* output) {
  return RunForward(input, filter, nullptr, output);
}

bool ConvHandler::RunForward(const Tensor& input, const Tensor& filter, const Tensor* bias, Tensor* output) {
  if (!valid_ || !AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(input);
  args[DNNL_ARG_WEIGHTS] = AcquireWeightsMemory(filter);
  if (!BindBias(this, bias, &args)) return false;
  args[DNNL_ARG_DST] = AcquireDstMemory(output);
  Execute(std::move(args));
  return true;
}

bool ConvHandler::RunBackwardData(const Tensor& filter, const Tensor& d_output, Tensor* d_input) {
  if (!valid_) return false;
  bwd_key_.kind = PrimitiveKind::kConvBackwardData;
  if (!AcquireBackwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_WEIGHTS] = AcquireWeightsMemory(filter);
  args[DNNL_ARG_DIFF_DST] = AcquireDiffDstMemory(d_output);
  args[DNNL_ARG_DIFF_SRC] = AcquireDiffSrcMemory(d_input);
  Execute(std::move(args));
  return true;
}

bool ConvHandler::RunBackwardWeights(const Tensor& input, const Tensor& d_output, Tensor* d_filter) {
  if (!valid_) return false;
  bwd_key_.kind = PrimitiveKind::kConvBackwardWeights;
  if (!AcquireBackwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(input);
  args[DNNL_ARG_DIFF_DST] = AcquireDiffDstMemory(d_output);
  args[DNNL_ARG_DIFF_WEIGHTS] = AcquireDiffWeightsMemory(d_filter);
  Execute(std::move(args));
  return true;
}

}  // namespace kiln::onednn
