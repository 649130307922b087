#include "compiler/kernels/onednn/onednn_kernels.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/kernels/onednn/onednn_kernel_util.h"

namespace kiln::jit {
namespace {

using namespace onednn_kernels;  // NOLINT: the helpers of the oneDNN kernels
using onednn::ExecArgs;
using onednn::PrimitiveEntry;

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

// N of a matmul spec: W's columns (rows when transposed).
int64_t MatmulN(const FusedMatmulSpec& spec) { return spec.w_dims[spec.transpose_w ? 0 : 1]; }

// Resize's guard of a matmul: X [..., K] with the K it was made for (any
// leading dims: they fold into M), W and the bias as they were (a parameter's
// dims), Out M x N (its last dim N). "" when `dims` pass.
std::string MatmulDimsMismatch(const FusedMatmulSpec& spec, const std::vector<Dims>& dims) {
  const int64_t k = spec.x_dims.back(), n = MatmulN(spec);
  std::vector<Dims> want = {{}, spec.w_dims};
  if (spec.bias) want.push_back({n});
  want.push_back({});
  std::string bad = ArgDimsMismatch(dims, want);
  if (!bad.empty()) return dims.size() != want.size() ? bad : bad + " (the weight and bias keep their dims)";
  const Dims& x = dims[0];
  if (x.empty() || x.back() != k || Numel(x) <= 0) {
    return StrCat("X must be [..., ", k, "] (the K it was made for) without a zero dim, got ", DimsToString(x));
  }
  const Dims& out = dims.back();
  if (out.empty() || out.back() != n || Numel(out) != Numel(x) / k * n) {
    return StrCat("Out must hold the ", Numel(x) / k, " x ", n, " product of X ", DimsToString(x), ", got ",
                  DimsToString(out));
  }
  return "";
}

class FusedMatmulKernel final : public runtime::Kernel {
 public:
  FusedMatmulKernel(const FusedMatmulSpec& spec, const onednn::Settings& settings, std::string name)
      : name_(std::move(name)), spec_(spec), settings_(settings), bound_(MakeFusedMatmul(spec, settings)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN matmul (" + bound_.impl() + ")" + ComputeSuffix(spec_.compute) +
           (spec_.w_dtype == DataType::kBF16 ? ", W a bf16 copy" : "") +
           (spec_.x_dtype == DataType::kBF16 ? ", X stored in bf16" : "") + FusionSuffix(spec_.bias, spec_.activation);
  }
  void Run(const runtime::BufferView* args) const override { bound_.Run(args); }
  size_t ScratchBytes() const override { return bound_.ScratchBytes(); }
  void RunWithScratch(const runtime::BufferView* args, void* scratch) const override { bound_.Run(args, scratch); }
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView*) const override { return bound_.Reorders(); }
  // The primitive of the new M from the global cache (a lookup for an M
  // seen before), with the same fusion, compute type and operand types.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    const std::string bad = MatmulDimsMismatch(spec_, dims);
    if (!bad.empty()) return Refuse(name_, bad, why);
    FusedMatmulSpec spec = spec_;
    spec.x_dims = dims[0];
    return Remake(name_, [&] { return std::make_shared<FusedMatmulKernel>(spec, settings_, name_); }, why);
  }

 private:
  std::string name_;
  FusedMatmulSpec spec_;
  onednn::Settings settings_;
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
      : name_(std::move(name)),
        w_dims_(w_dims),
        settings_(settings),
        isa_(isa),
        keep_old_(keep_old),
        compute_(compute),
        dy_bf16_(dy_dtype == DataType::kBF16) {
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
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView*) const override {
    return onednn::EntryReorders(*entry_);
  }
  // The scaled operand is the operand it scales, element for element (each
  // read once, before it is written): it may take that operand's memory
  // when the operand dies here (the planner checks dtype and size: a bf16
  // copy never does). On the MLP's classifier that is lr * dY over dY.
  std::vector<std::pair<int, int>> InplacePairs() const override { return {{scale_x_ ? 0 : 1, keep_old_ ? 1 : 0}}; }
  // The primitive of the new M (X's and dY's rows) from the global cache;
  // the bf16 scaling kernel is generated anew for the new element count.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    const std::string bad = DimsMismatch(dims);
    if (!bad.empty()) return Refuse(name_, bad, why);
    const DataType dy_dtype = dy_bf16_ ? DataType::kBF16 : DataType::kFP32;
    return Remake(name_, [&] {
      return std::make_shared<MatmulSgdKernel>(dims[0], w_dims_, settings_, keep_old_, compute_, isa_, dy_dtype, name_);
    }, why);
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
  // Resize's guard: X [..., K] and dY [..., N] with as many rows, W (and
  // the old W) as made, the scaled operand's buffer sized for the new rows.
  std::string DimsMismatch(const std::vector<Dims>& dims) const {
    std::vector<Dims> want = {{}, {}, {}, w_dims_};
    if (keep_old_) want.push_back(w_dims_);
    want.push_back({});
    want.push_back(w_dims_);
    std::string bad = ArgDimsMismatch(dims, want);
    if (!bad.empty()) return dims.size() != want.size() ? bad : bad + " (W keeps its dims)";
    const int64_t k = w_dims_[0], n = w_dims_[1];
    const Dims &x = dims[0], &dy = dims[1];
    if (x.empty() || x.back() != k || Numel(x) <= 0) {
      return StrCat("X must be [..., ", k, "] without a zero dim, got ", DimsToString(x));
    }
    if (dy.empty() || dy.back() != n || Numel(dy) != Numel(x) / k * n) {
      return StrCat("dY must be [..., ", n, "] with the ", Numel(x) / k, " rows of X, got ", DimsToString(dy));
    }
    const int64_t scratch = MatmulSgdScratchOf(x, w_dims_, compute_, dy_bf16_ ? DataType::kBF16 : DataType::kFP32).numel;
    if (Numel(dims[keep_old_ ? 5 : 4]) != scratch) {
      return StrCat("the scaled operand's buffer must hold ", scratch, " elements, got ",
                    DimsToString(dims[keep_old_ ? 5 : 4]));
    }
    return "";
  }

  std::string name_;
  Dims w_dims_;
  onednn::Settings settings_;
  Isa isa_;
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
