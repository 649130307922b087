// The unit kinds of the blocked_layout step (compiler/lowering/blocked_layout.h):
// kernels that read or write an activation kept inside the cluster in the
// layout its oneDNN convolution writes (framework/act_layout.h: nChw16c,
// nChw8c or nhwc), a derived buffer (KeptLayoutOf).
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/blocked_pool.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// pool2d (max, 2x2, stride 2) of a kept X into a plain Out, and where each
// window took its maximum (the gradient's routing: X need not live until
// the backward). Kernel args: X (kept) -> Out, argmax.
class BlockedMaxPoolUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer x;  // KeptLayoutOf the pooled var
    std::string out;
    DerivedBuffer argmax;  // PoolArgmaxOf out
    Dims x_dims;  // X's logical [N,C,H,W]
  };
  BlockedMaxPoolUnit(const std::string& step, int op, Operands operands);
  const char* kind() const override { return "blocked_max_pool"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
};

// pool2d_grad (max, 2x2, stride 2), and the relu_grad after it (on X, relu's
// Out) when given, from the forward's argmax: dOut plain or kept as dX,
// the result kept as dx (f32, or bf16 for bf16 convolutions to read). With a dbias (bf16
// only), also the bias gradient: the f32 sum of the result over N, H, W
// before its rounding (the elementwise_add_grad among `ops`). Kernel args:
// argmax, dOut -> dX (kept)[, dBias].
class BlockedMaxPoolGradUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer argmax;  // PoolArgmaxOf the pooled output
    // The pooled output's gradient: plain, or kept (f32) in dx's layout.
    DerivedBuffer dout;
    DerivedBuffer dx;   // KeptLayoutOf dX or relu_grad's X@GRAD
    std::string dbias;  // "" when not wanted
    Dims x_dims;        // X's logical [N,C,H,W]
  };
  BlockedMaxPoolGradUnit(const std::string& step, std::vector<int> ops, Operands operands, PoolGradThen then);
  const char* kind() const override { return "blocked_max_pool_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const Operands& operands() const { return o_; }
  PoolGradThen then() const { return then_; }

 private:
  Operands o_;
  PoolGradThen then_;
};

// conv2d_grad through oneDNN's backward primitives, with the gradient of
// the [C_out] bias added after the conv (elementwise_add_grad's Y@GRAD: the
// sum of dY over N, H, W) from the weights' backward. dY may be kept.
// Kernel args: Input, Filter, dY -> [dInput,] dFilter[, dBias].
class ConvGradUnit final : public Unit {
 public:
  struct Operands {
    // A var, or the var kept in spec.src_layout (KeptLayoutOf): then dinput
    // is written in that layout too. A plain Input's dinput may be kept
    // (f32) on its own (spec.dinput_layout).
    DerivedBuffer input;
    std::string filter;
    // In spec.dst_layout (KeptLayoutOf); its dtype kBF16 when made in bf16
    // for bf16 compute.
    DerivedBuffer dy;
    DerivedBuffer dinput;                 // "" when not wanted
    std::string dfilter, dbias;           // dbias: "" when not wanted
  };
  ConvGradUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec, Operands operands);
  const char* kind() const override { return "onednn_conv_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const FusedConvSpec& spec() const { return spec_; }
  const Operands& operands() const { return o_; }

 private:
  FusedConvSpec spec_;
  Operands o_;
};

}  // namespace kiln::jit
