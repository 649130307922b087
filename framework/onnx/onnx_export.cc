#include "framework/onnx/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <set>

#include "framework/file_util.h"
#include "framework/onnx/export/export_ops.h"
#include "framework/onnx/onnx_tensor.h"
#include "framework/op_desc.h"

namespace kiln {
namespace {

using onnx_export::ExportContext;

// The first op the table has no entry for, named with the var it makes.
void CheckEveryOpMaps(const proto::BlockDesc& block) {
  const onnx_export::ExportTable& table = onnx_export::Exporters();
  for (int i = 0; i < block.ops_size(); ++i) {
    const proto::OpDesc& op = block.ops(i);
    if (table.count(op.type())) continue;
    const std::vector<std::string> outs = OutputVars(op);
    std::string known;
    for (const auto& [type, fn] : table) known += (known.empty() ? "" : ", ") + type;
    ThrowUnimplemented("onnx export: ", OpLabel(op, i), " (output '", outs.empty() ? "" : outs[0],
                       "'): kiln op '", op.type(), "' has no ONNX mapping (exported: ", known, ")");
  }
}

// A value's type: the var's dtype and dims, -1 as a symbolic dim.
void SetValueInfo(const proto::VarDesc& var, const std::string& name, onnx::ValueInfoProto* v) {
  v->set_name(name);
  const int32_t type = onnx_import::OnnxDtype(FromProto(var.dtype()));
  if (type == onnx::TensorProto::UNDEFINED) {
    ThrowUnimplemented("onnx export: var '", var.name(), "' is ", DataTypeName(FromProto(var.dtype())),
                       ", which ONNX export does not write");
  }
  onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  onnx::TensorShapeProto* shape = t->mutable_shape();
  const Dims dims = VarDims(var);
  for (size_t i = 0; i < dims.size(); ++i) {
    onnx::TensorShapeProto::Dimension* d = shape->add_dim();
    if (dims[i] >= 0) {
      d->set_dim_value(dims[i]);
    } else {
      d->set_dim_param(i == 0 ? "batch" : StrCat(name, "_dim", i));
    }
  }
}

// The persistable vars the ops read that are not fed, in first-use order.
std::vector<std::string> Parameters(const proto::BlockDesc& block, const std::vector<std::string>& feeds) {
  std::set<std::string> seen(feeds.begin(), feeds.end());
  std::vector<std::string> out;
  for (const auto& op : block.ops()) {
    for (const auto& in : InputVars(op)) {
      const proto::VarDesc* v = FindVarDesc(block, in);
      if (v == nullptr || !v->persistable() || !seen.insert(in).second) continue;
      out.push_back(in);
    }
  }
  return out;
}

// Drops the initializers no node reads (a dropout's seed: the exported
// dropout has none).
void DropUnusedInitializers(onnx::GraphProto* graph) {
  std::set<std::string> read;
  for (const auto& node : graph->node()) read.insert(node.input().begin(), node.input().end());
  for (const auto& out : graph->output()) read.insert(out.name());
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (auto& t : *graph->mutable_initializer()) {
    if (read.count(t.name())) *kept.Add() = std::move(t);
  }
  graph->mutable_initializer()->Swap(&kept);
}

// onnx::checker, then shape inference that throws on any node's error and
// on inferred types or dims contradicting the declared ones.
void Verify(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInternal, StrCat("onnx export: the ONNX checker rejects the exported model: ", e.what()));
  }
  onnx::ModelProto copy = model;
  try {
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict_mode=*/1));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInternal,
                StrCat("onnx export: ONNX shape inference rejects the exported model: ", e.what()));
  }
}

}  // namespace

std::vector<std::string> OnnxExportableOps() {
  std::vector<std::string> out;
  for (const auto& [type, fn] : onnx_export::Exporters()) out.push_back(type);
  return out;
}

std::string ExportOnnxModelBytes(const proto::ProgramDesc& program, const std::vector<std::string>& feeds,
                                 const std::vector<std::string>& fetches, const Scope& scope,
                                 const OnnxExportOptions& options) {
  if (program.blocks_size() == 0) ThrowInvalidArgument("onnx export: the program has no blocks");
  const proto::BlockDesc& block = program.blocks(0);
  CheckEveryOpMaps(block);
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("kiln");
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxExportOpset);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name(options.graph_name);
  if (!options.doc.empty()) graph->set_doc_string(options.doc);
  ExportContext ctx(block, scope, graph);
  for (const auto& f : feeds) {
    SetValueInfo(RequireVarDesc(block, f, "feed"), f, graph->add_input());
    ctx.DefineInput(f);
  }
  for (const auto& p : Parameters(block, feeds)) ctx.AddParameter(p);
  const onnx_export::ExportTable& table = onnx_export::Exporters();
  for (int i = 0; i < block.ops_size(); ++i) {
    ctx.Begin(block.ops(i), i);
    table.at(block.ops(i).type())(ctx);
  }
  for (const auto& f : fetches) {
    const proto::VarDesc& var = RequireVarDesc(block, f, "fetch");
    if (!ctx.Defined(f)) ThrowInvalidArgument("onnx export: fetch '", f, "' is made by no op of the program");
    const std::string name = ctx.Current(f);
    SetValueInfo(var, name, graph->add_output());
  }
  DropUnusedInitializers(graph);
  Verify(model);
  return model.SerializeAsString();
}

void ExportOnnxModel(const std::string& path, const proto::ProgramDesc& program, const std::vector<std::string>& feeds,
                     const std::vector<std::string>& fetches, const Scope& scope, const OnnxExportOptions& options) {
  WriteFileAtomic(path, ExportOnnxModelBytes(program, feeds, fetches, scope, options));
}

namespace onnx_export {

const ExportTable& Exporters() {
  static const ExportTable table = [] {
    ExportTable t;
    AddMathExporters(&t);
    AddNnExporters(&t);
    AddShapeExporters(&t);
    return t;
  }();
  return table;
}

}  // namespace onnx_export
}  // namespace kiln
