// kiln._kiln.Program: building programs from Python. Ops are appended through
// the C++ ProgramBuilder (shape inference declares every output), attributes
// are converted to the kinds the op registry declares, and every change is
// checked before it lands: a rejected op leaves the program as it was.
#include <pybind11/stl.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "framework/checkpoint/inference.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/program_builder.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

int64_t NextProgramId() {
  static std::atomic<int64_t> next{0};
  return ++next;
}

template <typename T>
std::vector<T> Sequence(const py::handle& v, const std::string& who) {
  if (py::isinstance<py::str>(v) || !py::isinstance<py::sequence>(py::reinterpret_borrow<py::object>(v))) {
    if (!py::hasattr(v, "tolist")) ThrowInvalidArgument(who, ": expected a list, got ", py::str(v).cast<std::string>());
    return Sequence<T>(v.attr("tolist")(), who);
  }
  std::vector<T> out;
  for (const auto& item : py::reinterpret_borrow<py::sequence>(v)) {
    try {
      out.push_back(item.cast<T>());
    } catch (const py::cast_error&) {
      ThrowInvalidArgument(who, ": element ", py::repr(item).cast<std::string>(), " has the wrong type");
    }
  }
  return out;
}

// A Python value as an attribute of `kind` (the kind the op's entry
// declares): ints where floats are expected are fine, bools are not ints.
Attribute ToAttribute(const py::handle& v, AttrKind kind, const std::string& who) {
  const bool is_bool = py::isinstance<py::bool_>(v) || py::str(py::type::of(v)).cast<std::string>().find("bool_") !=
                                                           std::string::npos;
  const bool is_int = !is_bool && (py::isinstance<py::int_>(v) || py::hasattr(v, "__index__"));
  switch (kind) {
    case AttrKind::kInt:
      if (!is_int) break;
      return v.cast<int64_t>();
    case AttrKind::kFloat:
      if (is_bool || !(is_int || py::isinstance<py::float_>(v) || py::hasattr(v, "__float__"))) break;
      return v.cast<float>();
    case AttrKind::kString:
      if (!py::isinstance<py::str>(v)) break;
      return v.cast<std::string>();
    case AttrKind::kBool:
      if (!is_bool) break;
      return v.cast<bool>();
    case AttrKind::kInts:
      return Sequence<int64_t>(v, who);
    case AttrKind::kFloats:
      return Sequence<float>(v, who);
    case AttrKind::kStrings:
      return Sequence<std::string>(v, who);
  }
  ThrowInvalidArgument(who, ": expected ", AttrKindName(kind), ", got ", py::repr(v).cast<std::string>());
}

std::vector<std::string> ArgList(const py::handle& v, const std::string& who) {
  if (py::isinstance<py::str>(v)) return {v.cast<std::string>()};
  return Sequence<std::string>(v, who);
}

// Appends one op built from Python dicts: `inputs` slot -> var name(s),
// `outputs` slot -> number of fresh vars (named after `base`, a name the
// caller made unique) or a list of existing var names (in-place updates).
// Returns slot -> output var names.
std::map<std::string, std::vector<std::string>> AppendOp(Program& main, const std::string& type,
                                                         const py::dict& inputs, const py::dict& outputs,
                                                         const py::dict& attrs, const std::string& base) {
  const OpInfo& info = OpRegistry::Global().Get(type);
  OpBuilder op(type);
  for (const auto& [slot, args] : inputs) {
    const std::string s = slot.cast<std::string>();
    if (info.FindInput(s) == nullptr) ThrowInvalidArgument("op '", type, "' has no input slot '", s, "'");
    op.In(s, ArgList(args, "op '" + type + "' input " + s));
  }
  for (const auto& [name, value] : attrs) {
    const std::string n = name.cast<std::string>();
    const std::string who = "op '" + type + "' attribute '" + n + "'";
    if (n == kOpRoleAttr) {
      op.Attr(n, ToAttribute(value, AttrKind::kString, who));
      continue;
    }
    const AttrDef* def = info.FindAttr(n);
    if (def == nullptr) ThrowInvalidArgument("op '", type, "' has no attribute '", n, "'");
    op.Attr(n, ToAttribute(value, def->kind, who));
  }
  proto::ProgramDesc scratch = EmptyProgram();
  ProgramBuilder b(&main.mutable_desc(), &scratch, main.random_seed());
  std::map<std::string, std::vector<std::string>> names;
  for (const auto& [slot, value] : outputs) {
    const std::string s = slot.cast<std::string>();
    if (info.FindOutput(s) == nullptr) ThrowInvalidArgument("op '", type, "' has no output slot '", s, "'");
    std::vector<std::string>& out = names[s];
    if (py::isinstance<py::int_>(value)) {
      const int n = value.cast<int>();
      for (int k = 0; k < n; ++k) {
        out.push_back(outputs.size() == 1 && n == 1 ? base : base + "." + s + (n == 1 ? "" : "_" + std::to_string(k)));
      }
    } else {
      out = ArgList(value, "op '" + type + "' output " + s);
    }
    op.Out(s, out);
  }
  b.RawOp(op.Build());
  return names;
}

// True when `name`, or a name "<name>.<...>", is declared by `p`: a name
// generated for a layer or an op stays clear of both.
bool DeclaresPrefix(const Program& p, const std::string& name) {
  for (const auto& v : p.desc().blocks(0).vars()) {
    const std::string& n = v.name();
    if (n.compare(0, name.size(), name) == 0 && (n.size() == name.size() || n[name.size()] == '.')) return true;
  }
  return false;
}

py::object VarInfo(const Program& p, const std::string& name) {
  const proto::VarDesc* v = FindVarDesc(p.desc().blocks(0), name);
  if (v == nullptr) return py::none();
  py::dict d;
  d["name"] = v->name();
  d["shape"] = VarDims(*v);
  d["dtype"] = NumpyDtypeName(FromProto(v->dtype()));
  d["persistable"] = v->persistable();
  d["stop_gradient"] = v->stop_gradient();
  return std::move(d);
}

py::list OpList(const Program& p) {
  py::list ops;
  for (const auto& op : p.desc().blocks(0).ops()) {
    py::dict d, ins, outs, attrs;
    d["type"] = op.type();
    for (const auto& s : op.inputs()) ins[py::str(s.name())] = std::vector<std::string>(s.args().begin(), s.args().end());
    for (const auto& s : op.outputs()) outs[py::str(s.name())] = std::vector<std::string>(s.args().begin(), s.args().end());
    for (const auto& a : op.attrs()) attrs[py::str(a.name())] = py::str(AttrToString(AttrFromProto(a)));
    d["inputs"] = ins;
    d["outputs"] = outs;
    d["attrs"] = attrs;
    ops.append(d);
  }
  return ops;
}

Init InitFromPython(const std::string& kind, const py::dict& args) {
  auto arg = [&args, &kind](const char* name) {
    if (!args.contains(name)) ThrowInvalidArgument("initializer '", kind, "' needs '", name, "'");
    return args[name];
  };
  if (kind == "constant") return Init::Constant(arg("value").cast<float>());
  if (kind == "xavier_uniform") return Init::XavierUniform(arg("fan_in").cast<int64_t>(), arg("fan_out").cast<int64_t>());
  if (kind == "he_uniform") return Init::HeUniform(arg("fan_in").cast<int64_t>());
  if (kind == "uniform") return Init::Uniform(arg("limit").cast<float>());
  ThrowInvalidArgument("unknown initializer '", kind, "': expected constant, xavier_uniform, he_uniform or uniform");
}

// A copy (a test clone: the forward part only, framework/checkpoint/inference.h).
Program Clone(const Program& p, bool for_test) {
  Program c(for_test ? ForTestProgram(p.desc()) : p.desc());
  c.set_random_seed(p.random_seed());
  c.set_is_startup(p.is_startup() && !for_test);
  return c;
}

}  // namespace

Program::Program() : desc_(EmptyProgram()), id_(NextProgramId()) {}
Program::Program(proto::ProgramDesc desc) : desc_(std::move(desc)), id_(NextProgramId()) {
  if (desc_.blocks_size() == 0) ThrowInvalidArgument("a program needs at least one block");
}

DataType DataTypeFromName(const std::string& name) {
  if (const auto dtype = DataTypeFromNumpyName(name)) return *dtype;
  ThrowInvalidArgument("unknown dtype '", name, "': expected float32, float64, int64, int32 or bool");
}

void BindProgram(py::module_& m) {
  py::class_<Program>(m, "Program")
      .def(py::init<>())
      .def_property_readonly("id", &Program::id)
      .def_property_readonly("version", &Program::version)
      .def_property("random_seed", &Program::random_seed, &Program::set_random_seed)
      .def_property("is_startup", &Program::is_startup, &Program::set_is_startup)
      .def("to_string", [](const Program& p) { return ProgramToText(p.desc()); })
      .def("num_ops", [](const Program& p) { return p.desc().blocks(0).ops_size(); })
      .def("var", &VarInfo, py::arg("name"))
      .def("var_names", [](const Program& p) {
        std::vector<std::string> out;
        for (const auto& v : p.desc().blocks(0).vars()) out.push_back(v.name());
        return out;
      })
      .def("ops", &OpList)
      .def("validate", [](const Program& p) { ValidateProgram(p.desc()); })
      .def("clone", &Clone, py::arg("for_test") = false)
      .def("declare_data",
           [](Program& p, const std::string& name, const Dims& shape, const std::string& dtype, bool stop_gradient) {
             proto::ProgramDesc scratch = EmptyProgram();
             ProgramBuilder(&p.mutable_desc(), &scratch, p.random_seed())
                 .Data(name, shape, DataTypeFromName(dtype), stop_gradient);
           })
      .def("set_stop_gradient",
           [](Program& p, const std::string& name, bool on) {
             proto::VarDesc* v = FindMutableVarDesc(p.mutable_desc().mutable_blocks(0), name);
             if (v == nullptr) ThrowNotFound("the program declares no variable '", name, "'");
             v->set_stop_gradient(on);
           })
      .def("create_parameter",
           [](Program& main, Program& startup, const std::string& name, const Dims& shape, const std::string& init,
              const py::dict& init_args) {
             const Init how = InitFromPython(init, init_args);
             ProgramBuilder b(&main.mutable_desc(), &startup.mutable_desc(), startup.random_seed());
             if (b.DeclareShared(name, shape, DataType::kFP32, /*trainable=*/true)) return name;
             return b.Param(name, shape, how);
           })
      .def("create_persistable",
           [](Program& main, Program& startup, const std::string& name, const Dims& shape, float value,
              const std::string& dtype) {
             ProgramBuilder b(&main.mutable_desc(), &startup.mutable_desc(), startup.random_seed());
             if (b.DeclareShared(name, shape, DataTypeFromName(dtype), /*trainable=*/false)) return name;
             return b.Persistable(name, shape, value, DataTypeFromName(dtype));
           })
      .def("declares_prefix", &DeclaresPrefix, py::arg("name"))
      .def("mark",
           [](const Program& p) {
             return std::make_pair(p.desc().blocks(0).vars_size(), p.desc().blocks(0).ops_size());
           })
      .def(
          "rollback", [](Program& p, int vars, int ops) { TruncateBlock(&p.mutable_desc(), vars, ops); },
          py::arg("vars"), py::arg("ops"))
      .def("append_op", &AppendOp, py::arg("type"), py::arg("inputs"), py::arg("outputs"), py::arg("attrs"),
           py::arg("base"))
      .def("prune_for_inference",
           [](const Program& p, const std::vector<std::string>& feeds, const std::vector<std::string>& fetches) {
             return Program(PruneForInference(p.desc(), feeds, fetches));
           })
      .def_static("from_string",
                  [](const std::string& text) {
                    Program p(ParseProgramText(text, "<string>"));
                    ValidateProgram(p.desc());
                    return p;
                  })
      .def("save", [](const Program& p, const std::string& path) { SaveProgram(path, p.desc()); })
      .def_static("load", [](const std::string& path) {
        Program p(LoadProgram(path));
        ValidateProgram(p.desc());
        return p;
      });
}

}  // namespace kiln::python
