#include "compiler/lowering/units/matmul_sgd.h"

#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

MatmulSgdUnit::MatmulSgdUnit(const std::string& step, std::vector<int> ops, Operands operands, bool keep_old)
    : Unit(step, std::move(ops), {operands.x, operands.dy.Name(), operands.lr, operands.w},
           keep_old ? std::set<std::string>{operands.w, OldValueOf(operands.w).Name()}
                    : std::set<std::string>{operands.w}),
      o_(std::move(operands)),
      keep_old_(keep_old) {}

std::string MatmulSgdUnit::Describe(const Cluster&) const {
  return std::string("oneDNN matmul W -= lr * X^T dY (weight gradient and sgd step in one primitive)") +
         (keep_old_ ? ", before dX, keeping the old W" : "") + (o_.dy.dtype == DataType::kBF16 ? ", dY in bf16" : "");
}

std::vector<EmittedKernel> MatmulSgdUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel =
      MakeMatmulSgdKernel(o_.x_dims, o_.w_dims, ctx.cluster().options().OneDnnSettings(), ctx.KernelName("matmul_sgd"),
                          keep_old_, ctx.cluster().options().amp_compute, ctx.cluster().options().isa, o_.dy.dtype);
  k.args = {o_.x, o_.dy.Name(), o_.lr, o_.w};
  k.num_inputs = 4;
  if (keep_old_) {
    k.args.push_back(old_w().Name());
    k.new_vars.push_back(old_w().Desc(ctx.cluster()));
  }
  // lr times the smaller operand: a temp of the plan, so it takes a dead
  // buffer's place instead of an allocation of its own during the run.
  const MatmulSgdScratch scratch =
      MatmulSgdScratchOf(o_.x_dims, o_.w_dims, ctx.cluster().options().amp_compute, o_.dy.dtype);
  proto::VarDesc sv;
  sv.set_name(o_.w + "@LR_SCALED");
  sv.set_dtype(scratch.dtype == DataType::kBF16 ? proto::BF16 : proto::FP32);
  sv.add_dims(scratch.numel);
  k.args.push_back(sv.name());
  k.new_vars.push_back(sv);
  k.args.push_back(o_.w);
  return {k};
}

}  // namespace kiln::jit
