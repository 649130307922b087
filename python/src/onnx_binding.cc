// kiln._kiln.onnx_import: an ONNX model as Python programs (kiln.onnx.load).
// The importer is framework/onnx/; this converts its result and errors.
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "framework/onnx/onnx_import.h"
#include "passes/decomposition_fusion_pass.h"
#include "python/src/binding.h"
#include "python/src/tensor_convert.h"

namespace py = pybind11;

namespace kiln::python {

void BindOnnx(py::module_& m) {
  m.def(
      "onnx_import",
      [](const std::string& path, const std::map<std::string, Dims>& input_shapes, const py::dict& input_values,
         const std::optional<std::set<std::string>>& trainable, bool fuse) {
        OnnxImportOptions options;
        options.input_shapes = input_shapes;
        options.trainable = trainable;
        for (const auto& [k, v] : input_values) {
          const std::string name = k.cast<std::string>();
          const std::string dtype = py::str(v.attr("dtype")).cast<std::string>();
          options.input_values[name] =
              TensorFromPython(v, DataTypeFromName(dtype), /*may_share=*/false, "input_values['" + name + "']");
        }
        OnnxImport r;
        {
          py::gil_scoped_release release;
          r = ImportOnnxModel(path, options);
        }
        std::string fused = "fused no decomposition";
        if (fuse) {
          // Before append_backward (minimize): the fused ops' grads then apply.
          std::set<std::string> keep(r.inputs.begin(), r.inputs.end());
          keep.insert(r.outputs.begin(), r.outputs.end());
          fused = FuseImportedDecompositions(&r.main, r.startup, keep).ToString();
        }
        Program main(std::move(r.main)), startup(std::move(r.startup));
        startup.set_is_startup(true);
        py::dict d;
        d["main"] = std::move(main);
        d["startup"] = std::move(startup);
        d["inputs"] = r.inputs;
        d["outputs"] = r.outputs;
        d["onnx_inputs"] = r.onnx_inputs;
        d["onnx_outputs"] = r.onnx_outputs;
        d["parameters"] = r.parameters;
        d["state"] = r.state;
        d["frozen"] = r.frozen;
        d["opset"] = r.opset;
        d["fused"] = fused;
        return d;
      },
      py::arg("path"), py::arg("input_shapes"), py::arg("input_values"), py::arg("trainable"), py::arg("fuse") = true);
}

}  // namespace kiln::python
