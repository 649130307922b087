#include "compiler/lowering/units/max_pool_grad.h"

#include "compiler/kernels/gemv.h"

namespace kiln::jit {
namespace {

class MaxPool2x2GradKernel final : public runtime::Kernel {
 public:
  MaxPool2x2GradKernel(const Dims& x_dims, std::string name) : name_(std::move(name)), x_dims_(x_dims) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "kiln max-pool 2x2/2 gradient (first maximum of each window)"; }
  // The loop takes N * C, H and W as arguments: the same kernel for any X
  // with H and W even (2x2 windows, stride 2).
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    const Dims x = dims.empty() ? Dims{} : dims[0];
    std::string bad;
    if (x.size() != 4 || Numel(x) <= 0 || x[2] % 2 != 0 || x[3] % 2 != 0) {
      bad = "X must be [N, C, H, W] with H and W even and no zero dim, got " + (dims.empty() ? "none" : DimsToString(x));
    } else {
      const Dims pooled = {x[0], x[1], x[2] / 2, x[3] / 2};
      if (dims != std::vector<Dims>{x, pooled, pooled, x}) {
        bad = "expected X, Out, dOut, dX of dims " + DimsToString(x) + ", " + DimsToString(pooled) + ", " +
              DimsToString(pooled) + ", " + DimsToString(x);
      }
    }
    if (!bad.empty()) {
      if (why != nullptr) *why = name_ + ": " + bad;
      return nullptr;
    }
    return std::make_shared<MaxPool2x2GradKernel>(x, name_);
  }
  void Run(const runtime::BufferView* args) const override {
    MaxPool2x2Grad(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                   static_cast<const float*>(args[2].data), static_cast<float*>(args[3].data),
                   x_dims_[0] * x_dims_[1], x_dims_[2], x_dims_[3]);
  }

 private:
  std::string name_;
  Dims x_dims_;
};

}  // namespace

bool IsMaxPool2x2(const Cluster& c, int i) {
  const std::string x = c.In(i, "X");
  if (x.empty() || !c.IsF32(x)) return false;
  const std::vector<int64_t> two = {2, 2}, zero = {0, 0};
  if (c.Attr<std::string>(i, "pooling_type") != "max" || c.Attr<bool>(i, "global_pooling") ||
      c.Attr<std::vector<int64_t>>(i, "ksize") != two || c.Attr<std::vector<int64_t>>(i, "strides") != two ||
      c.Attr<std::vector<int64_t>>(i, "paddings") != zero) {
    return false;
  }
  const Dims xd = c.dims(x);
  if (xd.size() != 4 || xd[2] % 2 != 0 || xd[3] % 2 != 0) return false;
  const std::string out = c.type(i) == "pool2d" ? c.Out(i, "Out") : c.In(i, "Out");
  return !out.empty() && c.dims(out) == Dims{xd[0], xd[1], xd[2] / 2, xd[3] / 2};
}

MaxPoolGradUnit::MaxPoolGradUnit(const std::string& step, int op, Operands operands)
    : Unit(step, {op}, {operands.x, operands.out, operands.dout}, {operands.dx}), o_(std::move(operands)) {}

std::string MaxPoolGradUnit::Describe(const Cluster&) const { return "kiln max-pool 2x2/2 gradient kernel"; }

std::vector<EmittedKernel> MaxPoolGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<MaxPool2x2GradKernel>(o_.x_dims, ctx.KernelName("maxpool_grad"));
  k.args = {o_.x, o_.out, o_.dout, o_.dx};
  k.num_inputs = 3;
  return {k};
}

}  // namespace kiln::jit
