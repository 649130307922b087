// MatmulHandler and ConvHandler: the handlers whose forward primitives fuse
// a bias and post-ops (the JIT's matmul/conv epilogues).
#include <algorithm>

#include "framework/onednn/handler_util.h"
#include "framework/onednn/handlers.h"
#include "framework/shape_util.h"

namespace kiln::onednn {

using detail::AllPositive;
using detail::AnyDesc;
using detail::D;
using detail::FusedAttr;
using detail::MakeEntry;
using dnnl::algorithm;
using dnnl::prop_kind;

namespace {

void SetFusion(PrimitiveKey* key, const FusedOps& fused) {
  key->bias = fused.bias;
  key->post_ops = fused.post_ops;
}

// Binds the optional bias to `args` (nothing when the key has none).
bool BindBias(OneDnnHandler* h, const Tensor* bias, ExecArgs* args) {
  if (!h->forward_key().bias) return true;
  if (bias == nullptr) return false;
  const int arg = h->entry().bias_arg;
  (*args)[arg] = h->AcquireMemory(h->UserDesc(arg), *bias);
  return true;
}

}  // namespace

// ---- MatmulHandler -----------------------------------------------------------------------

MatmulHandler::MatmulHandler(PrimitiveCache& cache, const Dims& a, bool trans_a, const Dims& b, bool trans_b,
                             float alpha, const FusedOps& fused, ComputeType compute)
    : OneDnnHandler(cache) {
  if (a.size() < 2 || b.size() < 2 || !AllPositive(a) || !AllPositive(b)) return;
  const size_t ra = a.size(), rb = b.size();
  const int64_t m = trans_a ? a[ra - 1] : a[ra - 2];
  const int64_t ka = trans_a ? a[ra - 2] : a[ra - 1];
  const int64_t kb = trans_b ? b[rb - 1] : b[rb - 2];
  const int64_t n = trans_b ? b[rb - 2] : b[rb - 1];
  if (ka != kb) return;
  const size_t r = std::max(ra, rb);
  Dims pa(r, 1), pb(r, 1);
  std::copy(a.begin(), a.end(), pa.begin() + (r - ra));
  std::copy(b.begin(), b.end(), pb.begin() + (r - rb));
  dst_dims_.assign(r, 1);
  for (size_t d = 0; d + 2 < r; ++d) {
    if (pa[d] != pb[d] && pa[d] != 1 && pb[d] != 1) return;
    dst_dims_[d] = std::max(pa[d], pb[d]);
  }
  dst_dims_[r - 2] = m;
  dst_dims_[r - 1] = n;

  const bool b_has_batch = std::any_of(pb.begin(), pb.end() - 2, [](int64_t d) { return d != 1; });
  Dims key_a = pa, key_b = pb;
  prim_dst_dims_ = dst_dims_;
  if (!b_has_batch && !trans_a && r > 2) {
    // [B..., M, K] @ [K, N] is one [B*M, K] @ [K, N] product: rows of a are
    // contiguous across batches when a is not transposed.
    const int64_t rows = Numel(Dims(pa.begin(), pa.end() - 2)) * m;
    key_a = {rows, ka};
    key_b = {pb[r - 2], pb[r - 1]};
    prim_dst_dims_ = {rows, n};
  }
  if (!detail::RankOk(key_a)) return;
  fwd_key_.kind = PrimitiveKind::kMatmul;
  fwd_key_.dims = {key_a, key_b};
  fwd_key_.transpose_a = trans_a;
  fwd_key_.transpose_b = trans_b;
  fwd_key_.output_scale = alpha;
  fwd_key_.compute = compute;
  SetFusion(&fwd_key_, fused);
  valid_ = true;
}

namespace {

// Descriptor of a stored operand read as [..., rows, cols]; `trans` means the
// tensor stores [..., cols, rows].
dnnl::memory::desc OperandDesc(const Dims& stored, bool trans,
                               dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  if (!trans) return PlainDesc(stored, type);
  Dims logical = stored;
  std::swap(logical[logical.size() - 1], logical[logical.size() - 2]);
  return TransposedLastTwoDesc(logical, type);
}

dnnl::memory::data_type OperandType(ComputeType compute) {
  return compute == ComputeType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

}  // namespace

// Plain layouts throughout: brgemm reads row-major operands directly, and
// the JIT binds the framework's buffers without reorders.
// With bf16 compute the operands keep the tensors' strides (a transposed
// operand stays transposed), so each reorder is a pure f32 -> bf16
// conversion (round to nearest even); dst and the bias stay f32.
PrimitiveEntry MatmulHandler::CreateForward() const {
  const dnnl::memory::data_type type = OperandType(fwd_key_.compute);
  const dnnl::memory::desc src = OperandDesc(fwd_key_.dims[0], fwd_key_.transpose_a, type);
  const dnnl::memory::desc wei = OperandDesc(fwd_key_.dims[1], fwd_key_.transpose_b, type);
  const dnnl::memory::desc dst = PlainDesc(prim_dst_dims_);
  // The bias is a row broadcast over every other dim of dst.
  Dims bias_dims(prim_dst_dims_.size(), 1);
  bias_dims.back() = prim_dst_dims_.back();
  const dnnl::memory::desc bias = PlainDesc(bias_dims);
  const dnnl::primitive_attr attr = FusedAttr(fwd_key_, bias);
  PrimitiveEntry e;
  if (!fwd_key_.bias || detail::BiasIsPostOp(fwd_key_)) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, Engine());
    e = MakeEntry(pd, dnnl::matmul(pd));
    if (fwd_key_.bias) e.bias_arg = detail::kBiasPostOpArg;
  } else {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, bias, dst), attr, Engine());
    e = MakeEntry(pd, dnnl::matmul(pd));
  }
  // No-ops for f32 (the descriptors are equal).
  AddReorder(&e, DNNL_ARG_SRC, /*output=*/false, OperandDesc(fwd_key_.dims[0], fwd_key_.transpose_a), src);
  AddReorder(&e, DNNL_ARG_WEIGHTS, /*output=*/false, OperandDesc(fwd_key_.dims[1], fwd_key_.transpose_b), wei);
  return e;
}

bool MatmulHandler::Run(const Tensor& a, const Tensor& b, Tensor* dst) { return Run(a, b, nullptr, dst); }

bool MatmulHandler::Run(const Tensor& a, const Tensor& b, const Tensor* bias, Tensor* dst) {
  if (!valid_ || !AcquireForwardPrimitive()) return false;
  ExecArgs args;
  args[DNNL_ARG_SRC] = AcquireSrcMemory(a);
  args[DNNL_ARG_WEIGHTS] = AcquireWeightsMemory(b);
  if (!BindBias(this, bias, &args)) return false;
  args[DNNL_ARG_DST] = AcquireDstMemory(dst);
  Execute(std::move(args));
  return true;
}

// ---- ConvHandler ---------------------------------------------------------------------------

ConvHandler::ConvHandler(PrimitiveCache& cache, const Dims& in, const Dims& f, const Dims& strides,
                         const Dims& paddings, const Dims& dilations, int64_t groups, const FusedOps& fused,
                         ComputeType compute)
    : OneDnnHandler(cache) {
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
dnnl::convolution_forward::primitive_desc ConvHandler::ForwardPd(const PrimitiveKey& k, bool any) const {
  const dnnl::memory::data_type type = OperandType(k.compute);
  auto md = [any](const Dims& d) { return any ? AnyDesc(d) : PlainDesc(d); };
  const dnnl::memory::desc src = any ? AnyDesc(k.dims[0], type) : PlainDesc(k.dims[0], type);
  // A sum post-op reads dst: it stays plain, so the tensor's contents are
  // what the primitive adds to (an output reorder would start from garbage).
  const dnnl::memory::desc dst = detail::ReadsDst(k) ? PlainDesc(output_dims_) : md(output_dims_);
  const dnnl::primitive_attr attr = FusedAttr(k, PlainDesc({1, k.dims[1][0], 1, 1}));
  if (k.bias && !detail::BiasIsPostOp(k)) {
    dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, src,
                                         FilterDesc(any, type), PlainDesc({k.dims[1][0]}), dst, D(k.strides),
                                         D(k.dilations), D(k.padding_l), D(k.padding_r));
    return dnnl::convolution_forward::primitive_desc(desc, attr, Engine());
  }
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, src,
                                       FilterDesc(any, type), dst, D(k.strides), D(k.dilations), D(k.padding_l),
                                       D(k.padding_r));
  return dnnl::convolution_forward::primitive_desc(desc, attr, Engine());
}

// Layouts: the primitives pick their own (format "any", usually channel
// blocked) and the entry reorders the plain tensors in and out. Measured on
// LeNet-sized layers this is 1.5-4x faster than the gemm-based
// implementation oneDNN uses for plain layouts, reorders included, except for
// the backward-data pass with very few input channels per group, which stays
// plain.
PrimitiveEntry ConvHandler::CreateForward() const {
  const PrimitiveKey& k = fwd_key_;
  auto pd = ForwardPd(k, /*any=*/true);
  PrimitiveEntry e = MakeEntry(pd, dnnl::convolution_forward(pd));
  if (detail::BiasIsPostOp(k)) e.bias_arg = detail::kBiasPostOpArg;
  AddReorder(&e, DNNL_ARG_SRC, false, PlainDesc(k.dims[0]), pd.src_desc());
  AddReorder(&e, DNNL_ARG_WEIGHTS, false, FilterDesc(false), pd.weights_desc());
  AddReorder(&e, DNNL_ARG_DST, true, PlainDesc(output_dims_), pd.dst_desc());
  return e;
}

// With bf16 compute the operands are bf16 and the gradient written is f32.
PrimitiveEntry ConvHandler::CreateBackward() const {
  const PrimitiveKey& k = bwd_key_;
  const dnnl::memory::data_type type = OperandType(k.compute), f32 = dnnl::memory::data_type::f32;
  if (k.kind == PrimitiveKind::kConvBackwardData) {
    const bool any = k.dims[1][1] >= 4;  // input channels per group
    auto md = [any](const Dims& d, dnnl::memory::data_type t) { return any ? AnyDesc(d, t) : PlainDesc(d, t); };
    dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, md(k.dims[0], f32),
                                               FilterDesc(any, type), md(output_dims_, type), D(k.strides),
                                               D(k.dilations), D(k.padding_l), D(k.padding_r));
    dnnl::convolution_backward_data::primitive_desc pd(desc, DefaultAttr(), Engine(), ForwardPd(k, any));
    PrimitiveEntry e = MakeEntry(pd, dnnl::convolution_backward_data(pd));
    AddReorder(&e, DNNL_ARG_WEIGHTS, false, FilterDesc(false), pd.weights_desc());
    AddReorder(&e, DNNL_ARG_DIFF_DST, false, PlainDesc(output_dims_), pd.diff_dst_desc());
    AddReorder(&e, DNNL_ARG_DIFF_SRC, true, PlainDesc(k.dims[0]), pd.diff_src_desc());
    return e;
  }
  KILN_CHECK(k.kind == PrimitiveKind::kConvBackwardWeights);
  dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, AnyDesc(k.dims[0], type),
                                                FilterDesc(true), AnyDesc(output_dims_, type), D(k.strides),
                                                D(k.dilations), D(k.padding_l), D(k.padding_r));
  dnnl::convolution_backward_weights::primitive_desc pd(desc, DefaultAttr(), Engine(), ForwardPd(k, true));
  PrimitiveEntry e = MakeEntry(pd, dnnl::convolution_backward_weights(pd));
  AddReorder(&e, DNNL_ARG_SRC, false, PlainDesc(k.dims[0]), pd.src_desc());
  AddReorder(&e, DNNL_ARG_DIFF_DST, false, PlainDesc(output_dims_), pd.diff_dst_desc());
  AddReorder(&e, DNNL_ARG_DIFF_WEIGHTS, true, FilterDesc(false), pd.diff_weights_desc());
  return e;
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

namespace {

// Whether `h` gets a fast forward primitive; else *why says what oneDNN had.
bool ProbeForward(OneDnnHandler& h, const char* what, std::string* why) {
  if (h.AcquireForwardPrimitive()) return true;
  if (why != nullptr) {
    const auto& entry = h.acquired_entry();
    *why = std::string(what) + ": " + (entry && entry->primitive ? "only the slow " + entry->impl : "none");
  }
  return false;
}

}  // namespace

bool Bf16KernelsAvailable(std::string* why) {
  PrimitiveCache probe(2);
  MatmulHandler matmul(probe, {16, 16}, false, {16, 16}, false, 1.f, {}, ComputeType::kBF16);
  if (!ProbeForward(matmul, "matmul", why)) return false;
  ConvHandler conv(probe, {1, 16, 8, 8}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, {}, ComputeType::kBF16);
  return ProbeForward(conv, "convolution", why);
}

}  // namespace kiln::onednn
