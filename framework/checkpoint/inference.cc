#include "framework/checkpoint/inference.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/operator.h"
#include "framework/program_io.h"

namespace kiln {
namespace {

// Ops that behave differently in training take is_test = true.
void ForInference(proto::OpDesc* op) {
  const OpInfo* info = OpRegistry::Global().Find(op->type());
  if (info != nullptr && info->FindAttr("is_test") != nullptr) SetAttr(op, "is_test", Attribute(true));
}

// softmax_with_cross_entropy whose loss is not wanted is a plain softmax of
// its logits: inference has no labels.
proto::OpDesc InferenceForm(const proto::OpDesc& op, const std::set<std::string>& needed) {
  if (op.type() != "softmax_with_cross_entropy") return op;
  const std::vector<std::string> loss = OutputArgs(op, "Loss");
  if (!loss.empty() && needed.count(loss[0])) return op;
  OpBuilder softmax("softmax");
  softmax.In("X", InputArgs(op, "Logits")).Out("Out", OutputArgs(op, "Softmax"));
  if (const proto::AttrDesc* axis = FindAttr(op, "axis")) softmax.Attr("axis", AttrFromProto(*axis));
  return softmax.Build();
}

}  // namespace

proto::ProgramDesc PruneForInference(const proto::ProgramDesc& forward, const std::vector<std::string>& feeds,
                                     const std::vector<std::string>& fetches) {
  if (forward.blocks_size() == 0) ThrowInvalidArgument("inference: the program has no blocks");
  const proto::BlockDesc& block = forward.blocks(0);
  for (const auto& name : feeds) {
    if (FindVarDesc(block, name) == nullptr) ThrowNotFound("inference: feed '", name, "' is not a var of the program");
  }
  std::set<std::string> needed;
  for (const auto& name : fetches) {
    if (FindVarDesc(block, name) == nullptr) ThrowNotFound("inference: fetch '", name, "' is not a var of the program");
    needed.insert(name);
  }
  const std::set<std::string> fed(feeds.begin(), feeds.end());
  std::vector<std::pair<int, proto::OpDesc>> kept;  // source index, inference form
  for (int i = block.ops_size() - 1; i >= 0; --i) {
    const proto::OpDesc& op = block.ops(i);
    bool wanted = false;
    for (const auto& out : OutputVars(op)) wanted = wanted || (needed.count(out) && !fed.count(out));
    if (!wanted) continue;
    kept.emplace_back(i, InferenceForm(op, needed));
    for (const auto& in : InputVars(kept.back().second)) needed.insert(in);
  }
  std::reverse(kept.begin(), kept.end());
  std::set<std::string> made;
  for (const auto& [i, op] : kept) {
    for (const auto& in : InputVars(op)) {
      const proto::VarDesc* v = FindVarDesc(block, in);
      if (made.count(in) || fed.count(in) || (v != nullptr && v->persistable())) continue;
      ThrowInvalidArgument("inference: ", OpLabel(block.ops(i), i), " needs var '", in,
                           "', which is neither fed, a parameter, nor made by the ops the fetches need");
    }
    for (const auto& out : OutputVars(op)) made.insert(out);
  }
  proto::ProgramDesc out = forward;
  proto::BlockDesc* b = out.mutable_blocks(0);
  b->clear_ops();
  b->clear_vars();
  for (const auto& [i, op] : kept) {
    proto::OpDesc* o = b->add_ops();
    *o = op;
    ForInference(o);
  }
  for (const auto& v : block.vars()) {
    if (needed.count(v.name()) || made.count(v.name())) *b->add_vars() = v;
  }
  return out;
}

namespace {

using Json = nlohmann::ordered_json;

// inference.json: each feed with its dtype and declared dims, the fetches.
std::string InferenceJson(const proto::ProgramDesc& program, const std::vector<std::string>& feeds,
                          const std::vector<std::string>& fetches) {
  Json j;
  j["feeds"] = Json::array();
  for (const auto& f : feeds) {
    const proto::VarDesc* v = FindVarDesc(program.blocks(0), f);
    j["feeds"].push_back({{"name", f}, {"dtype", NumpyDtypeName(FromProto(v->dtype()))}, {"shape", VarDims(*v)}});
  }
  j["fetches"] = fetches;
  return j.dump(2) + "\n";
}

std::vector<std::string> Names(const Json& j, const char* key, const std::string& path) {
  std::vector<std::string> out;
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_array()) {
    ThrowInvalidArgument(path, ": field '", key, "' must be an array");
  }
  for (const Json& item : j.at(key)) {
    const Json& name = item.is_object() && item.contains("name") ? item.at("name") : item;
    if (!name.is_string()) ThrowInvalidArgument(path, ": field '", key, "' must list names");
    out.push_back(name.get<std::string>());
  }
  return out;
}

}  // namespace

void SetIsTest(proto::ProgramDesc* program) {
  for (auto& block : *program->mutable_blocks()) {
    for (auto& op : *block.mutable_ops()) ForInference(&op);
  }
}

proto::ProgramDesc ForTestProgram(const proto::ProgramDesc& program) {
  proto::ProgramDesc out = program;
  for (auto& block : *out.mutable_blocks()) {
    std::set<std::string> kept_vars, dropped_vars;
    google::protobuf::RepeatedPtrField<proto::OpDesc> kept;
    for (int i = 0; i < block.ops_size(); ++i) {
      const proto::OpDesc& op = block.ops(i);
      const bool training = HasOpRole(op, kOpRoleBackward) || HasOpRole(op, kOpRoleOptimize) ||
                            HasOpRole(op, kOpRoleLRSched) || HasOpRole(op, kOpRoleRecompute);
      if (!training && IsParameterUpdate(op)) {
        ThrowInvalidArgument("clone(for_test): ", OpLabel(op, i), " updates parameters but has no op_role '",
                             kOpRoleOptimize, "' (a program built before kiln marked op roles), so its backward part ",
                             "cannot be told apart: build the program again");
      }
      for (const auto& v : AllInputArgs(op)) (training ? dropped_vars : kept_vars).insert(v);
      for (const auto& v : AllOutputArgs(op)) (training ? dropped_vars : kept_vars).insert(v);
      if (!training) *kept.Add() = op;
    }
    block.mutable_ops()->Swap(&kept);
    google::protobuf::RepeatedPtrField<proto::VarDesc> vars;
    for (const auto& v : block.vars()) {
      if (kept_vars.count(v.name()) || !dropped_vars.count(v.name())) *vars.Add() = v;
    }
    block.mutable_vars()->Swap(&vars);
  }
  SetIsTest(&out);
  return out;
}

InferenceModel SaveInferenceModel(const std::string& dir, const proto::ProgramDesc& forward,
                                  const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                                  const Scope& scope) {
  InferenceModel m{PruneForInference(forward, feeds, fetches), feeds, fetches};
  SaveOptions options;
  options.files = {{"model.pbtxt", ProgramToText(m.program)},
                   {"inference.json", InferenceJson(m.program, feeds, fetches)}};
  SaveCheckpointDir(dir, m.program, scope, LoopState{}, options);
  return m;
}

InferenceModel LoadInferenceModel(const std::string& dir, Scope* scope) {
  std::map<std::string, std::string> files;
  ReadCheckpoint(ResolveCheckpoint(dir), nullptr, &files);
  if (!files.count("model.pbtxt") || !files.count("inference.json")) {
    ThrowInvalidArgument("'", dir, "' is not an inference model (no model.pbtxt/inference.json)");
  }
  InferenceModel m;
  m.program = ParseProgramText(files.at("model.pbtxt"), dir + "/model.pbtxt");
  const std::string path = dir + "/inference.json";
  Json info;
  try {
    info = Json::parse(files.at("inference.json"));
  } catch (const nlohmann::json::exception& e) {
    ThrowInvalidArgument(path, ": not JSON (", e.what(), ")");
  }
  m.feeds = Names(info, "feeds", path);
  m.fetches = Names(info, "fetches", path);
  LoadCheckpoint(dir, m.program, scope);
  return m;
}

}  // namespace kiln
