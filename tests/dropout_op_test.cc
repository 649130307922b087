// dropout and dropout_grad: the kept fraction, the factors Mask holds, p = 0
// and p = 1, the state (different masks run after run, the same mask for the
// same state, resuming from a saved state, any thread count), is_test,
// gradients against finite differences with a fixed mask, dropout_grad
// through the JIT on both ISAs, and errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "compiler/codegen/isa.h"
#include "framework/op_registry.h"
#include "framework/ops/dropout_hash.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

struct DropoutOptions {
  float p = 0.5f;
  bool is_test = false;
  std::string impl = "upscale_in_train";
  int64_t seed = 0;
  bool state = true;  // Seed input and SeedOut (the same var "state")
  bool mask = true;
};

proto::OpDesc DropoutOp(const DropoutOptions& o = {}) {
  OpBuilder b("dropout");
  b.In("X", {"x"}).Out("Out", {"out"});
  if (o.mask) b.Out("Mask", {"mask"});
  if (o.state) b.In("Seed", {"state"}).Out("SeedOut", {"state"});
  return b.Attr("dropout_prob", o.p)
      .Attr("is_test", o.is_test)
      .Attr("dropout_implementation", o.impl)
      .Attr("seed", o.seed)
      .Build();
}

Tensor State(int64_t v) { return test::Int64Tensor({1}, {v}); }

// Runs `op` `steps` times over one scope; returns the masks, in order.
std::vector<Tensor> RunSteps(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs, int steps,
                             Scope* scope_out = nullptr) {
  proto::ProgramDesc program;
  proto::BlockDesc* block = program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  *block->add_ops() = op;
  Scope scope;
  for (const auto& [name, t] : inputs) scope.Var(name)->GetMutable()->CopyFrom(t);
  Executor exec({false, false, false});
  std::vector<Tensor> masks;
  for (int s = 0; s < steps; ++s) {
    exec.RunProgram(program, scope);
    masks.emplace_back();
    masks.back().CopyFrom(scope.GetVar("mask")->Get());
  }
  if (scope_out != nullptr) {
    scope_out->Var("state")->GetMutable()->CopyFrom(scope.GetVar("state")->Get());
  }
  return masks;
}

double KeptFraction(const Tensor& mask) {
  int64_t kept = 0;
  for (int64_t i = 0; i < mask.numel(); ++i) kept += ValueAt(mask, i) != 0.0;
  return static_cast<double>(kept) / mask.numel();
}

bool SameTensor(const Tensor& a, const Tensor& b) { return CompareTensors(a, b, 0, 0).empty(); }

TEST(DropoutOpTest, KeptFractionIsOneMinusP) {
  std::mt19937 rng(1);
  const int64_t n = int64_t{1} << 20;
  const Tensor x = RandomTensor({n}, DataType::kFP32, rng);
  for (float p : {0.1f, 0.5f, 0.9f, 0.03f}) {
    DropoutOptions o;
    o.p = p;
    auto scope = RunOp(DropoutOp(o), {{"x", x}, {"state", State(17)}});
    // Five standard deviations of a binomial fraction.
    const double sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(KeptFraction(scope->GetVar("mask")->Get()), 1.0 - p, 5 * sigma) << "p " << p;
  }
}

TEST(DropoutOpTest, MaskHoldsTheFactorAndOutIsXTimesMask) {
  std::mt19937 rng(2);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const char* impl : {"upscale_in_train", "downgrade_in_infer"}) {
      DropoutOptions o;
      o.p = 0.3f;
      o.impl = impl;
      const Tensor x = RandomTensor({7, 33}, dtype, rng);
      auto scope = RunOp(DropoutOp(o), {{"x", x}, {"state", State(5)}});
      const Tensor& out = scope->GetVar("out")->Get();
      const Tensor& mask = scope->GetVar("mask")->Get();
      ASSERT_EQ(mask.dtype(), dtype);
      const double kept = std::string(impl) == "upscale_in_train" ? 1.0 / (1.0 - 0.3f) : 1.0;
      const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-15;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double m = ValueAt(mask, i);
        ASSERT_TRUE(m == 0.0 || std::fabs(m - kept) <= tol * kept) << impl << " mask " << m;
        ASSERT_EQ(ValueAt(out, i), static_cast<double>(dtype == DataType::kFP32
                                                           ? static_cast<float>(ValueAt(x, i)) * static_cast<float>(m)
                                                           : ValueAt(x, i) * m));
      }
    }
  }
}

// The mask is the documented function of (state, i) (dropout_hash.h).
TEST(DropoutOpTest, MaskIsTheHashOfStateAndIndex) {
  std::mt19937 rng(3);
  const Tensor x = RandomTensor({1000}, DataType::kFP32, rng);
  auto scope = RunOp(DropoutOp(), {{"x", x}, {"state", State(123456789)}});
  const dropout_hash::KeepTest keep(123456789, 0.5);
  const Tensor& mask = scope->GetVar("mask")->Get();
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(ValueAt(mask, i) != 0.0, keep(static_cast<uint64_t>(i))) << i;
  EXPECT_EQ(ValueAt(scope->GetVar("state")->Get(), 0),
            static_cast<double>(static_cast<int64_t>(dropout_hash::NextState(123456789))));
}

TEST(DropoutOpTest, ZeroIsIdentityAndOneGivesZeros) {
  std::mt19937 rng(4);
  const Tensor x = RandomTensor({5, 17}, DataType::kFP32, rng);
  for (const char* impl : {"upscale_in_train", "downgrade_in_infer"}) {
    DropoutOptions o;
    o.impl = impl;
    o.p = 0.0f;
    auto keep_all = RunOp(DropoutOp(o), {{"x", x}, {"state", State(9)}});
    EXPECT_TRUE(SameTensor(keep_all->GetVar("out")->Get(), x)) << impl;
    o.p = 1.0f;
    auto drop_all = RunOp(DropoutOp(o), {{"x", x}, {"state", State(9)}});
    for (const char* name : {"out", "mask"}) {
      const Tensor& t = drop_all->GetVar(name)->Get();
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(ValueAt(t, i), 0.0) << impl << " " << name;
    }
  }
}

TEST(DropoutOpTest, EveryRunDrawsANewMaskFromTheAdvancedState) {
  std::mt19937 rng(5);
  const Tensor x = RandomTensor({4096}, DataType::kFP32, rng);
  const std::vector<Tensor> masks = RunSteps(DropoutOp(), {{"x", x}, {"state", State(1)}}, 4);
  for (size_t a = 0; a < masks.size(); ++a) {
    for (size_t b = a + 1; b < masks.size(); ++b) {
      // Independent masks with p = 0.5 agree on about half the elements.
      int64_t same = 0;
      for (int64_t i = 0; i < x.numel(); ++i) same += (ValueAt(masks[a], i) != 0) == (ValueAt(masks[b], i) != 0);
      EXPECT_NEAR(static_cast<double>(same) / x.numel(), 0.5, 5 * 0.5 / std::sqrt(4096.0)) << a << " vs " << b;
    }
  }
}

// Neighbouring elements of one mask, and the masks of neighbouring states
// (one state var per dropout op, initialised to seed + k), look independent:
// with p = 0.5 a pair is kept together a quarter of the time and agrees half
// of the time.
TEST(DropoutOpTest, NeighbouringElementsAndStatesAreIndependent) {
  const int64_t n = 1 << 16;
  const Tensor x = test::FloatTensor({n}, std::vector<float>(n, 1.0f));
  const double sigma = 0.5 / std::sqrt(static_cast<double>(n));
  std::vector<Tensor> masks;
  for (int64_t state : {0, 1, 2}) {
    auto scope = RunOp(DropoutOp(), {{"x", x}, {"state", State(state)}});
    masks.emplace_back();
    masks.back().CopyFrom(scope->GetVar("mask")->Get());
    int64_t both = 0;
    for (int64_t i = 0; i + 1 < n; ++i) both += ValueAt(masks.back(), i) != 0 && ValueAt(masks.back(), i + 1) != 0;
    EXPECT_NEAR(static_cast<double>(both) / (n - 1), 0.25, 5 * sigma) << "state " << state;
  }
  for (size_t a = 0; a + 1 < masks.size(); ++a) {
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += (ValueAt(masks[a], i) != 0) == (ValueAt(masks[a + 1], i) != 0);
    EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 5 * sigma) << "states " << a << " and " << a + 1;
  }
}

TEST(DropoutOpTest, SameStateGivesTheSameMaskAndAResumedStateContinuesTheSequence) {
  std::mt19937 rng(6);
  const Tensor x = RandomTensor({3, 257}, DataType::kFP32, rng);
  const std::vector<Tensor> first = RunSteps(DropoutOp(), {{"x", x}, {"state", State(42)}}, 5);
  const std::vector<Tensor> again = RunSteps(DropoutOp(), {{"x", x}, {"state", State(42)}}, 5);
  for (size_t s = 0; s < first.size(); ++s) EXPECT_TRUE(SameTensor(first[s], again[s])) << s;
  // "Checkpoint" after two steps: a fresh scope from the saved state.
  Scope saved;
  RunSteps(DropoutOp(), {{"x", x}, {"state", State(42)}}, 2, &saved);
  const std::vector<Tensor> resumed = RunSteps(DropoutOp(), {{"x", x}, {"state", saved.GetVar("state")->Get()}}, 3);
  for (size_t s = 0; s < resumed.size(); ++s) EXPECT_TRUE(SameTensor(resumed[s], first[s + 2])) << s;
}

// The state var made the way the Python layer makes it: fill_constant with
// dtype INT64 in the startup program.
TEST(DropoutOpTest, StateFromFillConstantInt64) {
  std::mt19937 rng(7);
  const proto::OpDesc fill = OpBuilder("fill_constant")
                                 .Out("Out", {"state"})
                                 .Attr("shape", std::vector<int64_t>{1})
                                 .Attr("value", 1234.0f)
                                 .Attr("dtype", static_cast<int64_t>(DataType::kINT64))
                                 .Build();
  const Tensor x = RandomTensor({100}, DataType::kFP32, rng);
  auto scope = test::RunOps({fill, DropoutOp()}, {{"x", x}}, false);
  auto direct = RunOp(DropoutOp(), {{"x", x}, {"state", State(1234)}});
  EXPECT_TRUE(SameTensor(scope->GetVar("mask")->Get(), direct->GetVar("mask")->Get()));
  EXPECT_EQ(scope->GetVar("state")->Get().dtype(), DataType::kINT64);
}

TEST(DropoutOpTest, AnyThreadCountGivesTheSameMask) {
  std::mt19937 rng(8);
  // Above the kernel's parallel threshold.
  const Tensor x = RandomTensor({3, 100003}, DataType::kFP32, rng);
  const int threads = omp_get_max_threads();
  std::vector<Tensor> masks;
  for (int t : {1, 2, 3, 8}) {
    omp_set_num_threads(t);
    auto scope = RunOp(DropoutOp(), {{"x", x}, {"state", State(77)}});
    masks.emplace_back();
    masks.back().CopyFrom(scope->GetVar("mask")->Get());
  }
  omp_set_num_threads(threads);
  for (size_t k = 1; k < masks.size(); ++k) EXPECT_TRUE(SameTensor(masks[k], masks[0])) << k;
}

TEST(DropoutOpTest, WithoutStateTheSeedAttributeGivesTheSameMaskEveryRun) {
  std::mt19937 rng(9);
  const Tensor x = RandomTensor({999}, DataType::kFP32, rng);
  DropoutOptions o;
  o.state = false;
  o.seed = 31;
  const std::vector<Tensor> masks = RunSteps(DropoutOp(o), {{"x", x}}, 3);
  EXPECT_TRUE(SameTensor(masks[0], masks[1]));
  EXPECT_TRUE(SameTensor(masks[0], masks[2]));
  auto with_state = RunOp(DropoutOp(), {{"x", x}, {"state", State(31)}});
  EXPECT_TRUE(SameTensor(with_state->GetVar("mask")->Get(), masks[0]));
  o.seed = 32;
  EXPECT_FALSE(SameTensor(RunSteps(DropoutOp(o), {{"x", x}}, 1)[0], masks[0]));
}

TEST(DropoutOpTest, IsTest) {
  std::mt19937 rng(10);
  const Tensor x = RandomTensor({4, 9}, DataType::kFP64, rng);
  for (const char* impl : {"upscale_in_train", "downgrade_in_infer"}) {
    DropoutOptions o;
    o.is_test = true;
    o.p = 0.25f;
    o.impl = impl;
    auto scope = RunOp(DropoutOp(o), {{"x", x}, {"state", State(3)}});
    const double f = std::string(impl) == "upscale_in_train" ? 1.0 : 1.0 - 0.25;
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(ValueAt(scope->GetVar("out")->Get(), i), ValueAt(x, i) * f) << impl;
      ASSERT_EQ(ValueAt(scope->GetVar("mask")->Get(), i), f) << impl;
    }
    EXPECT_EQ(ValueAt(scope->GetVar("state")->Get(), 0), 3.0) << "is_test advanced the state";
    o.mask = false;
    o.state = false;
    auto bare = RunOp(DropoutOp(o), {{"x", x}});
    EXPECT_TRUE(SameTensor(bare->GetVar("out")->Get(), scope->GetVar("out")->Get()));
  }
}

// ---- gradients ------------------------------------------------------------------------------

// Without a Seed input the mask is fixed by the seed attribute, so the
// forward is a fixed linear map the finite differences can see.
TEST(DropoutGradTest, MatchesFiniteDifferencesWithAFixedMask) {
  std::mt19937 rng(11);
  for (const Dims& dims : {Dims{1}, Dims{7}, Dims{3, 17}, Dims{2, 5, 9}}) {
    for (const char* impl : {"upscale_in_train", "downgrade_in_infer"}) {
      for (bool is_test : {false, true}) {
        DropoutOptions o;
        o.state = false;
        o.seed = 99;
        o.p = 0.4f;
        o.impl = impl;
        o.is_test = is_test;
        EXPECT_EQ(CheckGrad(DropoutOp(o), {{"x", RandomTensor(dims, DataType::kFP64, rng)}}, {"x"}, {"out"}), "")
            << DimsToString(dims) << " " << impl << (is_test ? " is_test" : "");
      }
    }
  }
}

TEST(DropoutGradTest, IsTestGradWithoutMask) {
  std::mt19937 rng(12);
  const Tensor dout = RandomTensor({3, 5}, DataType::kFP32, rng);
  const proto::OpDesc g = OpBuilder("dropout_grad")
                              .In("Out@GRAD", {"dout"})
                              .Out("X@GRAD", {"dx"})
                              .Attr("is_test", true)
                              .Attr("dropout_prob", 0.25f)
                              .Attr("dropout_implementation", std::string("downgrade_in_infer"))
                              .Build();
  auto scope = RunOp(g, {{"dout", dout}});
  for (int64_t i = 0; i < dout.numel(); ++i) {
    EXPECT_FLOAT_EQ(static_cast<float>(ValueAt(scope->GetVar("dx")->Get(), i)),
                    static_cast<float>(ValueAt(dout, i)) * 0.75f);
  }
}

TEST(DropoutGradTest, RegistryEntry) {
  const OpInfo& info = OpRegistry::Global().Get("dropout");
  EXPECT_EQ(info.jit, JitLowering::kFramework);
  EXPECT_EQ(info.no_grad_inputs, std::vector<std::string>{"Seed"});
  const std::vector<proto::OpDesc> g = info.grad_maker(DropoutOp());
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(InputArgs(g[0], "Mask"), std::vector<std::string>{"mask"});
  EXPECT_TRUE(InputArgs(g[0], "X").empty());
  EXPECT_TRUE(InputArgs(g[0], "Seed").empty());
  EXPECT_EQ(OpRegistry::Global().Get("dropout_grad").jit, JitLowering::kElementwise);
}

// dropout_grad in a cluster: one generated kernel, on each ISA, against the
// reference, at sizes around the vector widths; with a Mask, and the
// is_test form without one.
TEST(DropoutGradTest, JitMatchesReferenceOnBothIsas) {
  std::mt19937 rng(13);
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  ASSERT_FALSE(isas.empty());
  for (Isa isa : isas) {
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 1000, 4099}) {
      for (bool with_mask : {true, false}) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " n=" + std::to_string(n) + (with_mask ? "" : " is_test"));
        // The mask from a real forward run, so it holds 0 and 1/(1-p).
        DropoutOptions o;
        o.p = 0.3f;
        const Tensor x = RandomTensor({3, n}, DataType::kFP32, rng);
        auto fwd = RunOp(DropoutOp(o), {{"x", x}, {"state", State(n)}});
        test::LoweringCase c;
        c.name = "dropout_grad";
        OpBuilder g("dropout_grad");
        g.In("Out@GRAD", {"dout"}).Out("X@GRAD", {"dx"}).Attr("dropout_prob", 0.3f);
        if (with_mask) {
          g.In("Mask", {"mask"});
          c.inputs = {{"mask", {3, n}}, {"dout", {3, n}}};
          c.given["mask"].CopyFrom(fwd->GetVar("mask")->Get());
        } else {
          g.Attr("is_test", true).Attr("dropout_implementation", std::string("downgrade_in_infer"));
          c.inputs = {{"dout", {3, n}}};
        }
        // A relu after it: the two fuse into one generated kernel.
        c.ops = {g.Build(), OpBuilder("relu").In("X", {"dx"}).Out("Out", {"r"}).Build()};
        c.outputs = {"dx", "r"};
        c.options.isa = isa;
        const auto obj = test::CheckLoweringNumerics(c, 1e-6, 1e-6, static_cast<unsigned>(n));
        ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
        EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

// ---- errors ---------------------------------------------------------------------------------

TEST(DropoutErrorTest, BadAttributesAndInputs) {
  std::mt19937 rng(14);
  const Tensor x = RandomTensor({4, 3}, DataType::kFP32, rng);
  auto err = [&](const proto::OpDesc& op, const std::map<std::string, Tensor>& in) {
    return ErrorOf([&] { RunOp(op, in); });
  };
  DropoutOptions o;
  o.p = 1.5f;
  EXPECT_NE(err(DropoutOp(o), {{"x", x}, {"state", State(1)}})
                .find("attribute dropout_prob: expected a value in [0, 1], got 1.5"),
            std::string::npos);
  o = {};
  o.impl = "upscale";
  EXPECT_NE(err(DropoutOp(o), {{"x", x}, {"state", State(1)}})
                .find("attribute dropout_implementation: expected \"upscale_in_train\" or \"downgrade_in_infer\", got "
                      "\"upscale\""),
            std::string::npos);
  EXPECT_NE(err(DropoutOp(), {{"x", x}, {"state", test::FloatTensor({1}, {1})}})
                .find("input Seed: expected dtype i64 (the dropout state), got f32"),
            std::string::npos);
  EXPECT_NE(err(DropoutOp(), {{"x", x}, {"state", test::Int64Tensor({2}, {1, 2})}})
                .find("input Seed: expected dims [1], got [2]"),
            std::string::npos);
  EXPECT_NE(err(DropoutOp(), {{"x", test::Int64Tensor({2}, {1, 2})}, {"state", State(1)}})
                .find("input X: expected dtype f32 or f64, got i64"),
            std::string::npos);
  const proto::OpDesc seed_out_only =
      OpBuilder("dropout").In("X", {"x"}).Out("Out", {"out"}).Out("SeedOut", {"state"}).Build();
  EXPECT_NE(err(seed_out_only, {{"x", x}}).find("output SeedOut needs input Seed"), std::string::npos);
  const proto::OpDesc grad_no_mask = OpBuilder("dropout_grad").In("Out@GRAD", {"x"}).Out("X@GRAD", {"dx"}).Build();
  EXPECT_NE(err(grad_no_mask, {{"x", x}}).find("input Mask is required in training (is_test = false)"),
            std::string::npos);
  const proto::OpDesc grad_bad =
      OpBuilder("dropout_grad").In("Mask", {"m"}).In("Out@GRAD", {"x"}).Out("X@GRAD", {"dx"}).Build();
  EXPECT_NE(err(grad_bad, {{"x", x}, {"m", RandomTensor({3, 4}, DataType::kFP32, rng)}})
                .find("input Out@GRAD: expected dims [3,4] (as Mask), got [4,3]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
