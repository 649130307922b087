#include "compiler/onednn_lowering.h"

#include <cstring>

#include <vector>

#include "dnnl.hpp"
#include "compiler/gemv.h"
#include "framework/onednn/onednn_handler.h"

namespace kiln::jit {
namespace {

class FusedMatmulKernel final : public runtime::Kernel {
 public:
  FusedMatmulKernel(const FusedMatmulSpec& spec, std::string name) : name_(std::move(name)), spec_(spec) {
    const int64_t k = spec.x_dims.back();
    const int64_t m = Numel(spec.x_dims) / k;
    const int64_t n = spec.transpose_w ? spec.w_dims[0] : spec.w_dims[1];
    k_ = k;
    n_ = n;
    // One row: a matrix-vector product streams W once; brgemm would repack it.
    gemv_ = m == 1 && !spec.transpose_w && spec.alpha == 1.f &&
            (spec.activation == MatmulActivation::kNone || spec.activation == MatmulActivation::kRelu);
    if (gemv_) {
      impl_ = "kiln gemv";
      return;
    }
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc src({m, k}, dt::f32, tag::ab);
    const dnnl::memory::desc wei({k, n}, dt::f32, spec.transpose_w ? tag::ba : tag::ab);
    const dnnl::memory::desc dst({m, n}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (spec.alpha != 1.f) attr.set_output_scales(0, {spec.alpha});
    if (spec.activation != MatmulActivation::kNone) {
      dnnl::post_ops ops;
      const auto alg = spec.activation == MatmulActivation::kRelu   ? dnnl::algorithm::eltwise_relu
                       : spec.activation == MatmulActivation::kGelu ? dnnl::algorithm::eltwise_gelu_erf
                                                                    : dnnl::algorithm::eltwise_gelu_tanh;
      ops.append_eltwise(1.f, alg, 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    const auto& engine = onednn::OneDnnHandler::Engine();
    dnnl::matmul::desc desc = spec.bias ? dnnl::matmul::desc(src, wei, dnnl::memory::desc({1, n}, dt::f32, tag::ab), dst)
                                        : dnnl::matmul::desc(src, wei, dst);
    pd_ = dnnl::matmul::primitive_desc(desc, attr, engine);
    prim_ = dnnl::matmul(pd_);
    src_md_ = src;
    wei_md_ = wei;
    dst_md_ = dst;
    bias_md_ = dnnl::memory::desc({1, n}, dt::f32, tag::ab);
    impl_ = pd_.impl_info_str();
    scratch_bytes_ = pd_.scratchpad_desc().get_size();
  }

  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    std::string s = gemv_ ? "matrix-vector product (kiln gemv, batch 1)" : "oneDNN matmul (" + impl_ + ")";
    if (spec_.bias) s += " + bias";
    if (spec_.activation == MatmulActivation::kRelu) s += " + relu post-op";
    if (spec_.activation == MatmulActivation::kGelu) s += " + gelu_erf post-op";
    if (spec_.activation == MatmulActivation::kGeluTanh) s += " + gelu_tanh post-op";
    return s;
  }

  void Run(const runtime::BufferView* args) const override {
    if (gemv_) {
      const float* b = spec_.bias ? static_cast<const float*>(args[2].data) : nullptr;
      GemvRowTimesMatrix(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data), b,
                         static_cast<float*>(args[spec_.bias ? 3 : 2].data), k_, n_,
                         spec_.activation == MatmulActivation::kRelu);
      return;
    }
    const auto& engine = onednn::OneDnnHandler::Engine();
    // Per-thread scratchpad: a primitive may run on several threads at once.
    thread_local std::vector<char> scratch;
    if (scratch.size() < scratch_bytes_) scratch.resize(scratch_bytes_);
    std::unordered_map<int, dnnl::memory> exec_args = {
        {DNNL_ARG_SRC, dnnl::memory(src_md_, engine, args[0].data)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(wei_md_, engine, args[1].data)},
        {DNNL_ARG_SCRATCHPAD, dnnl::memory(pd_.scratchpad_desc(), engine, scratch.data())},
    };
    int out = 2;
    if (spec_.bias) exec_args[DNNL_ARG_BIAS] = dnnl::memory(bias_md_, engine, args[out++].data);
    exec_args[DNNL_ARG_DST] = dnnl::memory(dst_md_, engine, args[out].data);
    auto& stream = onednn::OneDnnHandler::ThreadStream();
    prim_.execute(stream, exec_args);
    stream.wait();
  }

 private:
  std::string name_;
  FusedMatmulSpec spec_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::primitive prim_;
  dnnl::memory::desc src_md_, wei_md_, dst_md_, bias_md_;
  std::string impl_;
  size_t scratch_bytes_ = 0;
  bool gemv_ = false;
  int64_t k_ = 0, n_ = 0;
};

class GemvGradSgdKernel final : public runtime::Kernel {
 public:
  GemvGradSgdKernel(int64_t k, int64_t n, bool with_dx, std::string name)
      : name_(std::move(name)), k_(k), n_(n), with_dx_(with_dx) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return std::string("kiln gemv, batch 1: ") + (with_dx_ ? "dX = dY W^T and " : "") +
           "W -= lr * X^T dY in one pass over W";
  }
  void Run(const runtime::BufferView* args) const override {
    const float lr = *static_cast<const float*>(args[2].data);
    float* dx = with_dx_ ? static_cast<float*>(args[4].data) : nullptr;
    float* w = static_cast<float*>(args[with_dx_ ? 5 : 4].data);
    GemvGradAndSgd(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data), lr, w, dx, k_,
                   n_);
  }

 private:
  std::string name_;
  int64_t k_, n_;
  bool with_dx_;
};

class MatmulSgdKernel final : public runtime::Kernel {
 public:
  MatmulSgdKernel(const Dims& x_dims, const Dims& w_dims, bool keep_old, std::string name)
      : name_(std::move(name)), keep_old_(keep_old), w_bytes_(static_cast<size_t>(Numel(w_dims)) * sizeof(float)) {
    const int64_t k = x_dims.back();
    const int64_t m = Numel(x_dims) / k;
    const int64_t n = w_dims[1];
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    // src = X^T [K, M] (X stored [M, K]), weights = dY [M, N], dst = W [K, N].
    src_md_ = dnnl::memory::desc({k, m}, dt::f32, tag::ba);
    wei_md_ = dnnl::memory::desc({m, n}, dt::f32, tag::ab);
    dst_md_ = dnnl::memory::desc({k, n}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // The learning rate is a tensor read at run time. A run-time output scale
    // makes oneDNN 2.6 drop from brgemm to its generic jit gemm (measured
    // 2-30x slower here), so lr scales a copy of dY ([M,N], small next to W)
    // and the fixed scale -1 subtracts.
    attr.set_output_scales(0, {-1.f});
    dnnl::post_ops ops;
    ops.append_sum(1.f);  // dst = scale * (src @ weights) + dst
    attr.set_post_ops(ops);
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md_, wei_md_, dst_md_), attr,
                                       onednn::OneDnnHandler::Engine());
    prim_ = dnnl::matmul(pd_);
    impl_ = pd_.impl_info_str();
    scratch_bytes_ = pd_.scratchpad_desc().get_size();
  }
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "oneDNN matmul (" + impl_ + ") W -= lr * X^T dY: weight gradient and sgd step in one primitive" +
           (keep_old_ ? std::string(", the old W copied out first for dX") : std::string());
  }
  void Run(const runtime::BufferView* args) const override {
    const auto& engine = onednn::OneDnnHandler::Engine();
    thread_local std::vector<char> scratch;
    if (scratch.size() < scratch_bytes_) scratch.resize(scratch_bytes_);
    const float lr = *static_cast<const float*>(args[2].data);
    const float* dy = static_cast<const float*>(args[1].data);
    const size_t n = static_cast<size_t>(Numel(*args[1].dims));
    thread_local std::vector<float> scaled;
    if (scaled.size() < n) scaled.resize(n);
    for (size_t i = 0; i < n; ++i) scaled[i] = lr * dy[i];
    // args[3] is W as read, the last arg W as written: one buffer (in place).
    // With keep_old, args[4] receives W before the step.
    if (keep_old_) std::memcpy(args[4].data, args[3].data, w_bytes_);
    std::unordered_map<int, dnnl::memory> exec_args = {
        {DNNL_ARG_SRC, dnnl::memory(src_md_, engine, args[0].data)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(wei_md_, engine, scaled.data())},
        {DNNL_ARG_DST, dnnl::memory(dst_md_, engine, args[keep_old_ ? 5 : 4].data)},
        {DNNL_ARG_SCRATCHPAD, dnnl::memory(pd_.scratchpad_desc(), engine, scratch.data())},
    };
    auto& stream = onednn::OneDnnHandler::ThreadStream();
    prim_.execute(stream, exec_args);
    stream.wait();
  }

 private:
  std::string name_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::primitive prim_;
  dnnl::memory::desc src_md_, wei_md_, dst_md_;
  std::string impl_;
  size_t scratch_bytes_ = 0;
  bool keep_old_ = false;
  size_t w_bytes_ = 0;
};

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeMatmulSgdKernel(const Dims& x_dims, const Dims& w_dims,
                                                           const std::string& name, bool keep_old) {
  try {
    return std::make_shared<MatmulSgdKernel>(x_dims, w_dims, keep_old, name);
  } catch (const dnnl::error& e) {
    ThrowUnimplemented("oneDNN has no matmul for the update of w ", DimsToString(w_dims), ": ", e.what());
  }
}

std::shared_ptr<const runtime::Kernel> MakeGemvGradSgdKernel(int64_t k, int64_t n, bool with_dx,
                                                             const std::string& name) {
  return std::make_shared<GemvGradSgdKernel>(k, n, with_dx, name);
}

std::shared_ptr<const runtime::Kernel> MakeFusedMatmulKernel(const FusedMatmulSpec& spec, const std::string& name) {
  try {
    return std::make_shared<FusedMatmulKernel>(spec, name);
  } catch (const dnnl::error& e) {
    ThrowUnimplemented("oneDNN has no matmul for x ", DimsToString(spec.x_dims), " w ", DimsToString(spec.w_dims),
                       ": ", e.what());
  }
}

}  // namespace kiln::jit
