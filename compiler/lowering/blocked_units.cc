#include "compiler/lowering/blocked_units.h"

#include <utility>

#include "compiler/blocked_pool.h"
#include "framework/error.h"

namespace kiln::jit {

std::string BlockedName(const std::string& var, int64_t block) {
  return var + "@nChw" + std::to_string(block) + "c";
}

proto::VarDesc BlockedVar(const Cluster& c, const std::string& blocked, int64_t block) {
  const std::string suffix = BlockedName("", block);
  KILN_CHECK(blocked.size() > suffix.size() && blocked.compare(blocked.size() - suffix.size(), suffix.size(), suffix) == 0);
  const std::string var = blocked.substr(0, blocked.size() - suffix.size());
  const Dims d = c.dims(var);
  KILN_CHECK(d.size() == 4 && c.IsF32(var));
  proto::VarDesc v = c.var(var);
  v.set_name(blocked);
  v.set_persistable(false);
  v.clear_dims();
  for (int64_t x : {d[0], (d[1] + block - 1) / block, d[2], d[3], block}) v.add_dims(x);
  return v;
}

namespace {

std::string LayoutText(int64_t block) { return "nChw" + std::to_string(block) + "c"; }

class BlockedMaxPoolKernel final : public runtime::Kernel {
 public:
  // then: the gradient's kernel (nullptr: the forward's).
  BlockedMaxPoolKernel(std::string name, const Dims& x_dims, int64_t block, const PoolGradThen* then)
      : name_(std::move(name)), x_(x_dims), block_(block), grad_(then != nullptr), then_(then ? *then : PoolGradThen{}) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    if (!grad_) return "kiln max-pool 2x2/2 from " + LayoutText(block_) + " into plain NCHW";
    return "kiln max-pool 2x2/2 gradient" +
           std::string(then_ == PoolGradThen::kReluGrad ? " and relu gradient" : "") + ", X and dX in " +
           LayoutText(block_) + " (first maximum of each window)";
  }
  void Run(const runtime::BufferView* args) const override {
    if (grad_) {
      MaxPool2x2GradPlainToBlocked(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                                   static_cast<const float*>(args[2].data), static_cast<float*>(args[3].data), x_[0],
                                   x_[1], x_[2], x_[3], block_, then_);
    } else {
      MaxPool2x2BlockedToPlain(static_cast<const float*>(args[0].data), static_cast<float*>(args[1].data), x_[0],
                               x_[1], x_[2], x_[3], block_);
    }
  }

 private:
  std::string name_;
  Dims x_;
  int64_t block_;
  bool grad_;
  PoolGradThen then_;
};

}  // namespace

// ---- BlockedMaxPoolUnit --------------------------------------------------------------

BlockedMaxPoolUnit::BlockedMaxPoolUnit(const std::string& step, int op, std::string x_blocked, std::string out,
                                       Dims x_dims, int64_t block)
    : Unit(step, {op}, {x_blocked}, {out}),
      x_(std::move(x_blocked)),
      out_(std::move(out)),
      x_dims_(std::move(x_dims)),
      block_(block) {}

std::string BlockedMaxPoolUnit::Describe(const Cluster&) const {
  return "kiln max-pool 2x2/2 kernel reading " + x_ + ", writing " + out_ + " plain";
}

std::vector<EmittedKernel> BlockedMaxPoolUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<BlockedMaxPoolKernel>(ctx.KernelName("maxpool"), x_dims_, block_, nullptr);
  k.args = {x_, out_};
  k.num_inputs = 1;
  return {k};
}

// ---- BlockedMaxPoolGradUnit ----------------------------------------------------------

BlockedMaxPoolGradUnit::BlockedMaxPoolGradUnit(const std::string& step, std::vector<int> ops,
                                               std::vector<std::string> args, Dims x_dims, int64_t block,
                                               PoolGradThen then)
    : Unit(step, std::move(ops), {args.at(0), args.at(1), args.at(2)}, {args.at(3)}),
      args_(std::move(args)),
      x_dims_(std::move(x_dims)),
      block_(block),
      then_(then) {}

std::string BlockedMaxPoolGradUnit::Describe(const Cluster&) const {
  return "kiln max-pool 2x2/2 gradient" + std::string(then_ == PoolGradThen::kReluGrad ? " and relu gradient" : "") +
         " kernel reading " + args_[0] + ", writing " + args_[3];
}

std::vector<EmittedKernel> BlockedMaxPoolGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<BlockedMaxPoolKernel>(ctx.KernelName("maxpool_grad"), x_dims_, block_, &then_);
  k.args = args_;
  k.num_inputs = 3;
  k.new_vars.push_back(BlockedVar(ctx.cluster(), args_[3], block_));
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
  k.kernel = MakeConvGradKernel(spec_, !args_.dinput.empty(), !args_.dbias.empty(), ctx.KernelName("conv_grad"));
  k.args = {args_.input, args_.filter, args_.dy};
  if (!args_.dinput.empty()) k.args.push_back(args_.dinput);
  k.args.push_back(args_.dfilter);
  if (!args_.dbias.empty()) k.args.push_back(args_.dbias);
  k.num_inputs = 3;
  return {k};
}

}  // namespace kiln::jit
