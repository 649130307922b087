// The no-need-buffer grad ops (elementwise_add/sub_grad's Y, mean_grad,
// reduce_sum/mean_grad's and reshape2_grad's X) give the same bits when that
// input is shape-only (its buffer released), on the reference and the oneDNN
// kernels, at random shapes and both float types.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "tests/memory_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::BitDiff;
using test::Copy;
using test::OneBlock;

struct GradCase {
  std::string what;
  proto::OpDesc fwd;
  std::map<std::string, Tensor> inputs;  // forward inputs
  std::string shape_only_var;            // the forward input the grad op reads only for its shape
};

// Runs `grad` over a scope holding `inputs`, with `release` (if not empty)
// made shape-only first; returns copies of the grad op's outputs.
std::map<std::string, Tensor> RunGradOp(const proto::OpDesc& grad, const std::map<std::string, Tensor>& inputs,
                                        const std::string& release, bool use_onednn) {
  Scope scope;
  for (const auto& [name, t] : inputs) scope.Var(name)->GetMutable()->CopyFrom(t);
  if (!release.empty()) {
    Tensor* t = scope.GetTensor(release);
    const Dims dims = t->dims();
    t->ReleaseBuffer();
    EXPECT_TRUE(t->shape_only());
    EXPECT_TRUE(t->has_shape());
    EXPECT_FALSE(t->initialized());
    EXPECT_EQ(t->raw_data(), nullptr);
    EXPECT_EQ(t->dims(), dims);
  }
  std::set<std::string> keep;
  for (const auto& a : AllOutputArgs(grad)) {
    if (a != kEmptyVarName) keep.insert(a);
  }
  ExecutorOptions o;
  o.use_onednn = use_onednn;
  Executor exec(o);
  auto plan = exec.Prepare(OneBlock({grad}), 0, keep);
  exec.Run(*plan, scope);
  if (!release.empty()) {
    EXPECT_TRUE(scope.GetTensor(release)->shape_only()) << "a fed input must stay as it was";
  }
  std::map<std::string, Tensor> out;
  for (const auto& name : keep) out[name] = Copy(scope.GetVar(name)->Get());
  return out;
}

void CheckShapeOnlyGrad(const GradCase& c, const std::string& expected_grad_type) {
  SCOPED_TRACE(c.what);
  const OpInfo& info = OpRegistry::Global().Get(c.fwd.type());
  ASSERT_TRUE(info.grad_maker);
  const std::vector<proto::OpDesc> grads = info.grad_maker(c.fwd);
  ASSERT_EQ(grads.size(), 1u);
  const proto::OpDesc& grad = grads[0];
  ASSERT_EQ(grad.type(), expected_grad_type);
  const OpInfo& ginfo = OpRegistry::Global().Get(grad.type());
  ASSERT_EQ(NoNeedBufferVars(ginfo, grad), std::set<std::string>{c.shape_only_var})
      << "the grad op must read '" << c.shape_only_var << "' only for its shape";

  // Out@GRAD: random, with the dims the forward op gives Out.
  auto fwd_scope = test::RunOp(c.fwd, c.inputs);
  std::mt19937 rng(static_cast<unsigned>(c.what.size()) * 7919u + 3u);
  std::map<std::string, Tensor> inputs = c.inputs;
  for (const auto& a : AllInputArgs(grad)) {
    if (inputs.count(a) || a == kEmptyVarName) continue;
    ASSERT_GT(a.size(), 5u) << a;
    const std::string out = a.substr(0, a.size() - 5);  // strip @GRAD
    const Tensor& fwd_out = fwd_scope->GetVar(out)->Get();
    inputs[a] = test::RandomTensor(fwd_out.dims(), fwd_out.dtype(), rng);
  }
  for (bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "use_onednn" : "reference kernels");
    const auto full = RunGradOp(grad, inputs, "", onednn);
    const auto meta = RunGradOp(grad, inputs, c.shape_only_var, onednn);
    ASSERT_EQ(full.size(), meta.size());
    ASSERT_FALSE(full.empty());
    for (const auto& [name, t] : full) {
      EXPECT_EQ(BitDiff(meta.at(name), t), "") << name;
      // The gradient of the shape-only input has its dims.
      if (name == GradVarName(c.shape_only_var)) {
        EXPECT_EQ(t.dims(), c.inputs.at(c.shape_only_var).dims());
      }
    }
  }
}

std::vector<DataType> FloatTypes() { return {DataType::kFP32, DataType::kFP64}; }

TEST(ShapeOnlyGradTest, ElementwiseAddAndSubGradIgnoreYData) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> dim(1, 37);
  for (const std::string type : {"elementwise_add", "elementwise_sub"}) {
    for (int rep = 0; rep < 4; ++rep) {
      const int64_t m = dim(rng) | 1, n = dim(rng) | 1, k = dim(rng);
      struct Shape {
        std::string name;
        Dims x, y;
        int64_t axis;
      };
      const std::vector<Shape> shapes = {{"same", {m, n}, {m, n}, -1},
                                         {"Y[N] into [M,N]", {m, n}, {n}, -1},
                                         {"Y[1,N] into [M,N]", {m, n}, {1, n}, -1},
                                         {"Y[N] axis 1 into [M,N,K]", {m, n, k}, {n}, 1},
                                         {"Y[1] into [M]", {m}, {1}, -1}};
      for (const Shape& s : shapes) {
        for (DataType dt : FloatTypes()) {
          GradCase c;
          c.what = type + " " + s.name + " X" + DimsToString(s.x) + " Y" + DimsToString(s.y) + " " +
                   DataTypeName(dt);
          c.fwd = OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", s.axis).Build();
          c.inputs = {{"x", test::RandomTensor(s.x, dt, rng)}, {"y", test::RandomTensor(s.y, dt, rng)}};
          c.shape_only_var = "y";
          CheckShapeOnlyGrad(c, type + "_grad");
        }
      }
    }
  }
}

TEST(ShapeOnlyGradTest, MeanReduceAndReshapeGradIgnoreXData) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int64_t> dim(1, 23);
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t a = dim(rng) | 1, b = dim(rng), c3 = dim(rng) | 1;
    for (DataType dt : FloatTypes()) {
      const std::string suffix = " [" + std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c3) +
                                 "] " + DataTypeName(dt);
      const std::map<std::string, Tensor> in = {{"x", test::RandomTensor({a, b, c3}, dt, rng)}};
      {
        GradCase c{"mean" + suffix, OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build(), in, "x"};
        CheckShapeOnlyGrad(c, "mean_grad");
      }
      for (const std::string type : {"reduce_sum", "reduce_mean"}) {
        for (const auto& [dims, keep_dim] : std::vector<std::pair<std::vector<int64_t>, bool>>{
                 {{1}, false}, {{0, 2}, true}, {{-1}, false}, {{2}, true}}) {
          GradCase c{type + " dim " + DimsToString(dims) + (keep_dim ? " keep" : "") + suffix,
                     OpBuilder(type)
                         .In("X", {"x"})
                         .Out("Out", {"out"})
                         .Attr("dim", dims)
                         .Attr("keep_dim", keep_dim)
                         .Build(),
                     in, "x"};
          CheckShapeOnlyGrad(c, type + "_grad");
        }
        GradCase all{type + " reduce_all" + suffix,
                     OpBuilder(type).In("X", {"x"}).Out("Out", {"out"}).Attr("reduce_all", true).Build(), in, "x"};
        CheckShapeOnlyGrad(all, type + "_grad");
      }
      for (const std::vector<int64_t>& shape :
           std::vector<std::vector<int64_t>>{{a * b * c3}, {0, -1}, {c3, a, b}, {0, b, 1, c3}}) {
        GradCase c{"reshape2 to " + DimsToString(shape) + suffix,
                   OpBuilder("reshape2").In("X", {"x"}).Out("Out", {"out"}).Attr("shape", shape).Build(), in, "x"};
        CheckShapeOnlyGrad(c, "reshape2_grad");
      }
    }
  }
}

}  // namespace
}  // namespace kiln
