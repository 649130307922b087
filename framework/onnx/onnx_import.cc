// The import driver: model -> values of the graph's inputs and initializers
// -> each node through its converter (or folded) -> the graph's outputs ->
// both programs validated. Everything is built in one ImportContext and
// returned only when the whole graph converted.
#include "framework/onnx/onnx_import.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "framework/file_util.h"
#include "framework/onnx/constant_folding.h"
#include "framework/onnx/converter_table.h"
#include "framework/onnx/import_context.h"
#include "framework/onnx/integer_folding.h"
#include "framework/onnx/onnx_model.h"
#include "framework/onnx/onnx_tensor.h"
#include "framework/suggest.h"
#include "framework/validate.h"

namespace kiln {
namespace {

using namespace onnx_import;  // NOLINT: this file is the importer's edge

bool IsDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

int64_t DefaultOpset(const onnx::ModelProto& model, const std::string& source) {
  for (const auto& o : model.opset_import()) {
    if (IsDefaultDomain(o.domain())) return o.version();
  }
  ThrowInvalidArgument(source, ": the model imports no opset of the default ONNX domain");
}

std::set<std::string> CollectUses(const onnx::GraphProto& g) {
  std::set<std::string> used;
  for (const auto& n : g.node()) used.insert(n.input().begin(), n.input().end());
  for (const auto& o : g.output()) used.insert(o.name());
  return used;
}

// Dims of graph input `name`: the caller's, else the model's.
Dims InputDims(const onnx::ValueInfoProto& input, const OnnxImportOptions& options, const std::string& source) {
  if (auto it = options.input_shapes.find(input.name()); it != options.input_shapes.end()) {
    for (int64_t d : it->second) {
      if (d == 0 || d < -1) {
        ThrowInvalidArgument(source, ": input shape of '", input.name(), "' ", DimsToString(it->second),
                             ": dims must be positive or -1");
      }
    }
    return it->second;
  }
  const OnnxValueInfo info = ValueInfoOf(input);
  if (!info.dims) {
    ThrowInvalidArgument(source, ": graph input '", input.name(), "' has no shape in the model; give it (input_shapes)");
  }
  for (int64_t d : *info.dims) {
    if (d == 0) ThrowUnimplemented(source, ": graph input '", input.name(), "' has a zero dim; no kiln var holds one");
  }
  return *info.dims;
}

// A zero-size result is refused (no kiln var holds one).
void CheckZeroSize(NodeContext& ctx, ImportContext& ic) {
  for (size_t i = 0; i < ctx.OutputCount(); ++i) {
    const Value* v = ctx.HasOutput(i) ? ic.Find(ctx.node().output(static_cast<int>(i))) : nullptr;
    if (v != nullptr && v->kind == Value::Kind::kRuntime && Numel(v->dims) == 0) {
      ctx.Refuse("output ", i, " would be the zero-size ", DimsToString(v->dims), ", and no kiln var holds one");
    }
  }
}

// Refuses what kiln computed for a node when ONNX's shape inference says
// otherwise: a converter that is wrong must not import quietly.
void CheckAgainstOnnx(NodeContext& ctx, ImportContext& ic, const std::map<std::string, OnnxValueInfo>& infos) {
  for (size_t i = 0; i < ctx.OutputCount(); ++i) {
    if (!ctx.HasOutput(i)) continue;
    const std::string& name = ctx.node().output(static_cast<int>(i));
    const Value* v = ic.Find(name);
    auto found = infos.find(name);
    if (v == nullptr || found == infos.end()) continue;
    const OnnxValueInfo* info = &found->second;
    if (info->elem_type != 0 && KilnDtype(info->elem_type) != v->dtype) {
      ctx.RefuseWith(ErrorCode::kInternal, StrCat("output ", i, ": kiln computes ", DataTypeName(v->dtype),
                                                  ", ONNX's shape inference ", OnnxDtypeName(info->elem_type)));
    }
    if (!info->dims) continue;
    bool same = info->dims->size() == v->dims.size();
    for (size_t k = 0; same && k < v->dims.size(); ++k) {
      same = (*info->dims)[k] < 0 || v->dims[k] < 0 || (*info->dims)[k] == v->dims[k];
    }
    if (!same) {
      ctx.RefuseWith(ErrorCode::kInternal, StrCat("output ", i, ": kiln computes dims ", DimsToString(v->dims),
                                                  ", ONNX's shape inference ", DimsToString(*info->dims)));
    }
  }
}

void ConvertNode(ImportContext& ic, const onnx::NodeProto& node, int index) {
  NodeContext ctx(ic, node, index);
  if (!IsDefaultDomain(node.domain())) ctx.Refuse("domain '", node.domain(), "': kiln imports the ONNX domain only");
  const Converter* c = FindConverter(node.op_type());
  if (c == nullptr) ctx.Refuse("no converter: kiln has no op for ", node.op_type());
  if (c->convert == nullptr) ctx.Refuse(c->missing);
  if (ic.opset() < c->since || ic.opset() > c->until) {
    ctx.Refuse("the converter handles opsets ", c->since, " to ", c->until);
  }
  bool all_constant = !c->fold_only && !c->random;
  bool any_input = false;
  for (size_t i = 0; i < ctx.InputCount(); ++i) {
    if (!ctx.HasInput(i)) continue;
    any_input = true;
    all_constant = all_constant && ctx.InputValue(i).kind == Value::Kind::kConstant;
  }
  if (any_input && all_constant) {
    if (!FoldIntegerArithmetic(node, index, ic)) FoldNode(*c, node, index, ic);
  } else {
    c->convert(ctx);
    ctx.Commit();
  }
  CheckZeroSize(ctx, ic);
}

// A graph input bound to `value` at import: a constant.
void BindInput(const onnx::ValueInfoProto& in, const Tensor& value, DataType dtype, ImportContext& ic) {
  if (value.dtype() != dtype) {
    ThrowInvalidArgument(ic.source(), ": the value bound to input '", in.name(), "' is ", DataTypeName(value.dtype()),
                         ", the model's input ", DataTypeName(dtype));
  }
  const OnnxValueInfo info = ValueInfoOf(in);
  bool fits = !info.dims || info.dims->size() == value.dims().size();
  for (size_t k = 0; fits && info.dims && k < value.dims().size(); ++k) {
    fits = (*info.dims)[k] < 0 || (*info.dims)[k] == value.dim(k);
  }
  if (!fits) {
    ThrowInvalidArgument(ic.source(), ": the value bound to input '", in.name(), "' is ",
                         DimsToString(value.dims()), ", the model's input ", DimsToString(*info.dims));
  }
  auto t = std::make_shared<Tensor>();
  if (value.numel() == 0) {
    *t = Tensor(value.dtype(), value.dims());
  } else {
    t->CopyFrom(value);
  }
  ic.SetValue(in.name(), Value{Value::Kind::kConstant, "", std::move(t), value.dims(), value.dtype()});
}

bool AllFinite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.dtype() == DataType::kFP32 ? t.data<float>()[i] : t.data<double>()[i];
    if (!std::isfinite(v)) return false;
  }
  return true;
}

void DefineGraphValues(const onnx::GraphProto& g, const OnnxImportOptions& options, ImportContext& ic,
                       OnnxImport* result) {
  const std::string& source = ic.source();
  std::set<std::string> initializers, float_initializers;
  for (const auto& init : g.initializer()) {
    auto t = std::make_shared<const Tensor>(TensorFromProto(init, source + ": initializer '" + init.name() + "'"));
    // Float initializers are parameters (never folded away); the others
    // (shapes, axes, indices) are constants like a Constant node's.
    const bool param = t->dtype() == DataType::kFP32 || t->dtype() == DataType::kFP64;
    const bool frozen = param && (options.trainable ? !options.trainable->count(init.name()) : !AllFinite(*t));
    ic.SetValue(init.name(), Value{param ? Value::Kind::kInitializer : Value::Kind::kConstant, "", t, t->dims(),
                                   t->dtype(), frozen});
    initializers.insert(init.name());
    if (param) float_initializers.insert(init.name());
  }
  if (options.trainable) {
    for (const std::string& name : *options.trainable) {
      if (!float_initializers.count(name)) {
        ThrowInvalidArgument(source, ": trainable names '", name, "', which is not a float initializer of the model",
                             DidYouMean(name, std::vector<std::string>(float_initializers.begin(),
                                                                       float_initializers.end())));
      }
    }
  }
  if (g.sparse_initializer_size() > 0) ThrowUnimplemented(source, ": sparse initializers (kiln tensors are dense)");
  std::set<std::string> inputs;
  for (const auto& in : g.input()) {
    inputs.insert(in.name());
    if (initializers.count(in.name())) continue;  // an initializer listed as an input (IR < 4)
    const std::optional<DataType> dtype = KilnDtype(in.type().tensor_type().elem_type());
    if (!in.type().has_tensor_type() || !dtype) {
      ThrowUnimplemented(source, ": graph input '", in.name(), "' is ",
                         in.type().has_tensor_type() ? OnnxDtypeName(in.type().tensor_type().elem_type())
                                                     : std::string("not a tensor"),
                         " (kiln has float, double, int64, int32 and bool tensors)");
    }
    if (auto bound = options.input_values.find(in.name()); bound != options.input_values.end()) {
      BindInput(in, bound->second, *dtype, ic);
      continue;
    }
    const std::string var = ic.DeclareInput(in.name(), InputDims(in, options, source), *dtype);
    result->inputs.push_back(var);
    result->onnx_inputs.push_back(in.name());
    result->var_of[in.name()] = var;
  }
  auto check_named = [&](const std::string& name, const char* what) {
    if (!inputs.count(name) || initializers.count(name)) {
      ThrowInvalidArgument(source, ": ", what, " given for '", name, "', which is not a graph input");
    }
  };
  for (const auto& kv : options.input_shapes) check_named(kv.first, "input shape");
  for (const auto& kv : options.input_values) check_named(kv.first, "input value");
}

}  // namespace

OnnxImport ImportOnnxModelFromBytes(const std::string& bytes, const OnnxImportOptions& options,
                                    const std::string& source, const std::string& model_dir) {
  const onnx::ModelProto model = LoadModelProto(bytes, source, model_dir);
  const onnx::GraphProto& g = model.graph();
  OnnxImport result;
  result.opset = DefaultOpset(model, source);
  ImportContext ic(source, result.opset);
  ic.SetUsed(CollectUses(g));
  DefineGraphValues(g, options, ic, &result);
  for (int i = 0; i < g.node_size(); ++i) ConvertNode(ic, g.node(i), i);
  // ONNX's shape inference on what kiln accepted, with the dims kiln used.
  std::map<std::string, Dims> input_dims;
  for (const auto& in : g.input()) {
    if (const Value* v = ic.Find(in.name())) input_dims[in.name()] = v->dims;
  }
  const std::map<std::string, OnnxValueInfo> infos = InferValueInfo(model, input_dims, source);
  for (int i = 0; i < g.node_size(); ++i) {
    NodeContext ctx(ic, g.node(i), i);
    CheckAgainstOnnx(ctx, ic, infos);
  }
  for (const auto& out : g.output()) {
    if (ic.Find(out.name()) == nullptr) {
      ThrowInvalidArgument(source, ": graph output '", out.name(), "' is computed by no node");
    }
    // A graph output known at import (all folded) is a persistable var.
    std::string var;
    try {
      var = ic.Materialise(out.name(), VarRole::kConstant);
    } catch (const Error& e) {
      throw OnnxImportError(e.code(), StrCat(source, ": graph output '", out.name(), "': ", e.what()));
    }
    result.outputs.push_back(var);
    result.onnx_outputs.push_back(out.name());
    result.var_of[out.name()] = var;
  }
  try {
    ValidateProgram(ic.main());
    ValidateProgram(ic.startup());
  } catch (const Error& e) {
    throw OnnxImportError(ErrorCode::kInternal, StrCat(source, ": the imported program is not valid: ", e.what()));
  }
  result.main = ic.main();
  result.startup = ic.startup();
  result.parameters = ic.parameters();
  result.state = ic.state();
  result.frozen = ic.frozen();
  return result;
}

OnnxImport ImportOnnxModel(const std::string& path, const OnnxImportOptions& options) {
  const std::string bytes = ReadFile(path);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return ImportOnnxModelFromBytes(bytes, options, path, dir.empty() ? "." : dir.string());
}

Tensor ReadOnnxTensorFile(const std::string& path, Dims* dims_of_empty) {
  onnx::TensorProto t;
  if (!t.ParseFromString(ReadFile(path))) ThrowInvalidArgument(path, ": not an ONNX TensorProto");
  Tensor out = TensorFromProto(t, path);
  if (out.numel() == 0 && dims_of_empty != nullptr) *dims_of_empty = out.dims();
  return out;
}

OnnxModelSummary SummarizeOnnxModel(const std::string& path) {
  onnx::ModelProto model;
  if (!model.ParseFromString(ReadFile(path))) ThrowInvalidArgument(path, ": not an ONNX model");
  OnnxModelSummary out;
  std::set<std::string> initializers;
  for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
  for (const auto& n : model.graph().node()) out.op_types.push_back(n.op_type());
  for (const auto& i : model.graph().input()) {
    if (!initializers.count(i.name())) out.inputs.push_back(i.name());
  }
  for (const auto& o : model.graph().output()) out.outputs.push_back(o.name());
  return out;
}

std::vector<OnnxOpSupport> OnnxOpTable() {
  std::vector<OnnxOpSupport> out;
  for (const Converter& c : ConverterTable()) {
    out.push_back({c.op_type, c.convert ? c.since : 0, c.convert ? c.until : 0, c.missing});
  }
  return out;
}

}  // namespace kiln
