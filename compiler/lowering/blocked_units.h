// The unit kinds of the blocked_layout step (compiler/lowering/blocked_layout.h):
// kernels that read or write an activation kept inside the cluster in
// oneDNN's channel-blocked layout nChw<b>c ([N, ceil(C/b), H, W, b], channel
// c at block c/b and lane c%b, the lanes past C zero), under the name
// "<var>@nChw<b>c".
#pragma once

#include <string>
#include <vector>

#include "compiler/blocked_pool.h"
#include "compiler/lowering/unit.h"
#include "compiler/onednn_lowering.h"

namespace kiln::jit {

// "<var>@nChw<b>c".
std::string BlockedName(const std::string& var, int64_t block);
// The desc of `blocked` (a BlockedName of a [N,C,H,W] f32 var of the
// cluster): f32 [N, ceil(C/b), H, W, b], not persistable.
proto::VarDesc BlockedVar(const Cluster& c, const std::string& blocked, int64_t block);

// pool2d (max, 2x2, stride 2) of a blocked X into a plain Out.
class BlockedMaxPoolUnit final : public Unit {
 public:
  // x_dims: X's logical [N,C,H,W].
  BlockedMaxPoolUnit(const std::string& step, int op, std::string x_blocked, std::string out, Dims x_dims,
                     int64_t block);
  const char* kind() const override { return "blocked_max_pool"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  std::string x_, out_;
  Dims x_dims_;
  int64_t block_;
};

// pool2d_grad (max, 2x2, stride 2), and the relu_grad after it (on X, relu's
// Out) when given: X blocked, Out and dOut plain, the result blocked.
class BlockedMaxPoolGradUnit final : public Unit {
 public:
  // args: X (blocked), Out, dOut, dX or relu_grad's X@GRAD (blocked).
  BlockedMaxPoolGradUnit(const std::string& step, std::vector<int> ops, std::vector<std::string> args, Dims x_dims,
                         int64_t block, PoolGradThen then);
  const char* kind() const override { return "blocked_max_pool_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  std::vector<std::string> args_;
  Dims x_dims_;
  int64_t block_;
  PoolGradThen then_;
};

// conv2d_grad through oneDNN's backward primitives, with the gradient of
// the [C_out] bias added after the conv (elementwise_add_grad's Y@GRAD: the
// sum of dY over N, H, W) from the weights' backward. dY may be blocked.
class ConvGradUnit final : public Unit {
 public:
  struct Args {
    std::string input, filter, dy;     // dy: plain, or blocked as spec.dst_block says
    std::string dinput, dfilter, dbias;  // dinput, dbias: "" when not wanted
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
