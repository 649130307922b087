// Optimizer updates appended to a training program: the learning rate and
// each parameter's optimizer state as persistable vars (initialised by the
// startup program), then one sgd / momentum / adam / adamw op per parameter, updating
// it in place. Shared by the model builders and the Python front end
// (kiln.optimizer.*.minimize).
#pragma once

#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/program_builder.h"

namespace kiln {

enum class OptimizerKind { kSgd, kMomentum, kAdam, kAdamW };
// "sgd" | "momentum" | "adam" | "adamw"; throws InvalidArgument otherwise.
OptimizerKind ParseOptimizer(const std::string& name);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;
  float momentum = 0.9f;  // momentum's mu
  bool use_nesterov = false;
  float beta1 = 0.9f;  // adam
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  // sgd, momentum, adam: Paddle's L2Decay, g += weight_decay * p inside the
  // update op (its regularization_coeff). adamw: the decoupled decay
  // p *= 1 - lr * weight_decay (its coeff). Zero: no decay.
  float weight_decay = 0.f;
  // Parameters that take no weight decay (AdamW's apply_decay_param_fun
  // returned false for them): their adamw op has coeff 0.
  std::set<std::string> no_decay;
  // Gradient clipping (Paddle's grad_clip), applied to the raw gradient
  // inside the update ops, before weight decay. grad_clip_norm > 0:
  // ClipGradByGlobalNorm, one clip_by_global_norm op over all the gradients
  // whose Scale every update reads (GradScale). grad_clip_min/max finite:
  // ClipGradByValue, g clamped to [min, max] (update-op attributes).
  float grad_clip_norm = 0.f;
  float grad_clip_min = -std::numeric_limits<float>::infinity();
  float grad_clip_max = std::numeric_limits<float>::infinity();
  // The learning-rate var; empty: "learning_rate", or a fresh name when the
  // program declares that one already.
  std::string lr_name;
  // Gradient merge (grad_merge.h): update every grad_merge_steps steps with
  // the mean of the gradients (their sum when !grad_merge_avg). 1: every step.
  int64_t grad_merge_steps = 1;
  bool grad_merge_avg = true;
};

// Declares the learning rate (config.lr_name) and the state of every parameter ("<p>.velocity";
// "<p>.moment1", "<p>.moment2", "<p>.beta1_pow", "<p>.beta2_pow" for adam and adamw), then
// appends the update of each (param, grad) pair to b.main(), with op_role
// "optimize"; with grad_merge_steps > 1, the counter "<lr>.grad_merge_step"
// and each parameter's "<p>.grad_merge" too, the updates reading the merged
// gradients and the counter's flag (grad_merge.h); with grad_clip_norm > 0,
// one clip_by_global_norm of the gradients the updates read (the merged ones
// under gradient merge), before the updates, which read its Scale. Returns the
// learning-rate var. Throws InvalidArgument for a learning rate that is not
// finite and positive, or hyperparameters outside their range
// (grad_clip_norm not finite or < 0, grad_clip_min not below grad_clip_max).
std::string AppendOptimizer(ProgramBuilder& b, const std::vector<std::pair<std::string, std::string>>& params_grads,
                            const OptimizerConfig& config);

}  // namespace kiln
