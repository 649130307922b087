// MatmulHandler, whose forward primitive fuses a bias and post-ops (the
// JIT's matmul epilogue), and the start-up check of bf16 kernels.
#include <algorithm>

#include "framework/onednn/handler_util.h"
#include "framework/onednn/handlers.h"
#include "framework/shape_util.h"

namespace kiln::onednn {

using detail::AllPositive;
using detail::AnyDesc;
using detail::D;
using detail::BindBias;
using detail::FusedAttr;
using detail::OperandType;
using detail::SetFusion;
using detail::MakeEntry;
using dnnl::algorithm;
using dnnl::prop_kind;

// ---- MatmulHandler -----------------------------------------------------------------------

MatmulHandler::MatmulHandler(PrimitiveCache& cache, const Settings& settings, const Dims& a, bool trans_a,
                             const Dims& b, bool trans_b, float alpha, const FusedOps& fused, ComputeType compute,
                             DataType b_dtype, DataType a_dtype)
    : OneDnnHandler(cache, settings) {
  if (a.size() < 2 || b.size() < 2 || !AllPositive(a) || !AllPositive(b)) return;
  auto type_ok = [compute](DataType t) {
    return t == DataType::kFP32 || (t == DataType::kBF16 && compute == ComputeType::kBF16);
  };
  if (!type_ok(a_dtype) || !type_ok(b_dtype)) return;
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
  fwd_key_.a_dtype = a_dtype;
  fwd_key_.b_dtype = b_dtype;
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
  // No-ops for f32 (the descriptors are equal), and for bf16 operands.
  if (fwd_key_.a_dtype != DataType::kBF16) {
    AddReorder(&e, DNNL_ARG_SRC, /*output=*/false, OperandDesc(fwd_key_.dims[0], fwd_key_.transpose_a), src);
  }
  if (fwd_key_.b_dtype != DataType::kBF16) {
    AddReorder(&e, DNNL_ARG_WEIGHTS, /*output=*/false, OperandDesc(fwd_key_.dims[1], fwd_key_.transpose_b), wei);
  }
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
  const Settings settings;  // a slow implementation does not count
  MatmulHandler matmul(probe, settings, {16, 16}, false, {16, 16}, false, 1.f, {}, ComputeType::kBF16);
  if (!ProbeForward(matmul, "matmul", why)) return false;
  ConvHandler conv(probe, settings, {1, 16, 8, 8}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, {}, ComputeType::kBF16);
  return ProbeForward(conv, "convolution", why);
}

}  // namespace kiln::onednn
