// matmul / matmul_grad: values against a naive triple loop, gradients against
// finite differences, build-time shape inference and bad-input errors.
#include <gtest/gtest.h>

#include <functional>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

using test::CheckGrad;
using test::CompareTensors;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

struct Case {
  Dims x, y;
  bool tx = false, ty = false;
  float alpha = 1.0f;
};

proto::OpDesc MatmulOp(const Case& c) {
  return OpBuilder("matmul")
      .In("X", {"x"})
      .In("Y", {"y"})
      .Out("Out", {"out"})
      .Attr("transpose_X", c.tx)
      .Attr("transpose_Y", c.ty)
      .Attr("alpha", c.alpha)
      .Build();
}

// Straightforward reference in double: every Out element as a dot product,
// with the broadcast batch index mapped back into X and Y.
Tensor NaiveMatmul(const Tensor& x, const Tensor& y, const Case& c) {
  const Dims& xd = x.dims();
  const Dims& yd = y.dims();
  const size_t xr = xd.size(), yr = yd.size();
  const int64_t m = c.tx ? xd[xr - 1] : xd[xr - 2];
  const int64_t k = c.tx ? xd[xr - 2] : xd[xr - 1];
  const int64_t n = c.ty ? yd[yr - 2] : yd[yr - 1];
  const size_t br = std::max(xr, yr) - 2;
  Dims xb(br, 1), yb(br, 1), ob(br);
  for (size_t i = 0; i < xr - 2; ++i) xb[br - (xr - 2) + i] = xd[i];
  for (size_t i = 0; i < yr - 2; ++i) yb[br - (yr - 2) + i] = yd[i];
  for (size_t i = 0; i < br; ++i) ob[i] = std::max(xb[i], yb[i]);
  Dims od = ob;
  od.push_back(m);
  od.push_back(n);
  Tensor out(DataType::kFP64, od);
  double* o = out.mutable_data<double>();
  const int64_t batches = Numel(ob);
  for (int64_t b = 0; b < batches; ++b) {
    // Decompose b over ob, then re-linearise over xb / yb (index 0 where size 1).
    std::vector<int64_t> idx(br);
    int64_t rest = b;
    for (int64_t d = static_cast<int64_t>(br) - 1; d >= 0; --d) {
      idx[d] = rest % ob[d];
      rest /= ob[d];
    }
    int64_t xbi = 0, ybi = 0;
    for (size_t d = 0; d < br; ++d) {
      xbi = xbi * xb[d] + (xb[d] == 1 ? 0 : idx[d]);
      ybi = ybi * yb[d] + (yb[d] == 1 ? 0 : idx[d]);
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double a = ValueAt(x, xbi * m * k + (c.tx ? kk * m + i : i * k + kk));
          const double bb = ValueAt(y, ybi * k * n + (c.ty ? j * k + kk : kk * n + j));
          s += a * bb;
        }
        o[(b * m + i) * n + j] = c.alpha * s;
      }
    }
  }
  return out;
}

std::vector<Case> ValueCases() {
  return {
      {{1, 1}, {1, 1}},
      {{7, 17}, {17, 33}},
      {{17, 7}, {33, 17}, true, true},
      {{17, 7}, {17, 1}, true, false, 0.5f},
      {{7, 33}, {5, 33}, false, true, -2.0f},
      {{2, 7, 33}, {33, 17}},                      // [B,S,D] @ [D,F]
      {{2, 3, 7, 5}, {2, 3, 7, 5}, false, true},   // [B,H,S,D] @ [B,H,S,D]^T
      {{3, 1, 7, 5}, {1, 4, 5, 6}},                // both sides broadcast
      {{7, 5}, {3, 5, 4}, false, false, 1.5f},     // rank 2 @ rank 3
      {{2, 1, 5, 7}, {3, 5, 4}, true, false},      // rank 4 @ rank 3, transpose_X
      {{4, 33, 17}, {1, 17, 33}, false, false},
  };
}

TEST(MatmulOpTest, MatchesNaiveFp32AndFp64) {
  std::mt19937 rng(1);
  for (const Case& c : ValueCases()) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(c.x, dtype, rng);
      Tensor y = RandomTensor(c.y, dtype, rng);
      auto scope = RunOp(MatmulOp(c), {{"x", x}, {"y", y}});
      const Tensor& out = scope->GetVar("out")->Get();
      EXPECT_EQ(out.dtype(), dtype);
      const double tol = dtype == DataType::kFP32 ? 1e-5 : 1e-12;
      EXPECT_EQ(CompareTensors(out, NaiveMatmul(x, y, c), tol, tol), "")
          << DimsToString(c.x) << " @ " << DimsToString(c.y) << " tx=" << c.tx << " ty=" << c.ty;
    }
  }
}

TEST(MatmulOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}},
      {{7, 5}, {5, 3}},
      {{5, 7}, {3, 5}, true, true, 0.5f},
      {{5, 7}, {5, 3}, true, false},
      {{7, 5}, {3, 5}, false, true, -1.5f},
      {{2, 3, 5}, {5, 4}},                       // Y broadcast over the batch
      {{2, 1, 3, 5}, {1, 3, 4, 5}, false, true},  // both broadcast
      {{5, 3}, {2, 5, 4}, true, false},
  };
  for (const Case& c : cases) {
    std::map<std::string, Tensor> in = {{"x", RandomTensor(c.x, DataType::kFP64, rng)},
                                        {"y", RandomTensor(c.y, DataType::kFP64, rng)}};
    EXPECT_EQ(CheckGrad(MatmulOp(c), in, {"x", "y"}, {"out"}), "")
        << DimsToString(c.x) << " @ " << DimsToString(c.y) << " tx=" << c.tx << " ty=" << c.ty;
  }
}

TEST(MatmulOpTest, GradWithoutOutGradIsZero) {
  std::mt19937 rng(3);
  proto::OpDesc g = OpBuilder("matmul_grad")
                        .In("X", {"x"})
                        .In("Y", {"y"})
                        .In("Out@GRAD", {kEmptyVarName})
                        .Out("X@GRAD", {"dx"})
                        .Out("Y@GRAD", {kEmptyVarName})
                        .Build();
  auto scope = RunOp(g, {{"x", RandomTensor({3, 4}, DataType::kFP32, rng)},
                         {"y", RandomTensor({4, 2}, DataType::kFP32, rng)}});
  const Tensor& dx = scope->GetVar("dx")->Get();
  ASSERT_EQ(dx.dims(), (Dims{3, 4}));
  for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_EQ(ValueAt(dx, i), 0.0);
}

// Declares x and y, runs build-time inference of one matmul, returns out's dims.
Dims InferAtBuild(const Dims& x, const Dims& y, bool ty) {
  proto::BlockDesc block;
  for (const auto& [name, dims] : {std::pair<std::string, Dims>{"x", x}, {"y", y}}) {
    proto::VarDesc* v = block.add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    for (int64_t d : dims) v->add_dims(d);
  }
  *block.add_ops() = MatmulOp({x, y, false, ty});
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  return VarDims(*FindVarDesc(block, "out"));
}

TEST(MatmulOpTest, BuildTimeShapesPropagateUnknownDims) {
  EXPECT_EQ(InferAtBuild({-1, 64}, {64, 10}, false), (Dims{-1, 10}));
  EXPECT_EQ(InferAtBuild({-1, 7, 64}, {64, 10}, false), (Dims{-1, 7, 10}));
  EXPECT_EQ(InferAtBuild({-1, 4, -1, 8}, {-1, 4, -1, 8}, true), (Dims{-1, 4, -1, -1}));
  EXPECT_EQ(InferAtBuild({-1, 3, 5}, {2, 5, 4}, false), (Dims{2, 3, 4}));  // -1 batch must be 1 or 2
  EXPECT_EQ(InferAtBuild({1, 3, 5}, {-1, 5, 4}, false), (Dims{-1, 3, 4}));
}

TEST(MatmulOpTest, BadInputsAreRejected) {
  std::mt19937 rng(4);
  auto run = [&](const Case& c, DataType ydtype = DataType::kFP32) {
    return ErrorOf([&] {
      RunOp(MatmulOp(c), {{"x", RandomTensor(c.x, DataType::kFP32, rng)}, {"y", RandomTensor(c.y, ydtype, rng)}});
    });
  };
  std::string msg = run({{2, 3}, {4, 5}});
  EXPECT_NE(msg.find("'matmul'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inner dimensions do not match"), std::string::npos) << msg;
  EXPECT_NE(msg.find("K=3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("K=4"), std::string::npos) << msg;
  msg = run({{3, 2}, {3, 5}, true, true});  // op(Y) has K=5
  EXPECT_NE(msg.find("inner dimensions do not match"), std::string::npos) << msg;
  msg = run({{3}, {3, 5}});
  EXPECT_NE(msg.find("input X: expected rank >= 2, got [3]"), std::string::npos) << msg;
  msg = run({{2, 3, 4}, {3, 4, 5}});
  EXPECT_NE(msg.find("do not broadcast"), std::string::npos) << msg;
  msg = run({{2, 3}, {3, 5}}, DataType::kFP64);
  EXPECT_NE(msg.find("input Y: expected dtype f32"), std::string::npos) << msg;
  // The same check at build time.
  msg = ErrorOf([] { InferAtBuild({-1, 3}, {4, 5}, false); });
  EXPECT_NE(msg.find("inner dimensions do not match"), std::string::npos) << msg;
}

TEST(MatmulOpTest, RegistryEntry) {
  const OpInfo& info = OpRegistry::Global().Get("matmul");
  EXPECT_EQ(info.jit, JitLowering::kOneDnn);
  EXPECT_FALSE(info.doc.empty());
  EXPECT_TRUE(info.grad_maker);
  EXPECT_EQ(OpRegistry::Global().Get("matmul_grad").jit, JitLowering::kOneDnn);
}

}  // namespace
}  // namespace kiln
