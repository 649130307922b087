// The unit kinds of the blocked_batch_norm step
// (compiler/lowering/blocked_batch_norm.h): batch_norm in training mode and
// its gradient as oneDNN primitives on an activation kept in the layout its
// convolution writes, with a relu after it fused when it is the only reader.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/onednn/batch_norm_kernels.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// batch_norm (training) of a kept X, and the relu after it when `mask` is
// given. Kernel args: X (kept), Scale, Bias, Mean, Variance -> Y, MeanOut,
// VarianceOut, SavedMean, SavedVariance[, mask].
class OneDnnBatchNormUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer x;  // KeptLayoutOf the normalised var
    std::string scale, bias, mean, variance;
    DerivedBuffer y;  // batch_norm's Y, or relu's Out with a mask; plain or kept
    std::string mean_out, variance_out, saved_mean, saved_variance;
    DerivedBuffer mask;  // ReluMaskOf y's var, or none (kNone, empty var)
  };
  OneDnnBatchNormUnit(const std::string& step, std::vector<int> ops, const BatchNormSpec& spec, Operands operands);
  const char* kind() const override { return "onednn_batch_norm"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const BatchNormSpec& spec() const { return spec_; }
  const Operands& operands() const { return o_; }

 private:
  BatchNormSpec spec_;
  Operands o_;
};

// batch_norm_grad (training) into a kept dX, with relu's gradient first
// when the forward fused the relu (`mask` given; dY is then relu's dOut).
// Kernel args: X (kept), Scale, SavedMean, SavedVariance, dY[, mask] -> dX
// (kept)[, dScale][, dBias].
class OneDnnBatchNormGradUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer x;  // KeptLayoutOf the normalised var
    std::string scale, saved_mean, saved_variance;
    DerivedBuffer dy;  // plain or kept
    DerivedBuffer mask;
    DerivedBuffer dx;                // KeptLayoutOf X@GRAD
    std::string dscale, dbias;       // "" when not wanted
  };
  OneDnnBatchNormGradUnit(const std::string& step, std::vector<int> ops, const BatchNormSpec& spec,
                          Operands operands);
  const char* kind() const override { return "onednn_batch_norm_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const BatchNormSpec& spec() const { return spec_; }
  const Operands& operands() const { return o_; }

 private:
  BatchNormSpec spec_;
  Operands o_;
};

}  // namespace kiln::jit
