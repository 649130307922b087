#include "compiler/gemv_kernels.h"

#include "compiler/gemv.h"

namespace kiln::jit {
namespace {

class GemvMatmulKernel final : public runtime::Kernel {
 public:
  GemvMatmulKernel(int64_t k, int64_t n, bool bias, bool relu, std::string name)
      : name_(std::move(name)), k_(k), n_(n), bias_(bias), relu_(relu) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return std::string("matrix-vector product (kiln gemv, batch 1)") + (bias_ ? " + bias" : "") +
           (relu_ ? " + relu post-op" : "");
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

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeGemvMatmulKernel(int64_t k, int64_t n, bool bias, bool relu,
                                                            const std::string& name) {
  return std::make_shared<GemvMatmulKernel>(k, n, bias, relu, name);
}

}  // namespace kiln::jit
