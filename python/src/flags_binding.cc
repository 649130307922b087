#include <pybind11/stl.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/flags.h"
#include "python/src/binding.h"
#include "python/src/flags_state.h"
#include "tools/jit_setup.h"
#include "tools/memory_setup.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

std::atomic<int64_t> generation{0};

std::string FlagName(std::string name) {
  if (name.rfind("FLAGS_", 0) == 0) name = name.substr(6);
  gflags::CommandLineFlagInfo info;
  if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info) ||
      info.filename.find("framework/flags.cc") == std::string::npos) {
    ThrowNotFound("unknown flag '", name, "' (kiln.flags() lists them)");
  }
  return name;
}

std::string ValueString(const py::handle& v, const gflags::CommandLineFlagInfo& info) {
  if (info.type == "bool") {
    if (!py::isinstance<py::bool_>(v)) ThrowInvalidArgument("flag ", info.name, ": expected a bool");
    return v.cast<bool>() ? "true" : "false";
  }
  if (info.type == "string") {
    if (!py::isinstance<py::str>(v)) ThrowInvalidArgument("flag ", info.name, ": expected a str");
    return v.cast<std::string>();
  }
  if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))) {
    ThrowInvalidArgument("flag ", info.name, ": expected a number (", info.type, ")");
  }
  return py::str(v).cast<std::string>();
}

py::object TypedValue(const gflags::CommandLineFlagInfo& info) {
  if (info.type == "bool") return py::bool_(info.current_value == "true");
  if (info.type == "string") return py::str(info.current_value);
  if (info.type == "double") return py::float_(std::stod(info.current_value));
  return py::int_(std::stoll(info.current_value));
}

void Configure() {
  tools::ConfigureJitFromFlags();
  tools::ConfigureAllocatorFromFlags();
}

// Sets every flag or none: a value gflags rejects, or options the JIT
// refuses, restore the previous values.
void SetFlags(const py::dict& flags) {
  std::map<std::string, std::string> previous;
  try {
    for (const auto& [k, v] : flags) {
      const std::string name = FlagName(k.cast<std::string>());
      gflags::CommandLineFlagInfo info;
      gflags::GetCommandLineFlagInfo(name.c_str(), &info);
      const std::string value = ValueString(v, info);
      previous.emplace(name, info.current_value);
      if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
        ThrowInvalidArgument("flag ", name, ": '", value, "' is not a valid ", info.type);
      }
    }
    Configure();
  } catch (...) {
    for (const auto& [name, value] : previous) gflags::SetCommandLineOption(name.c_str(), value.c_str());
    Configure();
    throw;
  }
  ++generation;
}

py::dict GetFlags(const py::object& names) {
  std::vector<std::string> list;
  if (py::isinstance<py::str>(names)) {
    list.push_back(names.cast<std::string>());
  } else {
    list = names.cast<std::vector<std::string>>();
  }
  py::dict out;
  for (const auto& n : list) {
    gflags::CommandLineFlagInfo info;
    gflags::GetCommandLineFlagInfo(FlagName(n).c_str(), &info);
    out[py::str(n)] = TypedValue(info);
  }
  return out;
}

py::list AllFlags() {
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  py::list out;
  for (const auto& f : all) {
    if (f.filename.find("framework/flags.cc") == std::string::npos) continue;
    py::dict d;
    d["name"] = f.name;
    d["type"] = f.type;
    d["default"] = f.default_value;
    d["value"] = TypedValue(f);
    d["description"] = f.description;
    out.append(d);
  }
  return out;
}

}  // namespace

int64_t FlagsGeneration() { return generation.load(); }

void InitFlags() {
  ApplyFlagsFromEnv();
  Configure();
}

void BindFlags(py::module_& m) {
  m.def("set_flags", &SetFlags, py::arg("flags"));
  m.def("get_flags", &GetFlags, py::arg("names"));
  m.def("flags", &AllFlags);
}

}  // namespace kiln::python
