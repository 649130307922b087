#include "compiler/lowering/blocked_units.h"

#include <utility>

#include "compiler/kernels/blocked_pool.h"
#include "framework/error.h"

namespace kiln::jit {

std::string KeptName(const std::string& var, ActLayout layout) { return var + "@" + ActLayoutName(layout); }

proto::VarDesc KeptVar(const Cluster& c, const std::string& kept, ActLayout layout, DataType dtype) {
  const std::string suffix = KeptName("", layout);
  KILN_CHECK(kept.size() > suffix.size() && kept.compare(kept.size() - suffix.size(), suffix.size(), suffix) == 0);
  const std::string var = kept.substr(0, kept.size() - suffix.size());
  const Dims d = c.dims(var);
  KILN_CHECK(d.size() == 4 && c.IsF32(var));
  proto::VarDesc v = c.var(var);
  v.set_name(kept);
  v.set_persistable(false);
  if (dtype == DataType::kBF16) v.set_dtype(proto::BF16);
  v.clear_dims();
  for (int64_t x : ActStoredDims(layout, d)) v.add_dims(x);
  return v;
}

namespace {

class BlockedMaxPoolKernel final : public runtime::Kernel {
 public:
  BlockedMaxPoolKernel(std::string name, const Dims& x_dims, ActLayout layout)
      : name_(std::move(name)), x_(x_dims), layout_(layout), group_(ActChannelGroup(layout, x_dims[1])) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return std::string("kiln max-pool 2x2/2 from ") + ActLayoutName(layout_) + " into plain NCHW";
  }
  // args: X (kept), Out.
  void Run(const runtime::BufferView* args) const override {
    MaxPool2x2BlockedToPlain(static_cast<const float*>(args[0].data), static_cast<float*>(args[1].data), x_[0], x_[1],
                             x_[2], x_[3], group_);
  }

 private:
  std::string name_;
  Dims x_;
  ActLayout layout_;
  int64_t group_;
};

class BlockedMaxPoolGradKernel final : public runtime::Kernel {
 public:
  BlockedMaxPoolGradKernel(std::string name, const Dims& x_dims, ActLayout layout, PoolGradThen then, DataType out,
                           bool with_dbias)
      : name_(std::move(name)),
        x_(x_dims),
        layout_(layout),
        group_(ActChannelGroup(layout, x_dims[1])),
        then_(then),
        out_(out),
        with_dbias_(with_dbias) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "kiln max-pool 2x2/2 gradient" +
           std::string(then_ == PoolGradThen::kReluGrad ? " and relu gradient" : "") + ", X and dX in " +
           ActLayoutName(layout_) + (out_ == DataType::kBF16 ? ", dX stored in bf16" : "") +
           (with_dbias_ ? ", the bias gradient summed in f32" : "") + " (first maximum of each window)";
  }
  // args: X (kept), Out, dOut, dX (kept)[, dBias].
  void Run(const runtime::BufferView* args) const override {
    const auto* x = static_cast<const float*>(args[0].data);
    const auto* out = static_cast<const float*>(args[1].data);
    const auto* dout = static_cast<const float*>(args[2].data);
    if (out_ == DataType::kBF16) {
      MaxPool2x2GradPlainToBlockedBf16(x, out, dout, static_cast<uint16_t*>(args[3].data), x_[0], x_[1], x_[2], x_[3],
                                       group_, then_, with_dbias_ ? static_cast<float*>(args[4].data) : nullptr);
    } else {
      MaxPool2x2GradPlainToBlocked(x, out, dout, static_cast<float*>(args[3].data), x_[0], x_[1], x_[2], x_[3], group_,
                                   then_);
    }
  }

 private:
  std::string name_;
  Dims x_;
  ActLayout layout_;
  int64_t group_;
  PoolGradThen then_;
  DataType out_;
  bool with_dbias_;
};

}  // namespace

// ---- BlockedMaxPoolUnit --------------------------------------------------------------

BlockedMaxPoolUnit::BlockedMaxPoolUnit(const std::string& step, int op, std::string x_kept, std::string out,
                                       Dims x_dims, ActLayout layout)
    : Unit(step, {op}, {x_kept}, {out}),
      x_(std::move(x_kept)),
      out_(std::move(out)),
      x_dims_(std::move(x_dims)),
      layout_(layout) {}

std::string BlockedMaxPoolUnit::Describe(const Cluster&) const {
  return "kiln max-pool 2x2/2 kernel reading " + x_ + ", writing " + out_ + " plain";
}

std::vector<EmittedKernel> BlockedMaxPoolUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<BlockedMaxPoolKernel>(ctx.KernelName("maxpool"), x_dims_, layout_);
  k.args = {x_, out_};
  k.num_inputs = 1;
  return {k};
}

// ---- BlockedMaxPoolGradUnit ----------------------------------------------------------

BlockedMaxPoolGradUnit::BlockedMaxPoolGradUnit(const std::string& step, std::vector<int> ops,
                                               std::vector<std::string> args, Dims x_dims, ActLayout layout,
                                               PoolGradThen then, DataType out)
    : Unit(step, std::move(ops), {args.at(0), args.at(1), args.at(2)},
           args.size() == 5 ? std::set<std::string>{args[3], args[4]} : std::set<std::string>{args.at(3)}),
      args_(std::move(args)),
      x_dims_(std::move(x_dims)),
      layout_(layout),
      then_(then),
      out_(out) {}

std::string BlockedMaxPoolGradUnit::Describe(const Cluster&) const {
  return "kiln max-pool 2x2/2 gradient" + std::string(then_ == PoolGradThen::kReluGrad ? " and relu gradient" : "") +
         " kernel reading " + args_[0] + ", writing " + args_[3];
}

std::vector<EmittedKernel> BlockedMaxPoolGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  const bool with_dbias = args_.size() == 5;
  KILN_CHECK(!with_dbias || out_ == DataType::kBF16);
  k.kernel = std::make_shared<BlockedMaxPoolGradKernel>(ctx.KernelName("maxpool_grad"), x_dims_, layout_, then_, out_,
                                                        with_dbias);
  k.args = args_;
  k.num_inputs = 3;
  k.new_vars.push_back(KeptVar(ctx.cluster(), args_[3], layout_, out_));
  return {k};
}

// ---- ConvGradUnit --------------------------------------------------------------------

namespace {

std::set<std::string> Written(const ConvGradUnit::Args& a) {
  std::set<std::string> w = {a.dfilter};
  if (!a.dinput.empty()) w.insert(a.dinput);
  if (!a.dbias.empty()) w.insert(a.dbias);
  return w;
}

}  // namespace

ConvGradUnit::ConvGradUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec, Args args)
    : Unit(step, std::move(ops), {args.input, args.filter, args.dy}, Written(args)), spec_(spec), args_(std::move(args)) {}

std::string ConvGradUnit::Describe(const Cluster&) const {
  std::string s = "oneDNN convolution backward: ";
  if (!args_.dinput.empty()) s += args_.dinput + ", ";
  s += args_.dfilter;
  if (!args_.dbias.empty()) s += " and " + args_.dbias + " (the bias gradient in the weights' pass)";
  return s + " from " + args_.dy;
}

std::vector<EmittedKernel> ConvGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeConvGradKernel(spec_, !args_.dinput.empty(), !args_.dbias.empty(), ctx.KernelName("conv_grad"),
                                args_.dy_dtype);
  k.args = {args_.input, args_.filter, args_.dy};
  if (!args_.dinput.empty()) k.args.push_back(args_.dinput);
  k.args.push_back(args_.dfilter);
  if (!args_.dbias.empty()) k.args.push_back(args_.dbias);
  k.num_inputs = 3;
  return {k};
}

}  // namespace kiln::jit
