// minimize(loss) as the Python front end calls it: the backward pass of a
// one-element loss and one optimizer update per parameter, checked before
// anything changes. A loss of more than one element would be differentiated
// as its sum (a per-row loss trains at batch size times the step), and a
// second update of a parameter (minimize applied again) would take two
// steps per step: both are refused.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/optimizer_builder.h"
#include "framework/proto/framework.pb.h"

namespace kiln {

using ParamGrads = std::vector<std::pair<std::string, std::string>>;

// Throws InvalidArgument unless `loss` is declared with one element, naming
// its shape (`who` starts the message: "minimize", "append_backward").
void CheckScalarLoss(const proto::BlockDesc& block, const std::string& loss, const std::string& who);

// AppendBackward of a one-element loss, its (param, grad) pairs limited to
// `parameters` when given (each must be one the loss trains). The program
// is unchanged when it throws.
ParamGrads AppendBackwardFor(proto::ProgramDesc* program, const std::string& loss,
                             const std::optional<std::vector<std::string>>& parameters);

struct Minimized {
  std::string lr;  // the learning-rate var
  ParamGrads params_grads;
};

// AppendBackwardFor, then the optimizer's state (in `startup`, seeded with
// `seed`) and its updates. Throws, changing neither program, for a loss that
// is not one element, a parameter the program's optimizer ops update
// already, or a loss that trains no parameter.
Minimized Minimize(proto::ProgramDesc* main, proto::ProgramDesc* startup, uint64_t seed, const std::string& loss,
                   const OptimizerConfig& config, const std::optional<std::vector<std::string>>& parameters);

}  // namespace kiln
