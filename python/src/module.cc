// kiln._kiln: the extension module. kiln::Error becomes kiln.Error (a
// RuntimeError carrying the op/var/file message); nothing a user does from
// Python aborts the interpreter.
#include <pybind11/stl.h>

#include "framework/error.h"
#include "framework/op_registry.h"
#include "python/src/binding.h"
#include "python/src/flags_state.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// Every op of the registry with its slots and attributes, for the generated
// functions of kiln.ops.
py::list OpSchemas() {
  py::list out;
  const OpRegistry& r = OpRegistry::Global();
  for (const auto& type : r.Types()) {
    const OpInfo& info = r.Get(type);
    py::dict d;
    d["type"] = type;
    d["doc"] = info.doc;
    auto slots = [](const std::vector<SlotDef>& defs) {
      py::list l;
      for (const auto& s : defs) l.append(py::make_tuple(s.name, s.duplicable, s.dispensable));
      return l;
    };
    d["inputs"] = slots(info.inputs);
    d["outputs"] = slots(info.outputs);
    py::list attrs;
    for (const auto& a : info.attrs) attrs.append(py::make_tuple(a.name, AttrKindName(a.kind), a.default_value.has_value()));
    d["attrs"] = attrs;
    d["differentiable"] = static_cast<bool>(info.grad_maker);
    out.append(d);
  }
  return out;
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's C++ core: programs, executors, flags and files (use the kiln package, not this module)";
  py::register_exception<kiln::Error>(m, "Error", PyExc_RuntimeError);
  kiln::python::InitFlags();
  kiln::python::BindProgram(m);
  kiln::python::BindExecutor(m);
  kiln::python::BindFlags(m);
  kiln::python::BindIo(m);
  kiln::python::BindDatasets(m);
  kiln::python::BindDataLoader(m);
  kiln::python::BindDistributed(m);
  kiln::python::BindTraining(m);
  kiln::python::BindOnnx(m);
  m.def("op_schemas", &kiln::python::OpSchemas);
  m.attr("version") = KILN_VERSION;
}
