// AppendBackwardPass (framework/backward.h): several targets, given target
// gradients, gradients of stop_gradient vars asked for by `wrt`, the seed of
// a target with a -1 dim, op_role on every inserted op, a second and third
// pass that never overwrite the first one's gradients (checked by value
// through the Executor), and errors that leave the program unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

// h = x * w; a = tanh(h); b = 2h. Then an op after both targets that reads
// w@GRAD (as an optimizer would). x is stop_gradient data; ga can seed a.
const char* kTwoTargets = R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP64 dims: 3 dims: 4 stop_gradient: true }
  vars { name: "w" dtype: FP64 dims: 3 dims: 4 persistable: true }
  vars { name: "ga" dtype: FP64 dims: 3 dims: 4 stop_gradient: true }
  vars { name: "ga_wide" dtype: FP64 dims: 3 dims: 5 stop_gradient: true }
  vars { name: "ga_f32" dtype: FP32 dims: 3 dims: 4 stop_gradient: true }
  vars { name: "h" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "a" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "b" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "after" dtype: FP64 dims: 3 dims: 4 }
  ops { type: "elementwise_mul" inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" } outputs { name: "Out" args: "h" } }
  ops { type: "tanh" inputs { name: "X" args: "h" } outputs { name: "Out" args: "a" } }
  ops { type: "scale" inputs { name: "X" args: "h" } outputs { name: "Out" args: "b" } attrs { name: "scale" type: FLOAT f: 2 } }
  ops { type: "scale" inputs { name: "X" args: "w@GRAD" } outputs { name: "Out" args: "after" } }
}
)pb";

struct Feeds {
  Tensor x, w, ga;
};

Feeds RandomFeeds(unsigned seed) {
  std::mt19937 rng(seed);
  Feeds f;
  f.x = test::RandomTensor({3, 4}, DataType::kFP64, rng);
  f.w = test::RandomTensor({3, 4}, DataType::kFP64, rng);
  f.ga = test::RandomTensor({3, 4}, DataType::kFP64, rng);
  return f;
}

// Runs the whole program through the Executor with x, w, ga fed.
std::unique_ptr<Scope> RunProgram(const proto::ProgramDesc& p, const Feeds& f) {
  auto scope = std::make_unique<Scope>();
  FeedTensor(p.blocks(0), *scope, "x", f.x);
  FeedTensor(p.blocks(0), *scope, "w", f.w);
  FeedTensor(p.blocks(0), *scope, "ga", f.ga);
  Executor().RunProgram(p, *scope);
  return scope;
}

double At(const Scope& scope, const std::string& var, int64_t i) { return scope.GetVar(var)->Get().data<double>()[i]; }

int IndexOfWriter(const proto::BlockDesc& b, const std::string& var) {
  for (int i = 0; i < b.ops_size(); ++i) {
    for (const auto& a : AllOutputArgs(b.ops(i))) {
      if (a == var) return i;
    }
  }
  return -1;
}

TEST(BackwardPassTest, SeveralTargetsSumTheirGradientsAndGoBeforeTheOpsAfterThem) {
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  BackwardSpec spec;
  spec.targets = {"b", "a"};  // a's writer comes first: the pass goes after b's
  const auto grads = AppendBackwardPass(&p, spec);
  ValidateProgram(p);
  EXPECT_EQ(grads.at("w"), "w@GRAD");
  EXPECT_EQ(grads.at("h"), "h@GRAD");
  EXPECT_EQ(grads.count("x"), 0u) << "x is stop_gradient and not asked for";
  const proto::BlockDesc& b = p.blocks(0);
  EXPECT_EQ(b.ops(2).type(), "scale");
  EXPECT_EQ(OutputArgs(b.ops(2), "Out")[0], "b");
  EXPECT_EQ(IndexOfWriter(b, "b@GRAD"), 3);
  EXPECT_EQ(OutputArgs(b.ops(b.ops_size() - 1), "Out")[0], "after") << "the op reading w@GRAD stays last";

  const Feeds f = RandomFeeds(1);
  const auto scope = RunProgram(p, f);
  // d(sum(a) + sum(b))/dw = x * (1 - tanh(h)^2) + 2x.
  for (int64_t i = 0; i < 12; ++i) {
    const double x = f.x.data<double>()[i], th = std::tanh(x * f.w.data<double>()[i]);
    EXPECT_NEAR(At(*scope, "w@GRAD", i), x * (1 - th * th) + 2 * x, 1e-12) << i;
    EXPECT_EQ(At(*scope, "after", i), At(*scope, "w@GRAD", i)) << "the op after the pass read the gradient";
  }
}

TEST(BackwardPassTest, AGivenTargetGradientSeedsItsTarget) {
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  BackwardSpec spec;
  spec.targets = {"b", "a"};
  spec.target_grads = {"", "ga"};  // b: ones; a: ga
  AppendBackwardPass(&p, spec);
  ValidateProgram(p);
  const Feeds f = RandomFeeds(2);
  const auto scope = RunProgram(p, f);
  for (int64_t i = 0; i < 12; ++i) {
    const double x = f.x.data<double>()[i], th = std::tanh(x * f.w.data<double>()[i]);
    EXPECT_EQ(At(*scope, "a@GRAD", i), f.ga.data<double>()[i]) << i;
    EXPECT_EQ(At(*scope, "b@GRAD", i), 1.0) << i;
    EXPECT_NEAR(At(*scope, "w@GRAD", i), x * (1 - th * th) * f.ga.data<double>()[i] + 2 * x, 1e-12) << i;
  }
}

TEST(BackwardPassTest, WrtGivesAStopGradientVarAGradientAndNoOtherOne) {
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  BackwardSpec spec;
  spec.targets = {"a"};
  spec.wrt = {"x"};
  const auto grads = AppendBackwardPass(&p, spec);
  ASSERT_EQ(grads.count("x"), 1u);
  EXPECT_EQ(grads.at("x"), "x@GRAD");
  EXPECT_EQ(FindVarDesc(p.blocks(0), "ga@GRAD"), nullptr);
  const proto::VarDesc* xg = FindVarDesc(p.blocks(0), "x@GRAD");
  ASSERT_NE(xg, nullptr);
  EXPECT_EQ(VarDims(*xg), (Dims{3, 4}));
  EXPECT_EQ(xg->dtype(), proto::FP64);
  const Feeds f = RandomFeeds(3);
  const auto scope = RunProgram(p, f);
  for (int64_t i = 0; i < 12; ++i) {
    const double w = f.w.data<double>()[i], th = std::tanh(f.x.data<double>()[i] * w);
    EXPECT_NEAR(At(*scope, "x@GRAD", i), w * (1 - th * th), 1e-12) << i;
  }
}

// y = x @ w with x [-1, 3]: the seed is a fill_any_like of y (its dims are
// known at run time only); with a known batch it stays a fill_constant.
TEST(BackwardPassTest, TheSeedOfATargetWithAnUnknownDimIsFillAnyLike) {
  auto program = [](int64_t batch) {
    return ParseProgramText(R"pb(
      blocks { idx: 0 parent_idx: -1
        vars { name: "x" dtype: FP64 dims: )pb" + std::to_string(batch) + R"pb( dims: 3 stop_gradient: true }
        vars { name: "w" dtype: FP64 dims: 3 dims: 2 persistable: true }
        vars { name: "y" dtype: FP64 dims: )pb" + std::to_string(batch) + R"pb( dims: 2 }
        ops { type: "matmul" inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" }
              outputs { name: "Out" args: "y" } } })pb");
  };
  auto seed_of = [](const proto::ProgramDesc& p) { return p.blocks(0).ops(IndexOfWriter(p.blocks(0), "y@GRAD")); };
  proto::ProgramDesc known = program(5);
  AppendBackwardPass(&known, BackwardSpec{{"y"}, {}, {}});
  EXPECT_EQ(seed_of(known).type(), "fill_constant");

  proto::ProgramDesc p = program(-1);
  AppendBackwardPass(&p, BackwardSpec{{"y"}, {}, {}});
  ValidateProgram(p);
  const proto::OpDesc seed = seed_of(p);
  EXPECT_EQ(seed.type(), "fill_any_like");
  EXPECT_EQ(InputArgs(seed, "X"), std::vector<std::string>{"y"});
  EXPECT_EQ(VarDims(*FindVarDesc(p.blocks(0), "y@GRAD")), (Dims{-1, 2}));

  std::mt19937 rng(4);
  const Tensor x = test::RandomTensor({5, 3}, DataType::kFP64, rng);
  Scope scope;
  FeedTensor(p.blocks(0), scope, "x", x);
  FeedTensor(p.blocks(0), scope, "w", test::RandomTensor({3, 2}, DataType::kFP64, rng));
  Executor().RunProgram(p, scope);
  EXPECT_EQ(scope.GetVar("y@GRAD")->Get().dims(), (Dims{5, 2}));
  // d sum(x @ w) / dw[k][j] = sum_i x[i][k].
  for (int64_t k = 0; k < 3; ++k) {
    double col = 0;
    for (int64_t i = 0; i < 5; ++i) col += x.data<double>()[i * 3 + k];
    for (int64_t j = 0; j < 2; ++j) EXPECT_NEAR(At(scope, "w@GRAD", k * 2 + j), col, 1e-12) << k << "," << j;
  }
}

TEST(BackwardPassTest, EveryInsertedOpAndNoOtherCarriesTheBackwardRole) {
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  // h feeds tanh and scale: its gradient is summed by an inserted sum op.
  AppendBackwardPass(&p, BackwardSpec{{"a", "b"}, {}, {}});
  const proto::BlockDesc& b = p.blocks(0);
  std::set<std::string> backward_types;
  for (int i = 0; i < b.ops_size(); ++i) {
    const bool forward = i < 3 || i == b.ops_size() - 1;
    EXPECT_EQ(HasOpRole(b.ops(i), kOpRoleBackward), !forward) << OpLabel(b.ops(i), i);
    if (!forward) backward_types.insert(b.ops(i).type());
  }
  for (const char* t : {"fill_constant", "sum", "tanh_grad", "scale_grad", "elementwise_mul_grad"}) {
    EXPECT_TRUE(backward_types.count(t)) << t;
  }
}

// x*w feeds tanh and (twice) a square: pass 1 differentiates loss, pass 2
// t = tanh(xw), pass 3 loss again. Each pass writes gradients of its own.
const char* kFanOut = R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP64 dims: 3 dims: 4 stop_gradient: true }
  vars { name: "w" dtype: FP64 dims: 3 dims: 4 persistable: true }
  vars { name: "ga" dtype: FP64 dims: 3 dims: 4 stop_gradient: true }
  vars { name: "xw" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "t" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "sq" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "s" dtype: FP64 dims: 3 dims: 4 }
  vars { name: "loss" dtype: FP64 dims: 1 }
  ops { type: "elementwise_mul" inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" } outputs { name: "Out" args: "xw" } }
  ops { type: "tanh" inputs { name: "X" args: "xw" } outputs { name: "Out" args: "t" } }
  ops { type: "elementwise_mul" inputs { name: "X" args: "xw" } inputs { name: "Y" args: "xw" } outputs { name: "Out" args: "sq" } }
  ops { type: "elementwise_add" inputs { name: "X" args: "t" } inputs { name: "Y" args: "sq" } outputs { name: "Out" args: "s" } }
  ops { type: "mean" inputs { name: "X" args: "s" } outputs { name: "Out" args: "loss" } }
}
)pb";

TEST(BackwardPassTest, LaterPassesWriteNewGradientsAndNeverOverwriteEarlierOnes) {
  proto::ProgramDesc p = ParseProgramText(kFanOut, "fan_out");
  const auto first = AppendBackwardPass(&p, BackwardSpec{{"loss"}, {}, {}});
  const auto second = AppendBackwardPass(&p, BackwardSpec{{"t"}, {"ga"}, {}});
  const auto params = AppendBackward(&p, "loss");  // the third pass, through the (param, grad) API
  ValidateProgram(p);
  EXPECT_EQ(first.at("w"), "w@GRAD");
  EXPECT_EQ(second.at("w"), "w@GRAD@1");
  EXPECT_EQ(second.at("xw"), "xw@GRAD@1");
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0], (std::pair<std::string, std::string>{"w", "w@GRAD@2"}));
  // Every var is written by one op: no pass writes another's names.
  std::map<std::string, int> writers;
  for (const auto& op : p.blocks(0).ops()) {
    for (const auto& a : AllOutputArgs(op)) {
      if (a == kEmptyVarName) continue;
      EXPECT_EQ(++writers[a], 1) << a << " written twice";
    }
  }
  for (const char* v : {"w@GRAD@1", "w@GRAD@2", "loss@GRAD@1", "xw@GRAD@RENAME@0@1"}) {
    EXPECT_NE(FindVarDesc(p.blocks(0), v), nullptr) << v;
  }

  const Feeds f = RandomFeeds(5);
  const auto scope = RunProgram(p, f);
  for (int64_t i = 0; i < 12; ++i) {
    const double x = f.x.data<double>()[i], xw = x * f.w.data<double>()[i], th = std::tanh(xw);
    // loss = mean(tanh(xw) + xw^2): dL/dw = x (1 - tanh^2 + 2xw) / 12.
    const double loss_grad = x * (1 - th * th + 2 * xw) / 12.0;
    EXPECT_NEAR(At(*scope, "w@GRAD", i), loss_grad, 1e-12) << i;
    EXPECT_NEAR(At(*scope, "w@GRAD@1", i), x * (1 - th * th) * f.ga.data<double>()[i], 1e-12) << i;
    EXPECT_NEAR(At(*scope, "w@GRAD@2", i), loss_grad, 1e-12) << i;
  }
}

// o = h + fill_any_like(h): the fill passes no gradient back (its value does
// not depend on h), so d sum(o) / dw is x alone.
TEST(BackwardPassTest, AFillAnyLikeOnThePathPassesNoGradient) {
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  proto::BlockDesc* b = p.mutable_blocks(0);
  b->mutable_ops()->RemoveLast();  // the op reading w@GRAD
  *b->add_ops() = OpBuilder("fill_any_like").In("X", {"h"}).Out("Out", {"a"}).Attr("value", 3.0f).Build();
  *b->add_ops() = OpBuilder("elementwise_add").In("X", {"h"}).In("Y", {"a"}).Out("Out", {"b"}).Build();
  b->mutable_ops()->DeleteSubrange(1, 2);  // tanh and scale
  AppendBackwardPass(&p, BackwardSpec{{"b"}, {}, {}});
  const Feeds f = RandomFeeds(6);
  const auto scope = RunProgram(p, f);
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(At(*scope, "w@GRAD", i), f.x.data<double>()[i], 1e-15) << i;
}

std::string ErrorLeavingProgramUnchanged(proto::ProgramDesc* p, const BackwardSpec& spec,
                                         const OpRegistry& registry = OpRegistry::Global()) {
  const std::string before = p->SerializeAsString();
  const std::string e = ErrorOf([&] { AppendBackwardPass(p, spec, registry); });
  EXPECT_EQ(p->SerializeAsString(), before) << "the program changed: " << e;
  return e;
}

TEST(BackwardPassTest, ATargetGradientThatDoesNotMatchItsTargetIsAnError) {
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  std::string e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"b", "a"}, {"", "ga_wide"}, {}});
  EXPECT_NE(e.find("target gradient 'ga_wide' f64[3,5] does not match target 'a' f64[3,4]"), std::string::npos) << e;
  e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"a"}, {"ga_f32"}, {}});
  EXPECT_NE(e.find("target gradient 'ga_f32' f32[3,4] does not match target 'a' f64[3,4]"), std::string::npos) << e;
  e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"a"}, {"nope"}, {}});
  EXPECT_NE(e.find("target gradient 'nope' is not declared"), std::string::npos) << e;
  e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"a", "x"}, {}, {}});
  EXPECT_NE(e.find("no op writes the loss 'x'"), std::string::npos) << e;
  e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{}, {}, {}});
  EXPECT_NE(e.find("append_backward: no targets"), std::string::npos) << e;
  e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"a"}, {"", "ga"}, {}});
  EXPECT_NE(e.find("append_backward: 2 target gradients for 1 targets"), std::string::npos) << e;
}

// A grad op whose shape inference fails is found after the pass has declared
// its gradients and spliced its ops in: the program is still unchanged.
TEST(BackwardPassTest, AnErrorFoundLateLeavesTheProgramUnchanged) {
  OpRegistry registry;
  RegisterAllOps(registry);
  registry.FindMutable("tanh")->grad_maker = [](const proto::OpDesc& op) {
    // [3,4] @ [3,4]: matmul's shape inference refuses it.
    return std::vector<proto::OpDesc>{OpBuilder("matmul")
                                          .In("X", {GradVarName(OutputArgs(op, "Out")[0])})
                                          .In("Y", {GradVarName(OutputArgs(op, "Out")[0])})
                                          .Out("Out", {GradVarName(InputArgs(op, "X")[0])})
                                          .Build()};
  };
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  const std::string e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"a"}, {}, {}}, registry);
  EXPECT_NE(e.find("'matmul'"), std::string::npos) << e;
}

TEST(BackwardPassTest, AnOpWithoutGradientOnThePathIsAnError) {
  OpRegistry registry;
  RegisterAllOps(registry);
  registry.FindMutable("tanh")->grad_maker = nullptr;
  proto::ProgramDesc p = ParseProgramText(kTwoTargets, "two_targets");
  const std::string e = ErrorLeavingProgramUnchanged(&p, BackwardSpec{{"b", "a"}, {}, {}}, registry);
  EXPECT_NE(e.find("op #1 'tanh' lies on the path to"), std::string::npos) << e;
  EXPECT_NE(e.find("but has no gradient"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
