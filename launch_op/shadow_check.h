// Online shadow checking (--jit_shadow_every): the comparison of a compiled
// launch's outputs with those of the cluster's framework ops run on copies of
// the same inputs. Fused kernels round differently from the framework's
// (another summation order, approximated exp/tanh/erf), so values agree to a
// tolerance, not bitwise; what the check catches is a kernel that is wrong.
//
// Some outputs are rounding noise amplified: Adam's step on a gradient that is
// zero up to rounding (the attention key bias, which softmax ignores) moves
// the weight by about lr * g / eps, so any two correct implementations
// disagree there by up to lr. An output that fails the tolerance is therefore
// compared once more with the framework's spread: the cluster's ops run again
// on the other kernels (reference kernels instead of oneDNN, or oneDNN when
// the run has it off: other summation orders), and the
// largest difference between the two framework results on that output, times
// kSpreadAllowance, is added to the tolerance.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch_op/launch_services.h"
#include "framework/jit_subgraph.h"
#include "framework/tensor.h"

namespace kiln::jit {

// How many times the framework's own spread an output may differ by.
constexpr double kSpreadAllowance = 4.0;

// How one output differs from its reference.
struct OutputDiff {
  int64_t numel = 0;
  int64_t mismatches = 0;   // elements beyond the tolerance (every element when dtype or dims differ)
  double max_abs = 0.0;     // over finite pairs
  double max_rel = 0.0;     // |got - want| / |want| over finite pairs with want != 0
  // How far the worst element is beyond the tolerance: max over elements of
  // |got - want| / (atol + rtol * |want|); infinite for a NaN/Inf mismatch or
  // differing dtype/dims. The output with the largest one is reported.
  double worst = 0.0;
  std::string first_mismatch;  // "flat index 5: jit 1.5, framework 0.25", or what differs
};

// Compares `got` (the compiled launch's) with `want` (the framework ops'),
// element by element: f32/f64 with the tolerance and the NaN/Inf rule of
// ShadowOptions, widened by kSpreadAllowance * `spread`; integer and bool
// dtypes exactly.
OutputDiff CompareOutput(const Tensor& got, const Tensor& want, const ShadowOptions& tolerances, double spread = 0.0);

// The largest |a - b| over elements finite in both (f32/f64; 0 for other
// dtypes, or when dtype or dims differ).
double Spread(const Tensor& a, const Tensor& b);

// The output furthest beyond the tolerance among got[o] vs want[o] (the
// cluster's outputs in JitSubgraph::outputs order; a null got[o] is an output
// handed out without data and is skipped), as a failure naming the first op
// of `sg` that writes it; nullopt when every output is within the tolerance.
// With `alt` (the framework's outputs on the reference kernels, same order),
// each output's tolerance is widened by its spread, Spread(alt[o], want[o]).
// The caller fills key, step and launch.
std::optional<ShadowFailure> FindShadowFailure(const JitSubgraph& sg, const std::vector<const Tensor*>& got,
                                               const std::vector<const Tensor*>& want,
                                               const ShadowOptions& tolerances,
                                               const std::vector<const Tensor*>& alt = {});

}  // namespace kiln::jit
