#include "tests/memory_test_util.h"

#include <cstring>

#include "tests/op_test_util.h"

namespace kiln::test {

Tensor Copy(const Tensor& t) {
  Tensor c;
  c.CopyFrom(t);
  return c;
}

std::string BitDiff(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return "shape " + a.ShapeString() + " vs " + b.ShapeString();
  if (!a.initialized() || !b.initialized()) return "a tensor holds no data";
  if (std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) != 0) {
    return "bytes differ: " + CompareTensors(a, b, 0, 0);
  }
  return "";
}

proto::ProgramDesc OneBlock(const std::vector<proto::OpDesc>& ops) {
  proto::ProgramDesc program;
  proto::BlockDesc* block = program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  for (const auto& op : ops) *block->add_ops() = op;
  return program;
}

std::vector<proto::OpDesc> DonorChain() {
  return {OpBuilder("exp").In("X", {"x"}).Out("Out", {"a"}).Build(),
          OpBuilder("matmul").In("X", {"a"}).In("Y", {"w"}).Out("Out", {"b"}).Build(),
          OpBuilder("softmax").In("X", {"b"}).Out("Out", {"out"}).Build()};
}

proto::ProgramDesc DonorProgram(bool later_reader, int64_t batch, int64_t classes, int64_t hidden) {
  proto::ProgramDesc program;
  proto::BlockDesc* block = program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  auto var = [&](const std::string& name, Dims dims, DataType dt, bool persistable) {
    proto::VarDesc* v = block->add_vars();
    v->set_name(name);
    v->set_dtype(ToProto(dt));
    for (int64_t d : dims) v->add_dims(d);
    v->set_persistable(persistable);
  };
  var("logits", {batch, classes}, DataType::kFP32, false);
  var("labels", {batch, 1}, DataType::kINT64, false);
  var("sm", {batch, classes}, DataType::kFP32, false);
  var("ce", {batch, 1}, DataType::kFP32, false);
  var("a", {batch, classes}, DataType::kFP32, false);
  var("w", {classes, hidden}, DataType::kFP32, true);
  var("b", {batch, hidden}, DataType::kFP32, false);
  var("out", {batch, hidden}, DataType::kFP32, false);
  *block->add_ops() = OpBuilder("softmax_with_cross_entropy")
                          .In("Logits", {"logits"})
                          .In("Label", {"labels"})
                          .Out("Softmax", {"sm"})
                          .Out("Loss", {"ce"})
                          .Build();
  for (const auto& op : DonorChain()) {
    proto::OpDesc o = op;
    for (auto& s : *o.mutable_inputs()) {
      for (auto& a : *s.mutable_args()) {
        if (a == "x") a = "sm";
      }
    }
    *block->add_ops() = o;
  }
  if (later_reader) {
    var("sm2", {batch, classes}, DataType::kFP32, false);
    var("ce2", {batch, 1}, DataType::kFP32, false);
    *block->add_ops() = OpBuilder("softmax_with_cross_entropy")
                            .In("Logits", {"sm"})
                            .In("Label", {"labels"})
                            .Out("Softmax", {"sm2"})
                            .Out("Loss", {"ce2"})
                            .Build();
  }
  return program;
}

}  // namespace kiln::test
