// Files from Python: kiln dump's files for a Python program, checkpoints of
// a scope (the format of kiln train --save_dir) and inference models (the
// format of kiln export, which kiln predict runs).
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/inference.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "python/src/binding.h"
#include "tools/dump_writer.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

tools::DumpResult Dump(const Program& program, const std::string& out_dir, const std::map<std::string, Dims>& shapes,
                       const std::vector<std::string>& fetch) {
  if (shapes.empty()) ThrowInvalidArgument("kiln.dump: feed_shapes must give the shape of at least one feed");
  tools::DumpSource src;
  src.program = program.desc();
  src.keep = tools::ProgramFeedsAndResults(program.desc().blocks(0));
  for (const auto& [name, dims] : shapes) {
    src.keep.insert(name);
    for (int64_t d : dims) {
      if (d < 1) ThrowInvalidArgument("kiln.dump: feed shape of '", name, "' must be positive, got ", DimsToString(dims));
    }
  }
  src.keep.insert(fetch.begin(), fetch.end());
  src.feed_dims = shapes;
  // Vars read first but not given (labels, say) take the first feed's batch.
  src.batch = shapes.begin()->second.empty() ? 1 : shapes.begin()->second[0];
  src.description = "a Python program (" + std::to_string(program.desc().blocks(0).ops_size()) + " ops)";
  return tools::WriteDump(src, out_dir);
}

}  // namespace

void BindIo(py::module_& m) {
  m.def(
      "dump",
      [](const Program& program, const std::string& out_dir, const std::map<std::string, Dims>& shapes,
         const std::vector<std::string>& fetch) {
        const tools::DumpResult r = Dump(program, out_dir, shapes, fetch);
        return py::make_tuple(r.explain, r.clusters);
      },
      py::arg("program"), py::arg("out_dir"), py::arg("feed_shapes"), py::arg("fetch") = std::vector<std::string>{});
  m.def(
      "save_checkpoint",
      [](const std::string& dir, const Program& program, const Scope& scope, int64_t step) {
        LoopState loop;
        loop.step = step;
        SaveOptions options;
        options.files = {{"train.pbtxt", ProgramToText(program.desc())}};
        SaveCheckpointDir(dir, program.desc(), scope, loop, options);
      },
      py::arg("dir"), py::arg("program"), py::arg("scope"), py::arg("step") = 0);
  m.def(
      "load_checkpoint",
      [](const std::string& dir, const Program& program, Scope& scope) {
        return LoadCheckpoint(dir, program.desc(), &scope).loop.step;
      },
      py::arg("dir"), py::arg("program"), py::arg("scope"));
  m.def(
      "save_inference_model",
      [](const std::string& dir, const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
         const Program& program, const Scope& scope) {
        return Program(SaveInferenceModel(dir, program.desc(), feeds, fetches, scope).program);
      },
      py::arg("dir"), py::arg("feeds"), py::arg("fetches"), py::arg("program"), py::arg("scope"));
  m.def(
      "load_inference_model",
      [](const std::string& dir, Scope& scope) {
        InferenceModel model = LoadInferenceModel(dir, &scope);
        return py::make_tuple(Program(std::move(model.program)), model.feeds, model.fetches);
      },
      py::arg("dir"), py::arg("scope"));
}

}  // namespace kiln::python
