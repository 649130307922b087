// kiln._kiln's autodiff and optimizers over Python's programs: minimize,
// append_backward and gradients. Each checks everything before the program
// changes: a call that raises leaves the program (and its startup program)
// as it was.
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/backward.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/optimizer_builder.h"
#include "framework/program_builder.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

using ParamsGrads = std::vector<std::pair<std::string, std::string>>;

OptimizerConfig OptimizerFromPython(const std::string& kind, const py::dict& args) {
  OptimizerConfig c;
  c.kind = ParseOptimizer(kind);
  for (const auto& [k, v] : args) {
    const std::string key = k.cast<std::string>();
    if (key == "learning_rate") c.lr = v.cast<float>();
    else if (key == "momentum") c.momentum = v.cast<float>();
    else if (key == "use_nesterov") c.use_nesterov = v.cast<bool>();
    else if (key == "beta1") c.beta1 = v.cast<float>();
    else if (key == "beta2") c.beta2 = v.cast<float>();
    else if (key == "epsilon") c.epsilon = v.cast<float>();
    else ThrowInvalidArgument("optimizer ", kind, ": unknown setting '", key, "'");
  }
  return c;
}

// A loss is one element: a per-row loss would be differentiated as its sum
// and train at batch-size times the step.
void CheckScalarLoss(const Program& p, const std::string& loss, const char* who) {
  const proto::VarDesc* v = FindVarDesc(p.desc().blocks(0), loss);
  if (v == nullptr) ThrowNotFound(who, ": the program declares no variable '", loss, "'");
  const Dims dims = VarDims(*v);
  if (std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d == 1; })) return;
  ThrowInvalidArgument(who, ": the loss '", loss, "' has shape ", DimsToString(dims),
                       "; a loss must be one element (reduce it first, e.g. with kiln.nn.mean)");
}

// The parameters the program's optimizer ops update already.
std::set<std::string> UpdatedParams(const proto::BlockDesc& block) {
  std::set<std::string> out;
  for (const auto& op : block.ops()) {
    const OpInfo* info = OpRegistry::Global().Find(op.type());
    if (info == nullptr || info->jit != JitLowering::kOptimizer) continue;
    for (const auto& p : InputArgs(op, "Param")) out.insert(p);
  }
  return out;
}

ParamsGrads Select(const ParamsGrads& all, const py::object& parameters) {
  if (parameters.is_none()) return all;
  const auto wanted = parameters.cast<std::vector<std::string>>();
  for (const auto& w : wanted) {
    if (std::none_of(all.begin(), all.end(), [&w](const auto& pg) { return pg.first == w; })) {
      ThrowInvalidArgument("parameter_list: '", w, "' is not a parameter the loss depends on");
    }
  }
  ParamsGrads kept;
  for (const auto& pg : all) {
    if (std::find(wanted.begin(), wanted.end(), pg.first) != wanted.end()) kept.push_back(pg);
  }
  return kept;
}

// Refuses a second optimizer step for a parameter: minimize applied twice
// (a notebook cell run again) would update it twice per step.
void CheckNotUpdated(const proto::BlockDesc& block, const std::string& loss, const ParamsGrads& params) {
  const std::set<std::string> updated = UpdatedParams(block);
  std::vector<std::string> again;
  for (const auto& pg : params) {
    if (updated.count(pg.first)) again.push_back(pg.first);
  }
  if (again.empty()) return;
  std::string names;
  for (size_t i = 0; i < again.size() && i < 3; ++i) names += (i ? ", '" : "'") + again[i] + "'";
  if (again.size() > 3) names += " and " + std::to_string(again.size() - 3) + " more";
  ThrowInvalidArgument("minimize: the program already updates ", names, " (minimize was applied to it before); ",
                       "minimizing '", loss, "' again would update them twice per step. For a second optimizer, ",
                       "give it a parameter_list of other parameters; to change the optimizer, build the program ",
                       "again");
}

std::pair<std::string, ParamsGrads> Minimize(Program& main, Program& startup, const std::string& loss,
                                             const std::string& kind, const py::dict& args,
                                             const py::object& parameters, const std::string& lr_name) {
  OptimizerConfig config = OptimizerFromPython(kind, args);
  config.lr_name = lr_name;
  CheckScalarLoss(main, loss, "minimize");
  proto::ProgramDesc trial = main.desc();
  const ParamsGrads params = Select(AppendBackward(&trial, loss), parameters);
  CheckNotUpdated(main.desc().blocks(0), loss, params);
  if (params.empty()) ThrowInvalidArgument("minimize: the loss '", loss, "' depends on no trainable parameter");
  proto::ProgramDesc trial_startup = startup.desc();
  ProgramBuilder b(&trial, &trial_startup, startup.random_seed());
  const std::string lr = AppendOptimizer(b, params, config);
  main.mutable_desc() = std::move(trial);
  startup.mutable_desc() = std::move(trial_startup);
  return {lr, params};
}

// Paddle's gradients(targets, inputs, target_gradients): the gradient var of
// each input (None where no target depends on it).
std::vector<std::optional<std::string>> Gradients(Program& p, const std::vector<std::string>& targets,
                                                  const std::vector<std::string>& inputs,
                                                  const std::vector<std::string>& target_grads) {
  BackwardSpec spec;
  spec.targets = targets;
  spec.target_grads = target_grads;
  spec.wrt.insert(inputs.begin(), inputs.end());
  for (const auto& in : inputs) {
    if (FindVarDesc(p.desc().blocks(0), in) == nullptr) ThrowNotFound("gradients: the program declares no variable '", in, "'");
  }
  proto::ProgramDesc trial = p.desc();
  const auto grads = AppendBackwardPass(&trial, spec);
  p.mutable_desc() = std::move(trial);
  std::vector<std::optional<std::string>> out;
  for (const auto& in : inputs) {
    auto it = grads.find(in);
    const bool written = it != grads.end() && FindVarDesc(p.desc().blocks(0), it->second) != nullptr;
    out.push_back(written ? std::optional<std::string>(it->second) : std::nullopt);
  }
  return out;
}

}  // namespace

void BindTraining(py::module_& m) {
  m.def("minimize", &Minimize, py::arg("main"), py::arg("startup"), py::arg("loss"), py::arg("kind"),
        py::arg("settings"), py::arg("parameters"), py::arg("lr_name"));
  m.def(
      "append_backward",
      [](Program& p, const std::string& loss, const py::object& parameters) {
        CheckScalarLoss(p, loss, "append_backward");
        proto::ProgramDesc trial = p.desc();
        const ParamsGrads params = Select(AppendBackward(&trial, loss), parameters);
        p.mutable_desc() = std::move(trial);
        return params;
      },
      py::arg("program"), py::arg("loss"), py::arg("parameters"));
  m.def("gradients", &Gradients, py::arg("program"), py::arg("targets"), py::arg("inputs"),
        py::arg("target_gradients"));
}

}  // namespace kiln::python
