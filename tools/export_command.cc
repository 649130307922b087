// kiln export: a checkpoint of `kiln train --save_dir` (or a directory of
// `kiln import`) as an inference model, or with --onnx as one ONNX file
// (framework/onnx/onnx_export.h); kiln predict: runs a model on .npy feeds,
// the JIT on by default.
//
// A model directory is written like a checkpoint (framework/checkpoint):
// the parameters the pruned forward program reads as .npy files, the program
// as model.pbtxt and inference.json (the feeds with their dtype and shape,
// the fetch targets), all listed with their sha256 in manifest.json, written
// atomically.
#include <sys/stat.h>

#include <gflags/gflags.h>

#include <cstdio>
#include <set>
#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/durable_io.h"
#include "framework/checkpoint/inference.h"
#include "framework/checkpoint/manifest.h"
#include "framework/data/npy.h"
#include "framework/executor.h"
#include "framework/feed_check.h"
#include "framework/file_util.h"
#include "framework/flags.h"
#include "framework/onnx/onnx_export.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "tools/commands.h"
#include "tools/jit_setup.h"
#include "tools/model_flags.h"
#include "tools/pipeline_setup.h"

namespace kiln::tools {
namespace {

using Json = nlohmann::ordered_json;

Json ParseJson(const std::string& text, const std::string& path) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ThrowInvalidArgument(path, ": not JSON (", e.what(), ")");
  }
}

std::string Field(const Json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j.at(key).is_string()) ThrowInvalidArgument(path, ": field '", key, "' must be a string");
  return j.at(key).get<std::string>();
}

}  // namespace

namespace {

// What kiln export reads from --from: the inference program pruned for its
// feeds and fetches, with the parameter values in the scope. Three forms: a
// checkpoint of kiln train --save_dir (forward.pbtxt, model.json's features
// and probs), a directory of kiln import (program.pbtxt, model.json's
// inputs and outputs; batch_norm and dropout are switched to inference, as
// every exported program is), or a model directory of kiln export
// (model.pbtxt, inference.json).
struct ExportSource {
  std::string path;
  InferenceModel model;
};

std::vector<std::string> Names(const Json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j.at(key).is_array()) ThrowInvalidArgument(path, ": field '", key, "' must be an array");
  std::vector<std::string> out;
  for (const Json& item : j.at(key)) out.push_back(Field(item, "name", path));
  return out;
}

ExportSource LoadExportSource(const std::string& from, Scope* scope) {
  const std::string ckpt = ResolveCheckpoint(from);
  std::map<std::string, std::string> files;
  ReadCheckpoint(ckpt, nullptr, &files);
  if (files.count("model.pbtxt") && files.count("inference.json")) return {ckpt, LoadInferenceModel(ckpt, scope)};
  const std::string json_path = ckpt + "/model.json";
  if (files.count("program.pbtxt") && files.count("model.json")) {
    const Json model = ParseJson(files.at("model.json"), json_path);
    const proto::ProgramDesc program = ParseProgramText(files.at("program.pbtxt"), ckpt + "/program.pbtxt");
    LoadCheckpoint(ckpt, program, scope);
    const std::vector<std::string> feeds = Names(model, "inputs", json_path);
    const std::vector<std::string> fetches = Names(model, "outputs", json_path);
    return {ckpt, {PruneForInference(program, feeds, fetches), feeds, fetches}};
  }
  for (const char* needed : {"train.pbtxt", "forward.pbtxt", "model.json"}) {
    if (!files.count(needed)) {
      ThrowInvalidArgument("checkpoint '", ckpt, "' has no ", needed,
                           " to export from (expected a checkpoint of kiln train --save_dir, a directory of kiln "
                           "import or a model of kiln export)");
    }
  }
  const Json model = ParseJson(files.at("model.json"), json_path);
  const std::vector<std::string> feeds = {Field(model, "features", json_path)};
  const std::vector<std::string> fetches = {Field(model, "probs", json_path)};
  const proto::ProgramDesc train = ParseProgramText(files.at("train.pbtxt"), ckpt + "/train.pbtxt");
  const proto::ProgramDesc forward = ParseProgramText(files.at("forward.pbtxt"), ckpt + "/forward.pbtxt");
  LoadCheckpoint(ckpt, train, scope);
  return {ckpt, {PruneForInference(forward, feeds, fetches), feeds, fetches}};
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

int ExportCommand(bool onnx) {
  if (FLAGS_from.empty()) {
    ThrowInvalidArgument("--from is required (a checkpoint of kiln train --save_dir, or a directory of kiln import)");
  }
  if (FLAGS_out.empty()) {
    ThrowInvalidArgument("--out is required (", onnx ? "the .onnx file" : "the model directory", " to write)");
  }
  if (onnx) CheckWritableFile(FLAGS_out, "--out");
  Scope scope;
  const ExportSource source = LoadExportSource(FLAGS_from, &scope);
  const InferenceModel& m = source.model;
  if (onnx) {
    OnnxExportOptions options;
    options.doc = "kiln export --onnx from " + source.path;
    ExportOnnxModel(FLAGS_out, m.program, m.feeds, m.fetches, scope, options);
  } else {
    SaveInferenceModel(FLAGS_out, m.program, m.feeds, m.fetches, scope);
  }
  std::printf("kiln export: %s -> %s (%s%d ops, feeds %s, fetches %s)\n", source.path.c_str(), FLAGS_out.c_str(),
              onnx ? "ONNX opset 17, " : "", m.program.blocks(0).ops_size(), Joined(m.feeds).c_str(),
              Joined(m.fetches).c_str());
  return 0;
}

int PredictCommand(const std::vector<std::string>& feed_args) {
  if (FLAGS_model.empty() || FLAGS_out.empty()) ThrowInvalidArgument("--model MODEL_DIR and --out DIR are required");
  MakeDirsOrThrow(FLAGS_out);
  CheckWritableDir(FLAGS_out, "--out");
  // Predict compiles by default: the forward clusters get the training run's fusions.
  if (gflags::GetCommandLineFlagInfoOrDie("use_jit").is_default) FLAGS_use_jit = true;
  Scope scope;
  const InferenceModel model = LoadInferenceModel(FLAGS_model, &scope);
  proto::ProgramDesc program = model.program;
  std::vector<std::string> fetches = SplitOpList(FLAGS_fetch);
  if (fetches.empty()) fetches = model.fetches;
  std::set<std::string> keep(fetches.begin(), fetches.end());
  for (const auto& arg : feed_args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      ThrowInvalidArgument("--feed '", arg, "': expected NAME=FILE.npy");
    }
    FeedTensor(program.blocks(0), scope, arg.substr(0, eq), ReadNpy(arg.substr(eq + 1)));
    keep.insert(arg.substr(0, eq));
  }
  for (const auto& f : fetches) {
    RequireVarDesc(program.blocks(0), f, "fetch");
  }
  std::set<std::string> fed;
  for (const auto& arg : feed_args) fed.insert(arg.substr(0, arg.find('=')));
  CheckFeeds(program.blocks(0), fed, "--feed");
  program = RunPipelineFromFlags(program, keep);
  Executor exec(ExecutorOptionsFromFlags());
  auto plan = exec.Prepare(program, 0, {fetches.begin(), fetches.end()});
  exec.Run(*plan, scope);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : fetches) out.emplace_back(FLAGS_out + "/" + f + ".npy", NpyBytes(scope.GetVar(f)->Get()));
  for (const auto& [path, bytes] : out) WriteFileAtomic(path, bytes);
  MaybePrintJitExplain();
  return 0;
}

}  // namespace kiln::tools
