// append_backward through every differentiable op of issue 28, chained in
// two f64 programs (the unary functions; the binary, tensor, reduction and
// normalisation ops): the gradients of every input match central finite
// differences of the loss, computed by running the forward program again.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/program_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

struct Chain {
  proto::ProgramDesc forward;
  std::string loss;
  std::map<std::string, Tensor> feeds;
};

std::string Mean(ProgramBuilder& b, const std::string& v) { return b.Op1("mean", {{"X", {v}}}); }
std::string Scale(ProgramBuilder& b, const std::string& v, float scale, float bias = 0) {
  return b.Op1("scale", {{"X", {v}}}, {{"scale", scale}, {"bias", bias}});
}
std::string Unary(ProgramBuilder& b, const std::string& type, const std::string& v, const AttrMap& attrs = {}) {
  return b.Op1(type, {{"X", {v}}}, attrs);
}

// x in (-0.9, 0.9): every function's domain; acosh reads 1.5 + x^2,
// reciprocal 2 + x, the step functions 3x. Some chained, all summed.
Chain UnaryChain() {
  ProgramBuilder b(41);
  const std::string x = b.Data("x", {3, 4}, DataType::kFP64, /*stop_gradient=*/false);
  std::vector<std::string> terms;
  for (const std::string t : {"asin", "acos", "atanh", "atan", "sin", "cos", "tan", "sinh", "cosh", "asinh", "erf",
                              "softsign", "selu"}) {
    terms.push_back(Unary(b, t, x));
  }
  terms.push_back(Unary(b, "acosh", Scale(b, Unary(b, "pow", x, {{"factor", 2.0f}}), 1, 1.5f)));
  terms.push_back(Unary(b, "reciprocal", Scale(b, x, 1, 2)));
  const std::string x3 = Scale(b, x, 3);
  for (const std::string t : {"floor", "ceil", "round", "sign"}) {
    // step(3x) * x: the step's zero grad beside x's own.
    terms.push_back(b.Op1("elementwise_mul", {{"X", {Unary(b, t, x3)}}, {"Y", {x}}}));
  }
  // Chained: celu(elu(sin x)), hard_swish(5 hard_sigmoid(3x) - 2), thresholded_relu(cos x).
  terms.push_back(Unary(b, "celu", Unary(b, "elu", terms[4], {{"alpha", 0.7f}}), {{"alpha", 0.5f}}));
  terms.push_back(Unary(b, "hard_swish", Scale(b, Unary(b, "hard_sigmoid", x3), 5, -2)));
  terms.push_back(Unary(b, "thresholded_relu", terms[5], {{"threshold", 0.8f}}));
  std::vector<std::string> means;
  for (const std::string& t : terms) means.push_back(Mean(b, t));
  Chain c;
  c.loss = b.Op1("sum", {{"X", means}});
  c.forward = b.main();
  std::mt19937 rng(42);
  c.feeds["x"] = test::RandomTensor({3, 4}, DataType::kFP64, rng, -0.9, 0.9);
  return c;
}

// x [2,3,4], y [3,4], w [3,1], alpha [3,1], s, bias [3]:
// mx = max(x, expand(w)); mn = min(x, y); pw = (0.5 + sigmoid x)^y;
// in = instance_norm(prelu(mx, alpha), s, bias); pd = pad(tile(mn), reflect);
// loss = mean(reduce_prod(0.5 + sigmoid(pw))) + mean(reduce_l1(cumsum(pd)))
//      + mean(reduce_l2(in)) + mean(logsumexp(pad(pw, edge))) + mean(pad(mx, constant)).
Chain TensorChain() {
  ProgramBuilder b(43);
  auto data = [&](const std::string& n, const Dims& d) { return b.Data(n, d, DataType::kFP64, false); };
  const std::string x = data("x", {2, 3, 4}), y = data("y", {3, 4}), w = data("w", {3, 1});
  const std::string alpha = data("alpha", {3, 1}), s = data("s", {3}), bias = data("bias", {3});
  const std::string e = b.Op1("expand_v2", {{"X", {w}}}, {{"shape", std::vector<int64_t>{2, 3, 4}}});
  const std::string mx = b.Op1("elementwise_max", {{"X", {x}}, {"Y", {e}}});
  const std::string mn = b.Op1("elementwise_min", {{"X", {x}}, {"Y", {y}}});
  const std::string base = Scale(b, Unary(b, "sigmoid", x), 1, 0.5f);
  const std::string pw = b.Op1("elementwise_pow", {{"X", {base}}, {"Y", {y}}});
  const std::string pr = b.Op1("prelu", {{"X", {mx}}, {"Alpha", {alpha}}}, {{"mode", std::string("element")}});
  const std::string in = b.Op1("instance_norm", {{"X", {pr}}, {"Scale", {s}}, {"Bias", {bias}}}, {}, "Y");
  const std::string t = b.Op1("tile", {{"X", {mn}}}, {{"repeat_times", std::vector<int64_t>{1, 1, 2}}});
  const std::string pd = b.Op1("pad", {{"X", {t}}},
                               {{"paddings", std::vector<int64_t>{0, 0, 1, 1, 2, 0}}, {"mode", std::string("reflect")}});
  const std::string cs = b.Op1("cumsum", {{"X", {pd}}}, {{"axis", int64_t{2}}, {"exclusive", true}});
  auto reduce = [&](const std::string& type, const std::string& v, std::vector<int64_t> dim, bool keep = false) {
    return Mean(b, b.Op1(type, {{"X", {v}}}, {{"dim", dim}, {"keep_dim", keep}}));
  };
  const std::string pe = b.Op1("pad", {{"X", {pw}}}, {{"paddings", std::vector<int64_t>{1, 0, 0, 2, 1, 1}}, {"mode", std::string("edge")}});
  const std::string pc =
      b.Op1("pad", {{"X", {mx}}}, {{"paddings", std::vector<int64_t>{0, 1, 1, 0, 0, 1}}, {"pad_value", 0.5f}});
  const std::vector<std::string> means = {
      reduce("reduce_prod", Scale(b, Unary(b, "sigmoid", pw), 1, 0.5f), {2}),
      reduce("reduce_l1", cs, {1}),
      reduce("reduce_l2", in, {1, 2}),
      reduce("logsumexp", pe, {1}, true),
      Mean(b, pc),
  };
  Chain c;
  c.loss = b.Op1("sum", {{"X", means}});
  c.forward = b.main();
  std::mt19937 rng(44);
  c.feeds = {{"x", test::RandomTensor({2, 3, 4}, DataType::kFP64, rng, -1, 1)},
             {"y", test::RandomTensor({3, 4}, DataType::kFP64, rng, -1, 1)},
             {"w", test::RandomTensor({3, 1}, DataType::kFP64, rng, -1, 1)},
             {"alpha", test::RandomTensor({3, 1}, DataType::kFP64, rng, 0, 0.5)},
             {"s", test::RandomTensor({3}, DataType::kFP64, rng, 0.5, 1.5)},
             {"bias", test::RandomTensor({3}, DataType::kFP64, rng, -1, 1)}};
  return c;
}

double LossOf(const Chain& c, const std::map<std::string, Tensor>& feeds) {
  auto scope = test::RunOps({c.forward.blocks(0).ops().begin(), c.forward.blocks(0).ops().end()}, feeds, false);
  return scope->GetVar(c.loss)->Get().data<double>()[0];
}

// append_backward, then every element of every fed input: the analytic
// gradient against (L(v + eps) - L(v - eps)) / 2 eps. Returns the grad op
// types the pass made.
std::set<std::string> ExpectGradientsMatchFiniteDifferences(const Chain& c) {
  proto::ProgramDesc p = c.forward;
  BackwardSpec spec;
  spec.targets = {c.loss};
  const auto grads = AppendBackwardPass(&p, spec);
  auto scope = test::RunOps({p.blocks(0).ops().begin(), p.blocks(0).ops().end()}, c.feeds, false);
  for (const auto& [name, value] : c.feeds) {
    EXPECT_TRUE(grads.count(name)) << name << " got no gradient";
    if (!grads.count(name)) continue;
    const Tensor& g = scope->GetVar(grads.at(name))->Get();
    for (int64_t i = 0; i < value.numel(); ++i) {
      std::map<std::string, Tensor> moved;
      for (const auto& [n, t] : c.feeds) moved[n].CopyFrom(t);
      const double eps = 1e-6;
      moved[name].mutable_data<double>()[i] += eps;
      const double up = LossOf(c, moved);
      moved[name].mutable_data<double>()[i] -= 2 * eps;
      const double down = LossOf(c, moved);
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(g.data<double>()[i], fd, 1e-6 + 1e-6 * std::fabs(fd)) << name << "@GRAD[" << i << "]";
    }
  }
  std::set<std::string> types;
  for (const auto& op : p.blocks(0).ops()) types.insert(op.type());
  return types;
}

TEST(OnnxOpsBackwardTest, UnaryChainMatchesFiniteDifferences) {
  const std::set<std::string> types = ExpectGradientsMatchFiniteDifferences(UnaryChain());
  for (const std::string t : {"erf", "floor", "ceil", "round", "sign", "reciprocal", "softsign", "sin", "cos", "tan",
                              "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "elu", "selu", "celu",
                              "hard_sigmoid", "hard_swish", "thresholded_relu"}) {
    EXPECT_TRUE(types.count(t + "_grad")) << t;
  }
}

TEST(OnnxOpsBackwardTest, TensorChainMatchesFiniteDifferences) {
  const std::set<std::string> types = ExpectGradientsMatchFiniteDifferences(TensorChain());
  for (const std::string t : {"elementwise_max", "elementwise_min", "elementwise_pow", "tile", "expand_v2", "pad",
                              "cumsum", "reduce_prod", "reduce_l1", "reduce_l2", "logsumexp", "instance_norm", "prelu"}) {
    EXPECT_TRUE(types.count(t + "_grad")) << t;
  }
}

}  // namespace
}  // namespace kiln
