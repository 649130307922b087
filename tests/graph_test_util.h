// Helpers of the ir::Graph tests (graph_test, graph_edit_test): blocks built
// var by var, and the small programs they convert.
#pragma once

#include "framework/ir/graph.h"

#include <algorithm>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/op_desc.h"

namespace kiln {
namespace graph_test {

using ir::Graph;
using ir::kNoNode;
using ir::NodeId;

inline proto::VarDesc Var(const std::string& name, Dims dims, proto::DataType dtype = proto::FP32,
                   bool persistable = false) {
  proto::VarDesc v;
  v.set_name(name);
  v.set_dtype(dtype);
  for (int64_t d : dims) v.add_dims(d);
  v.set_persistable(persistable);
  return v;
}

inline void AddVar(proto::BlockDesc* b, const std::string& name, Dims dims, proto::DataType dtype = proto::FP32,
            bool persistable = false) {
  *b->add_vars() = Var(name, dims, dtype, persistable);
}

inline proto::BlockDesc NewBlock() {
  proto::BlockDesc b;
  b.set_idx(0);
  b.set_parent_idx(-1);
  return b;
}

inline void ExpectSameBlock(const proto::BlockDesc& want, const proto::BlockDesc& got) {
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(want, got))
      << "want:\n" << want.DebugString() << "got:\n" << got.DebugString();
}

inline std::vector<std::string> Types(const Graph& g, const std::vector<NodeId>& ops) {
  std::vector<std::string> out;
  for (NodeId o : ops) out.push_back(g.op(o).type());
  return out;
}

// A two-layer MLP with its backward ops and an sgd update per parameter
// (ParamOut is Param), written the way append_backward + optimizer would.
inline proto::BlockDesc MlpTrainBlock() {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {64, 784});
  AddVar(&b, "label", {64, 1}, proto::INT64);
  AddVar(&b, "w1", {784, 64}, proto::FP32, true);
  AddVar(&b, "b1", {64}, proto::FP32, true);
  AddVar(&b, "w2", {64, 10}, proto::FP32, true);
  AddVar(&b, "lr", {1}, proto::FP32, true);
  for (const char* n : {"h1", "a1", "r1"}) AddVar(&b, n, {64, 64});
  AddVar(&b, "logits", {64, 10});
  AddVar(&b, "sm", {64, 10});
  AddVar(&b, "loss", {64, 1});
  AddVar(&b, "avg", {1});
  for (const char* n : {"avg", "loss", "logits", "r1", "w2", "a1", "h1", "b1", "w1"}) {
    *b.add_vars() = Var(GradVarName(n), VarDims(*FindVarDesc(b, n)));
  }
  auto add = [&](const proto::OpDesc& op) { *b.add_ops() = op; };
  add(OpBuilder("matmul").In("X", {"x"}).In("Y", {"w1"}).Out("Out", {"h1"}).Attr("transpose_Y", false).Build());
  add(OpBuilder("elementwise_add").In("X", {"h1"}).In("Y", {"b1"}).Out("Out", {"a1"}).Attr("axis", int64_t{-1})
          .Build());
  add(OpBuilder("relu").In("X", {"a1"}).Out("Out", {"r1"}).Build());
  add(OpBuilder("matmul").In("X", {"r1"}).In("Y", {"w2"}).Out("Out", {"logits"}).Build());
  add(OpBuilder("softmax_with_cross_entropy")
          .In("Logits", {"logits"})
          .In("Label", {"label"})
          .Out("Softmax", {"sm"})
          .Out("Loss", {"loss"})
          .Build());
  add(OpBuilder("mean").In("X", {"loss"}).Out("Out", {"avg"}).Build());
  add(OpBuilder("fill_constant")
          .Out("Out", {"avg@GRAD"})
          .Attr("shape", std::vector<int64_t>{1})
          .Attr("value", 1.0f)
          .Build());
  add(OpBuilder("mean_grad").In("X", {"loss"}).In("Out@GRAD", {"avg@GRAD"}).Out("X@GRAD", {"loss@GRAD"}).Build());
  add(OpBuilder("softmax_with_cross_entropy_grad")
          .In("Label", {"label"})
          .In("Softmax", {"sm"})
          .In("Loss@GRAD", {"loss@GRAD"})
          .Out("Logits@GRAD", {"logits@GRAD"})
          .Build());
  add(OpBuilder("matmul_grad")
          .In("X", {"r1"})
          .In("Y", {"w2"})
          .In("Out@GRAD", {"logits@GRAD"})
          .Out("X@GRAD", {"r1@GRAD"})
          .Out("Y@GRAD", {"w2@GRAD"})
          .Build());
  add(OpBuilder("relu_grad").In("Out", {"r1"}).In("Out@GRAD", {"r1@GRAD"}).Out("X@GRAD", {"a1@GRAD"}).Build());
  add(OpBuilder("elementwise_add_grad")
          .In("X", {"h1"})
          .In("Y", {"b1"})
          .In("Out@GRAD", {"a1@GRAD"})
          .Out("X@GRAD", {"h1@GRAD"})
          .Out("Y@GRAD", {"b1@GRAD"})
          .Build());
  add(OpBuilder("matmul_grad")
          .In("X", {"x"})
          .In("Y", {"w1"})
          .In("Out@GRAD", {"h1@GRAD"})
          .Out("X@GRAD", {kEmptyVarName})
          .Out("Y@GRAD", {"w1@GRAD"})
          .Build());
  for (const char* p : {"w1", "b1", "w2"}) {
    add(OpBuilder("sgd")
            .In("Param", {p})
            .In("Grad", {GradVarName(p)})
            .In("LearningRate", {"lr"})
            .Out("ParamOut", {p})
            .Build());
  }
  return b;
}


inline proto::BlockDesc InPlaceBlock() {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {2, 3});
  AddVar(&b, "w", {3, 3}, proto::FP32, true);
  AddVar(&b, "g", {3, 3});
  AddVar(&b, "lr", {1}, proto::FP32, true);
  AddVar(&b, "y", {2, 3});
  AddVar(&b, "z", {3, 3});
  *b.add_ops() = OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"y"}).Build();
  *b.add_ops() = OpBuilder("sgd")
                     .In("Param", {"w"})
                     .In("Grad", {"g"})
                     .In("LearningRate", {"lr"})
                     .Out("ParamOut", {"w"})
                     .Build();
  *b.add_ops() = OpBuilder("scale").In("X", {"w"}).Out("Out", {"z"}).Attr("scale", 2.0f).Build();
  return b;
}

}  // namespace graph_test
}  // namespace kiln
