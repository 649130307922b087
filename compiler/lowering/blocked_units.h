// The unit kinds of the blocked_layout step (compiler/lowering/blocked_layout.h):
// kernels that read or write an activation kept inside the cluster in the
// layout its oneDNN convolution writes (framework/act_layout.h: nChw16c,
// nChw8c or nhwc), under the name "<var>@<layout>".
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/blocked_pool.h"
#include "compiler/lowering/unit.h"
#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

// "<var>@nChw16c" and so on.
std::string KeptName(const std::string& var, ActLayout layout);
// The desc of `kept` (a KeptName of a [N,C,H,W] f32 var of the cluster):
// `dtype` (f32 or bf16) with ActStoredDims, not persistable.
proto::VarDesc KeptVar(const Cluster& c, const std::string& kept, ActLayout layout,
                       DataType dtype = DataType::kFP32);

// pool2d (max, 2x2, stride 2) of a blocked X into a plain Out.
class BlockedMaxPoolUnit final : public Unit {
 public:
  // x_dims: X's logical [N,C,H,W].
  BlockedMaxPoolUnit(const std::string& step, int op, std::string x_kept, std::string out, Dims x_dims,
                     ActLayout layout);
  const char* kind() const override { return "blocked_max_pool"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  std::string x_, out_;
  Dims x_dims_;
  ActLayout layout_;
};

// pool2d_grad (max, 2x2, stride 2), and the relu_grad after it (on X, relu's
// Out) when given: X kept, Out and dOut plain, the result kept as `out`
// (f32, or bf16 for bf16 convolutions to read). With a fifth arg (bf16
// only), also the bias gradient: the f32 sum of the result over N, H, W
// before its rounding (the elementwise_add_grad among `ops`).
class BlockedMaxPoolGradUnit final : public Unit {
 public:
  // args: X (kept), Out, dOut, dX or relu_grad's X@GRAD (kept)[, dBias].
  BlockedMaxPoolGradUnit(const std::string& step, std::vector<int> ops, std::vector<std::string> args, Dims x_dims,
                         ActLayout layout, PoolGradThen then, DataType out = DataType::kFP32);
  const char* kind() const override { return "blocked_max_pool_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  std::vector<std::string> args_;
  Dims x_dims_;
  ActLayout layout_;
  PoolGradThen then_;
  DataType out_;
};

// conv2d_grad through oneDNN's backward primitives, with the gradient of
// the [C_out] bias added after the conv (elementwise_add_grad's Y@GRAD: the
// sum of dY over N, H, W) from the weights' backward. dY may be blocked.
class ConvGradUnit final : public Unit {
 public:
  struct Args {
    std::string input, filter, dy;     // dy: in spec.dst_layout
    std::string dinput, dfilter, dbias;  // dinput, dbias: "" when not wanted
    DataType dy_dtype = DataType::kFP32;  // kBF16: made in bf16 for bf16 compute
  };
  ConvGradUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec, Args args);
  const char* kind() const override { return "onednn_conv_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  FusedConvSpec spec_;
  Args args_;
};

}  // namespace kiln::jit
