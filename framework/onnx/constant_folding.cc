#include "framework/onnx/constant_folding.h"

#include <set>

#include "framework/executor.h"

namespace kiln::onnx_import {

void FoldNode(const Converter& converter, const onnx::NodeProto& node, int index, ImportContext& ic) {
  ImportContext scratch(ic.source(), ic.opset());
  NodeContext ctx(scratch, node, index);
  std::map<std::string, std::shared_ptr<const Tensor>> feeds;  // var -> value
  for (const std::string& name : node.input()) {
    if (name.empty() || scratch.Find(name) != nullptr) continue;
    const Value* v = ic.Find(name);
    if (v->constant->numel() == 0) {
      NodeContext(ic, node, index).Refuse("input '", name, "' is a zero-size constant ", DimsToString(v->dims),
                                          ", and no kiln var holds one");
    }
    feeds[scratch.DeclareFedConstant(name, v->constant)] = v->constant;
  }
  std::set<std::string> outputs(node.output().begin(), node.output().end());
  scratch.SetUsed(outputs);
  converter.convert(ctx);
  ctx.Commit();

  std::set<std::string> keep;
  for (const std::string& name : node.output()) {
    if (const Value* v = name.empty() ? nullptr : scratch.Find(name); v != nullptr && !v->var.empty()) {
      keep.insert(v->var);
    }
  }
  ExecutorOptions options;
  options.use_onednn = false;  // the reference kernels define the results
  Executor exec(options);
  Scope scope;
  try {
    exec.RunProgram(scratch.startup(), scope);  // constants the converter made (Mean's count)
    for (const auto& [var, value] : feeds) FeedTensor(scratch.main().blocks(0), scope, var, *value);
    auto plan = exec.Prepare(scratch.main(), 0, keep);
    exec.Run(*plan, scope);
  } catch (const OnnxImportError&) {
    throw;
  } catch (const Error& e) {
    ctx.Refuse("folding its constant inputs failed: ", e.what());
  }
  for (const std::string& name : node.output()) {
    const Value* v = name.empty() ? nullptr : scratch.Find(name);
    if (v == nullptr) continue;
    std::shared_ptr<const Tensor> value = v->constant;
    if (v->kind == Value::Kind::kRuntime) {
      auto t = std::make_shared<Tensor>();
      t->CopyFrom(scope.GetVar(v->var)->Get());
      value = std::move(t);
    }
    ic.SetValue(name, Value{Value::Kind::kConstant, "", value, value->dims(), value->dtype()});
  }
}

}  // namespace kiln::onnx_import
