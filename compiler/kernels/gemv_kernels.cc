#include "compiler/kernels/gemv_kernels.h"

#include "compiler/kernels/gemv.h"

namespace kiln::jit {
namespace {

class GemvMatmulKernel final : public runtime::Kernel {
 public:
  GemvMatmulKernel(int64_t k, int64_t n, bool bias, bool relu, std::string name)
      : name_(std::move(name)), k_(k), n_(n), bias_(bias), relu_(relu) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    std::string s = "matrix-vector product (kiln gemv, batch 1)";
    if (bias_) s += " + bias";
    if (relu_) s += " + relu post-op";
    return s;
  }
  void Run(const runtime::BufferView* args) const override {
    const float* b = bias_ ? static_cast<const float*>(args[2].data) : nullptr;
    GemvRowTimesMatrix(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data), b,
                       static_cast<float*>(args[bias_ ? 3 : 2].data), k_, n_, relu_);
  }

 private:
  std::string name_;
  int64_t k_, n_;
  bool bias_, relu_;
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

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeGemvMatmulKernel(int64_t k, int64_t n, bool bias, bool relu,
                                                            const std::string& name) {
  return std::make_shared<GemvMatmulKernel>(k, n, bias, relu, name);
}

std::shared_ptr<const runtime::Kernel> MakeGemvGradSgdKernel(int64_t k, int64_t n, bool with_dx,
                                                             const std::string& name) {
  return std::make_shared<GemvGradSgdKernel>(k, n, with_dx, name);
}

}  // namespace kiln::jit
