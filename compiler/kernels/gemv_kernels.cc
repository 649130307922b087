#include "compiler/kernels/gemv_kernels.h"

#include <vector>

#include "compiler/kernels/gemv.h"
#include "framework/error.h"

namespace kiln::jit {
namespace {

// Resize's guard of a batch-1 kernel (k, n): X (argument 0) [..., k] of one
// row, W (the arguments in `w_args`) [k, n], argument i + 1 numels[i]
// elements otherwise, as made. "" when they pass.
std::string BatchOneMismatch(int64_t k, int64_t n, const std::vector<Dims>& dims, const std::vector<int64_t>& numels,
                             const std::vector<size_t>& w_args) {
  if (dims.size() != numels.size() + 1) {
    return StrCat("expected dims for ", numels.size() + 1, " arguments, got ", dims.size());
  }
  const Dims& x = dims[0];
  if (x.empty() || x.back() != k || Numel(x) != k) {
    return StrCat("a batch-1 kernel: X must be one row of ", k, ", got ", DimsToString(x),
                  " (more rows take a oneDNN matmul, compiled for them)");
  }
  for (size_t w : w_args) {
    if (dims[w] != Dims{k, n}) return StrCat("W must stay [", k, ", ", n, "], got ", DimsToString(dims[w]));
  }
  for (size_t i = 0; i < numels.size(); ++i) {
    if (Numel(dims[i + 1]) != numels[i]) {
      return StrCat("argument ", i + 1, " must hold ", numels[i], " elements, got ", DimsToString(dims[i + 1]));
    }
  }
  return "";
}

std::shared_ptr<const runtime::Kernel> Refused(const std::string& name, const std::string& bad, std::string* why) {
  if (why != nullptr) *why = name + ": " + bad;
  return nullptr;
}

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
  // Only for one row again (X may change its leading dims of size 1).
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    std::vector<int64_t> numels = {k_ * n_};
    if (bias_) numels.push_back(n_);
    numels.push_back(n_);
    const std::string bad = BatchOneMismatch(k_, n_, dims, numels, {1});
    if (!bad.empty()) return Refused(name_, bad, why);
    return std::make_shared<GemvMatmulKernel>(*this);
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
  // Only for one row again; args X, dY, lr, W | [dX,] W.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    std::vector<int64_t> numels = {n_, 1, k_ * n_};
    if (with_dx_) numels.push_back(k_);
    numels.push_back(k_ * n_);
    const std::string bad = BatchOneMismatch(k_, n_, dims, numels, {3, dims.size() - 1});
    if (!bad.empty()) return Refused(name_, bad, why);
    return std::make_shared<GemvGradSgdKernel>(*this);
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
