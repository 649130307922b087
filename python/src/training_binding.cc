// kiln._kiln's autodiff and optimizers over Python's programs: minimize,
// append_backward and gradients (framework/minimize.h, framework/backward.h),
// each on copies that replace the programs only when it succeeded.
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/backward.h"
#include "framework/lr_schedule.h"
#include "framework/minimize.h"
#include "framework/op_desc.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

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
    else if (key == "weight_decay") c.weight_decay = v.cast<float>();
    else if (key == "grad_clip_norm") c.grad_clip_norm = v.cast<float>();
    else if (key == "grad_clip_min") c.grad_clip_min = v.cast<float>();
    else if (key == "grad_clip_max") c.grad_clip_max = v.cast<float>();
    else if (key == "grad_merge_steps") c.grad_merge_steps = v.cast<int64_t>();
    else if (key == "grad_merge_avg") c.grad_merge_avg = v.cast<bool>();
    else if (key == "no_decay") {
      for (const auto& name : v.cast<std::vector<std::string>>()) c.no_decay.insert(name);
    }
    else ThrowInvalidArgument("optimizer ", kind, ": unknown setting '", key, "'");
  }
  return c;
}

std::optional<std::vector<std::string>> Names(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<std::vector<std::string>>();
}

std::pair<std::string, ParamGrads> MinimizeFromPython(Program& main, Program& startup, const std::string& loss,
                                                      const std::string& kind, const py::dict& args,
                                                      const py::object& parameters, const std::string& lr_name) {
  OptimizerConfig config = OptimizerFromPython(kind, args);
  config.lr_name = lr_name;
  proto::ProgramDesc m = main.desc(), s = startup.desc();
  Minimized r = Minimize(&m, &s, startup.random_seed(), loss, config, Names(parameters));
  main.mutable_desc() = std::move(m);
  startup.mutable_desc() = std::move(s);
  return {r.lr, r.params_grads};
}

LrSchedule LrScheduleFromPython(const py::dict& args) {
  LrSchedule s;
  for (const auto& [k, v] : args) {
    const std::string key = k.cast<std::string>();
    if (key == "kind") s.kind = v.cast<std::string>();
    else if (key == "learning_rate") s.learning_rate = v.cast<float>();
    else if (key == "T_max") s.T_max = v.cast<int64_t>();
    else if (key == "eta_min") s.eta_min = v.cast<float>();
    else if (key == "gamma") s.gamma = v.cast<float>();
    else if (key == "d_model") s.d_model = v.cast<float>();
    else if (key == "warmup_steps") s.warmup_steps = v.cast<int64_t>();
    else if (key == "boundaries") s.boundaries = v.cast<std::vector<int64_t>>();
    else if (key == "values") s.values = v.cast<std::vector<float>>();
    else if (key == "linear_warmup_steps") s.linear_warmup_steps = v.cast<int64_t>();
    else if (key == "start_lr") s.start_lr = v.cast<float>();
    else if (key == "end_lr") s.end_lr = v.cast<float>();
    else ThrowInvalidArgument("learning-rate schedule: unknown setting '", key, "'");
  }
  return s;
}

// AppendLrSchedule on copies of the programs; returns the step var.
std::string AppendLrScheduleFromPython(Program& main, Program& startup, const std::string& lr, const py::dict& args) {
  const LrSchedule s = LrScheduleFromPython(args);
  proto::ProgramDesc m = main.desc(), st = startup.desc();
  ProgramBuilder b(&m, &st, startup.random_seed());
  const std::string step = AppendLrSchedule(b, lr, s);
  main.mutable_desc() = std::move(m);
  startup.mutable_desc() = std::move(st);
  return step;
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
  m.def("minimize", &MinimizeFromPython, py::arg("main"), py::arg("startup"), py::arg("loss"), py::arg("kind"),
        py::arg("settings"), py::arg("parameters"), py::arg("lr_name"));
  m.def("append_lr_schedule", &AppendLrScheduleFromPython, py::arg("main"), py::arg("startup"), py::arg("lr"),
        py::arg("settings"));
  m.def(
      "append_backward",
      [](Program& p, const std::string& loss, const py::object& parameters) {
        proto::ProgramDesc trial = p.desc();
        const ParamGrads params = AppendBackwardFor(&trial, loss, Names(parameters));
        p.mutable_desc() = std::move(trial);
        return params;
      },
      py::arg("program"), py::arg("loss"), py::arg("parameters"));
  m.def("gradients", &Gradients, py::arg("program"), py::arg("targets"), py::arg("inputs"),
        py::arg("target_gradients"));
}

}  // namespace kiln::python
