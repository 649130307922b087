// Small ONNX models built in C++ for the importer's tests: graph inputs and
// outputs, initializers, nodes with attributes, serialised to the bytes
// ImportOnnxModelFromBytes reads (or a file).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "framework/file_util.h"

namespace kiln::test {

class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(int64_t opset = 14, const std::string& name = "test") {
    model_.set_ir_version(8);
    model_.set_producer_name("kiln tests");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name(name);
  }

  // dims: -1 is a symbolic dim ("N").
  OnnxModelBuilder& Input(const std::string& name, const std::vector<int64_t>& dims,
                          int32_t type = onnx::TensorProto::FLOAT) {
    SetType(model_.mutable_graph()->add_input(), name, dims, type);
    return *this;
  }
  OnnxModelBuilder& Output(const std::string& name, const std::vector<int64_t>& dims,
                           int32_t type = onnx::TensorProto::FLOAT) {
    SetType(model_.mutable_graph()->add_output(), name, dims, type);
    return *this;
  }
  OnnxModelBuilder& Floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    Tensor(t, name, dims, onnx::TensorProto::FLOAT);
    for (float x : v) t->add_float_data(x);
    return *this;
  }
  OnnxModelBuilder& Ints(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& v) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    Tensor(t, name, dims, onnx::TensorProto::INT64);
    for (int64_t x : v) t->add_int64_data(x);
    return *this;
  }
  // An initializer whose data is in `location` (relative to the model).
  OnnxModelBuilder& External(const std::string& name, const std::vector<int64_t>& dims, const std::string& location) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    Tensor(t, name, dims, onnx::TensorProto::FLOAT);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = t->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    return *this;
  }

  // A node; attributes are added to the returned proto.
  onnx::NodeProto& Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(model_.graph().node_size() - 1) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }

  onnx::ModelProto& model() { return model_; }
  std::string Bytes() const { return model_.SerializeAsString(); }
  void Write(const std::string& path) const { WriteFileAtomic(path, Bytes()); }

 private:
  static void SetType(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims,
                      int32_t type) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    auto* shape = t->mutable_shape();
    for (int64_t d : dims) {
      if (d < 0) {
        shape->add_dim()->set_dim_param("N");
      } else {
        shape->add_dim()->set_dim_value(d);
      }
    }
  }
  static void Tensor(onnx::TensorProto* t, const std::string& name, const std::vector<int64_t>& dims, int32_t type) {
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
  }

  onnx::ModelProto model_;
};

inline void AttrInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void AttrFloat(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void AttrInts(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
// A Constant node's tensor value (int64).
inline void AttrInt64Tensor(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t x : v) t->add_int64_data(x);
}

}  // namespace kiln::test
