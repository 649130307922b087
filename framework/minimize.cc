#include "framework/minimize.h"

#include <algorithm>
#include <set>

#include "framework/backward.h"
#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/program_builder.h"
#include "framework/suggest.h"

namespace kiln {
namespace {

// The parameters the block's optimizer ops update already.
std::set<std::string> UpdatedParams(const proto::BlockDesc& block) {
  std::set<std::string> out;
  for (const auto& op : block.ops()) {
    if (!IsParameterUpdate(op)) continue;
    for (const auto& p : InputArgs(op, "Param")) out.insert(p);
  }
  return out;
}

void CheckNotUpdated(const proto::BlockDesc& block, const std::string& loss, const ParamGrads& params) {
  const std::set<std::string> updated = UpdatedParams(block);
  std::vector<std::string> again;
  for (const auto& pg : params) {
    if (updated.count(pg.first)) again.push_back(pg.first);
  }
  if (again.empty()) return;
  ThrowInvalidArgument("minimize: the program already updates ", QuotedNames(again),
                       " (minimize was applied to it before); minimizing '", loss,
                       "' again would update them twice per step. For a second optimizer, give it a parameter_list ",
                       "of other parameters; to change the optimizer, build the program again");
}

}  // namespace

void CheckScalarLoss(const proto::BlockDesc& block, const std::string& loss, const std::string& who) {
  const proto::VarDesc* v = FindVarDesc(block, loss);
  if (v == nullptr) ThrowNotFound(who, ": the program declares no variable '", loss, "'");
  const Dims dims = VarDims(*v);
  if (std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d == 1; })) return;
  ThrowInvalidArgument(who, ": the loss '", loss, "' has shape ", DimsToString(dims),
                       "; a loss must be one element (reduce it first, e.g. with kiln.nn.mean)");
}

ParamGrads AppendBackwardFor(proto::ProgramDesc* program, const std::string& loss,
                             const std::optional<std::vector<std::string>>& parameters) {
  CheckScalarLoss(program->blocks(0), loss, "append_backward");
  proto::ProgramDesc trial = *program;
  const ParamGrads all = AppendBackward(&trial, loss);
  if (!parameters) {
    *program = std::move(trial);
    return all;
  }
  for (const auto& w : *parameters) {
    if (std::none_of(all.begin(), all.end(), [&w](const auto& pg) { return pg.first == w; })) {
      ThrowInvalidArgument("parameter_list: '", w, "' gets no gradient from the loss '", loss,
                           "' (not a trainable parameter it depends on: stop_gradient, or not on its path)");
    }
  }
  ParamGrads kept;
  for (const auto& pg : all) {
    if (std::find(parameters->begin(), parameters->end(), pg.first) != parameters->end()) kept.push_back(pg);
  }
  *program = std::move(trial);
  return kept;
}

Minimized Minimize(proto::ProgramDesc* main, proto::ProgramDesc* startup, uint64_t seed, const std::string& loss,
                   const OptimizerConfig& config, const std::optional<std::vector<std::string>>& parameters) {
  CheckScalarLoss(main->blocks(0), loss, "minimize");
  proto::ProgramDesc trial = *main;
  const ParamGrads params = AppendBackwardFor(&trial, loss, parameters);
  CheckNotUpdated(main->blocks(0), loss, params);
  if (params.empty()) ThrowInvalidArgument("minimize: the loss '", loss, "' depends on no trainable parameter");
  proto::ProgramDesc trial_startup = *startup;
  ProgramBuilder b(&trial, &trial_startup, seed);
  Minimized out{AppendOptimizer(b, params, config), params};
  *main = std::move(trial);
  *startup = std::move(trial_startup);
  return out;
}

}  // namespace kiln
