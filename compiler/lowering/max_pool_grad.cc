#include "compiler/lowering/max_pool_grad.h"

#include "compiler/kernels/gemv.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kMaxPoolGradStep;

class MaxPool2x2GradKernel final : public runtime::Kernel {
 public:
  MaxPool2x2GradKernel(const Dims& x_dims, std::string name) : name_(std::move(name)), x_dims_(x_dims) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "kiln max-pool 2x2/2 gradient (first maximum of each window)"; }
  void Run(const runtime::BufferView* args) const override {
    MaxPool2x2Grad(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                   static_cast<const float*>(args[2].data), static_cast<float*>(args[3].data),
                   x_dims_[0] * x_dims_[1], x_dims_[2], x_dims_[3]);
  }

 private:
  std::string name_;
  Dims x_dims_;
};

bool Matches(const Cluster& c, int i) {
  const std::string out = c.In(i, "Out"), dout = c.In(i, GradVarName("Out"));
  const std::string dx = c.Out(i, GradVarName("X"));
  if (out.empty() || dout.empty() || dx.empty() || !IsMaxPool2x2(c, i)) return false;
  return c.IsF32(out) && c.IsF32(dout) && c.dims(out) == c.dims(dout);
}

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

MaxPoolGradUnit::MaxPoolGradUnit(const std::string& step, int op, std::vector<std::string> args, Dims x_dims)
    : Unit(step, {op}, {args[0], args[1], args[2]}, {args[3]}), args_(std::move(args)), x_dims_(std::move(x_dims)) {}

std::string MaxPoolGradUnit::Describe(const Cluster&) const { return "kiln max-pool 2x2/2 gradient kernel"; }

std::vector<EmittedKernel> MaxPoolGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<MaxPool2x2GradKernel>(x_dims_, ctx.KernelName("maxpool_grad"));
  k.args = args_;
  k.num_inputs = 3;
  return {k};
}

Units LowerMaxPoolGrad(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().fuse_elementwise) return units;
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || c.type(i) != "pool2d_grad" || c.Excluded(kStep, i) || !Matches(c, i)) continue;
    trace.Match(OpList(c, {i}) + " -> kiln max-pool 2x2/2 gradient kernel");
    const std::string x = c.In(i, "X");
    unit = std::make_unique<MaxPoolGradUnit>(
        kStep, i, std::vector<std::string>{x, c.In(i, "Out"), c.In(i, GradVarName("Out")), c.Out(i, GradVarName("X"))},
        c.dims(x));
  }
  return units;
}

}  // namespace kiln::jit
