// kiln import MODEL.onnx --out DIR [--input_shape NAME=d0,d1,...]: an ONNX
// model as a kiln program and a checkpoint of its initial values, which
// `kiln run --program DIR/program.pbtxt --from DIR` starts from.
//
// DIR is written as one checkpoint directory (framework/checkpoint): every
// persistable var of the program (the initializers it reads, BatchNorm's
// running statistics, constants) as NAME.npy, the program as program.pbtxt,
// model.json (the source, opset, feeds and fetches with dtypes and dims, the
// parameters and state vars), each listed with its sha256 in manifest.json.
// It is written atomically: on any error nothing is left at DIR.
#include <cstdio>
#include <sstream>
#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/executor.h"
#include "framework/flags.h"
#include "framework/onnx/onnx_import.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "passes/decomposition_fusion_pass.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

using Json = nlohmann::ordered_json;

// "NAME=d0,d1,...": dims positive or -1.
std::pair<std::string, Dims> ParseInputShape(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    ThrowInvalidArgument("--input_shape '", arg, "': expected NAME=d0,d1,... (-1 for a dim known at run time)");
  }
  Dims dims;
  size_t start = eq + 1;
  while (start <= arg.size()) {
    const size_t comma = std::min(arg.find(',', start), arg.size());
    const std::string item = arg.substr(start, comma - start);
    size_t used = 0;
    int64_t d = 0;
    try {
      d = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || (d < 1 && d != -1)) {
      ThrowInvalidArgument("--input_shape '", arg, "': dim '", item, "' is not a positive integer or -1");
    }
    dims.push_back(d);
    start = comma + 1;
  }
  return {arg.substr(0, eq), dims};
}

Json VarsJson(const proto::BlockDesc& block, const std::vector<std::string>& vars,
              const std::vector<std::string>& onnx_names) {
  Json out = Json::array();
  for (size_t i = 0; i < vars.size(); ++i) {
    const proto::VarDesc& v = RequireVarDesc(block, vars[i], "imported");
    out.push_back({{"name", vars[i]},
                   {"onnx_name", onnx_names[i]},
                   {"dtype", NumpyDtypeName(FromProto(v.dtype()))},
                   {"shape", VarDims(v)}});
  }
  return out;
}

std::string ModelJson(const std::string& source, const OnnxImport& im) {
  const proto::BlockDesc& block = im.main.blocks(0);
  Json j;
  j["source"] = source;
  j["opset"] = im.opset;
  j["inputs"] = VarsJson(block, im.inputs, im.onnx_inputs);
  j["outputs"] = VarsJson(block, im.outputs, im.onnx_outputs);
  j["parameters"] = im.parameters;
  j["state"] = im.state;
  j["frozen"] = im.frozen;
  return j.dump(2) + "\n";
}

}  // namespace

int ImportCommand(const std::vector<std::string>& positional, const std::vector<std::string>& input_shapes,
                  const std::optional<std::string>& trainable) {
  if (positional.size() != 1) {
    ThrowInvalidArgument("expected one model file: kiln import MODEL.onnx --out DIR (got ", positional.size(), ")");
  }
  if (FLAGS_out.empty()) ThrowInvalidArgument("--out is required (the directory to write)");
  OnnxImportOptions options;
  for (const std::string& arg : input_shapes) {
    auto [name, dims] = ParseInputShape(arg);
    if (!options.input_shapes.emplace(name, dims).second) ThrowInvalidArgument("--input_shape '", name, "' given twice");
  }
  if (trainable) {
    options.trainable.emplace();
    std::stringstream ss(*trainable);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (name.empty()) ThrowInvalidArgument("--trainable '", *trainable, "': an empty name");
      options.trainable->insert(name);
    }
  }
  OnnxImport im = ImportOnnxModel(positional[0], options);
  // Before any backward exists, so a program trained from DIR gets the
  // fused ops' grad ops (the pass leaves patterns whose grads are there).
  if (FLAGS_fuse_decompositions) {
    std::set<std::string> keep(im.inputs.begin(), im.inputs.end());
    keep.insert(im.outputs.begin(), im.outputs.end());
    FuseImportedDecompositions(&im.main, im.startup, keep);
  }
  Scope scope;
  Executor().RunProgram(im.startup, scope);
  SaveOptions save;
  save.files = {{"program.pbtxt", ProgramToText(im.main)}, {"model.json", ModelJson(positional[0], im)}};
  SaveCheckpointDir(FLAGS_out, im.main, scope, LoopState{}, save);
  std::string feeds, fetches;
  const std::string frozen = im.frozen.empty() ? "" : StrCat(", ", im.frozen.size(), " frozen");
  for (const auto& v : im.inputs) feeds += (feeds.empty() ? "" : ",") + v;
  for (const auto& v : im.outputs) fetches += (fetches.empty() ? "" : ",") + v;
  std::printf("kiln import: %s -> %s (opset %lld, %d ops, %zu parameters, %zu state vars%s; feeds %s, fetches %s)\n",
              positional[0].c_str(), FLAGS_out.c_str(), static_cast<long long>(im.opset),
              im.main.blocks(0).ops_size(), im.parameters.size(), im.state.size(), frozen.c_str(), feeds.c_str(), fetches.c_str());
  return 0;
}

}  // namespace kiln::tools
