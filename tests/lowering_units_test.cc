// The unit kinds steps share (compiler/lowering/units/): derived buffers are
// typed values whose names are spelled in one place, the one matmul
// recognizer finds the matmuls the bf16 steps rewrite from typed operands
// (never from a suffix of a var name), and the one bf16 conversion kernel
// rounds as the framework does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/lowering/cluster.h"
#include "compiler/lowering/units/matmul_sgd.h"
#include "compiler/lowering/units/onednn_matmul.h"
#include "compiler/lowering/units/unit.h"
#include "framework/bf16.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

using jit::DerivedBuffer;
using jit::DerivedKind;

TEST(DerivedBufferTest, NamesAreSpelledOnceAndKeepTheGoldensSpelling) {
  EXPECT_EQ(DerivedBuffer("w").Name(), "w");
  EXPECT_FALSE(DerivedBuffer("w").derived());
  EXPECT_EQ(jit::OldValueOf("w").Name(), "w@OLD");
  EXPECT_EQ(jit::Bf16CopyOf("h").Name(), "h@BF16");
  EXPECT_EQ(jit::Bf16CopyOf("h").dtype, DataType::kBF16);
  EXPECT_EQ(jit::KeptLayoutOf("y", ActLayout::kNChw16c).Name(), "y@nChw16c");
  EXPECT_EQ(jit::KeptLayoutOf("y", ActLayout::kNChw8c).Name(), "y@nChw8c");
  EXPECT_EQ(jit::KeptLayoutOf("y", ActLayout::kNhwc).Name(), "y@nhwc");
  // The element type is part of the value, not of the name.
  const DerivedBuffer f32 = jit::KeptLayoutOf("ds", ActLayout::kNChw16c);
  const DerivedBuffer bf16 = jit::KeptLayoutOf("ds", ActLayout::kNChw16c, DataType::kBF16);
  EXPECT_EQ(f32.Name(), bf16.Name());
  EXPECT_NE(f32, bf16);
  EXPECT_NE(jit::OldValueOf("w"), DerivedBuffer("w"));
}

// A conv input y [2,20,4,6] and a matmul_grad whose X is bigger than W.
LoweringCase DescCase() {
  LoweringCase c = GradAndSgd("units_desc", /*m=*/16, /*k=*/8, /*n=*/4, /*want_dx=*/true);
  c.ops.push_back(OpBuilder("relu").In("X", {"y"}).Out("Out", {"r"}).Build());
  c.inputs.push_back({"y", {2, 20, 4, 6}});
  c.outputs.push_back("r");
  return c;
}

TEST(DerivedBufferTest, TheDescOfEachKind) {
  const LoweringCase lc = DescCase();
  const JitSubgraph sg = MakeSubgraph(lc);
  const jit::Cluster c(sg, SignatureOf(lc), lc.options, OpRegistry::Global());

  const proto::VarDesc old = jit::OldValueOf("w").Desc(c);
  EXPECT_EQ(old.name(), "w@OLD");
  EXPECT_FALSE(old.persistable());
  EXPECT_EQ(old.dtype(), proto::FP32);
  EXPECT_EQ(std::vector<int64_t>(old.dims().begin(), old.dims().end()), (std::vector<int64_t>{8, 4}));

  const proto::VarDesc copy = jit::Bf16CopyOf("w").Desc(c);
  EXPECT_EQ(copy.name(), "w@BF16");
  EXPECT_EQ(copy.dtype(), proto::BF16);

  const proto::VarDesc kept = jit::KeptLayoutOf("y", ActLayout::kNChw16c, DataType::kBF16).Desc(c);
  EXPECT_EQ(kept.name(), "y@nChw16c");
  EXPECT_EQ(kept.dtype(), proto::BF16);
  // 20 channels in two blocks of 16, the lanes past 20 padding.
  EXPECT_EQ(std::vector<int64_t>(kept.dims().begin(), kept.dims().end()), (std::vector<int64_t>{2, 2, 4, 6, 16}));
  EXPECT_EQ(jit::KeptLayoutOf("y", ActLayout::kNhwc).Desc(c).dtype(), proto::FP32);
}

// sgd_before_dx's dX = dY W_old^T: a matmul variant of the grad op (op 0)
// reading `w_old`, which it names `derived` (empty: by name alone).
std::unique_ptr<jit::OneDnnOpUnit> DxUnit(const jit::Cluster& c, const std::string& w_old,
                                          std::vector<DerivedBuffer> derived) {
  auto desc = std::make_shared<proto::OpDesc>(
      OpBuilder("matmul").In("X", {"dy"}).In("Y", {w_old}).Out("Out", {"dx"}).Attr("transpose_Y", true).Build());
  return std::make_unique<jit::OneDnnOpUnit>("sgd_before_dx", c, 0,
                                             jit::OneDnnOpUnit::Operands{desc, std::move(derived)});
}

TEST(MatmulRecognizerTest, TheOldWeightRoundTripsAsATypedValue) {
  const LoweringCase lc = DescCase();
  const JitSubgraph sg = MakeSubgraph(lc);
  const jit::Cluster c(sg, SignatureOf(lc), lc.options, OpRegistry::Global());
  const jit::MatmulSgdUnit::Operands so{"x", DerivedBuffer("dy"), "lr", "w", {16, 8}, {8, 4}, "dx"};
  const jit::MatmulSgdUnit step("sgd_before_dx", {0, 1}, so, /*keep_old=*/true);
  EXPECT_EQ(step.writes(), (std::set<std::string>{"w", "w@OLD"}));

  const auto dx = DxUnit(c, step.old_w().Name(), {step.old_w()});
  const std::optional<jit::MatmulView> m = jit::AsOneDnnMatmul(c, *dx);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->operands.x, DerivedBuffer("dy"));
  EXPECT_EQ(m->operands.w, jit::OldValueOf("w"));
  EXPECT_EQ(m->operands.out, "dx");
  EXPECT_TRUE(m->operands.bias.empty());
  EXPECT_TRUE(m->spec.transpose_w);
  EXPECT_EQ(m->spec.w_dims, (Dims{8, 4}));  // W's, which the old value has
  // The unit it becomes binds the same names.
  const jit::OneDnnMatmulUnit unit("bf16_activations", dx->ops(), m->spec, m->operands);
  EXPECT_EQ(unit.reads(), (std::set<std::string>{"dy", "w@OLD"}));
  EXPECT_EQ(unit.writes(), (std::set<std::string>{"dx"}));

  // A var that is only named like an old value is not one: nothing parses
  // "@OLD" back.
  EXPECT_FALSE(jit::AsOneDnnMatmul(c, *DxUnit(c, "w@OLD", {})).has_value());
}

TEST(MatmulRecognizerTest, TheInputGradientAloneAndNotTheWholeGrad) {
  const LoweringCase lc = DescCase();
  const JitSubgraph sg = MakeSubgraph(lc);
  const jit::Cluster c(sg, SignatureOf(lc), lc.options, OpRegistry::Global());
  // The whole matmul_grad (dX and dW) is no matmul.
  EXPECT_FALSE(jit::AsOneDnnMatmul(c, jit::OneDnnOpUnit("onednn_anchors", c, 0)).has_value());
  auto dx_only = std::make_shared<proto::OpDesc>(c.op(0));
  SetOutput(dx_only.get(), GradVarName("Y"), {kEmptyVarName});
  const std::optional<jit::MatmulView> m =
      jit::AsOneDnnMatmul(c, jit::OneDnnOpUnit("weight_grad_fold", c, 0, {dx_only, {}}));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->operands.x, DerivedBuffer("dy"));
  EXPECT_EQ(m->operands.w, DerivedBuffer("w"));
  EXPECT_EQ(m->operands.out, "dx");
  EXPECT_EQ(m->spec.x_dims, (Dims{16, 4}));
}

TEST(MatmulUnitTest, TheSpecTakesItsDtypesFromTheOperands) {
  jit::FusedMatmulSpec spec;
  spec.x_dims = {16, 4};
  spec.w_dims = {8, 4};
  spec.transpose_w = true;
  spec.compute = ComputeType::kBF16;
  const jit::OneDnnMatmulUnit unit("bf16_activations", {0}, spec,
                                   {jit::Bf16CopyOf("dy"), jit::Bf16CopyOf("w"), "", "dx"});
  EXPECT_EQ(unit.spec().x_dtype, DataType::kBF16);
  EXPECT_EQ(unit.spec().w_dtype, DataType::kBF16);
  EXPECT_FALSE(unit.spec().bias);
  EXPECT_EQ(unit.reads(), (std::set<std::string>{"dy@BF16", "w@BF16"}));
}

// The one bf16 conversion kernel (bf16_weight_copies' copy, the matmul sgd
// kernel's scaled operand) rounds as the framework does, at sizes around a
// vector's width.
TEST(ToBf16KernelTest, RoundsAsTheFrameworkScaledOrNot) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (const int64_t n : {1, 15, 16, 17, 1000}) {
    for (const bool scaled : {false, true}) {
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      const float scale = 0.37f;
      std::vector<uint16_t> out(n);
      const auto k = jit::MakeToBf16Kernel(n, scaled, HostIsa(), "to_bf16");
      const void* in[] = {x.data(), &scale};
      void* outs[] = {out.data()};
      k->Run(in, outs);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], FloatToBf16Bits(scaled ? scale * x[i] : x[i]))
            << "n " << n << (scaled ? " scaled" : "") << " at " << i;
      }
    }
  }
}

// Layers of matmul_grad + sgd with elementwise ops between them that read
// and write the same names (an in-place update, a weight read twice), so
// that ranges of units touch and miss every kind of var.
LoweringCase TouchCase() {
  LoweringCase c;
  c.name = "units_touch";
  for (int l = 0; l < 4; ++l) {
    const std::string s = std::to_string(l), w = "w" + s, dw = "dw" + s, x = "x" + s, dy = "dy" + s;
    c.ops.push_back(OpBuilder("matmul_grad")
                        .In("X", {x})
                        .In("Y", {w})
                        .In("Out@GRAD", {dy})
                        .Out("Y@GRAD", {dw})
                        .Out("X@GRAD", {kEmptyVarName})
                        .Build());
    c.ops.push_back(OpBuilder("relu").In("X", {l % 2 || l == 2 ? "w0" : x}).Out("Out", {"r" + s}).Build());
    c.ops.push_back(OpBuilder("scale").In("X", {"r" + s}).Out("Out", {l == 2 ? "w1" : "t" + s}).Build());
    c.inputs.push_back({x, {8, 4}});
    c.inputs.push_back({w, {4, 4}});
    c.inputs.push_back({dy, {8, 4}});
    c.outputs.push_back("r" + s);
  }
  for (int l = 0; l < 4; ++l) {
    const std::string s = std::to_string(l);
    c.ops.push_back(OpBuilder("sgd")
                        .In("Param", {"w" + s})
                        .In("Grad", {"dw" + s})
                        .In("LearningRate", {"lr"})
                        .Out("ParamOut", {"w" + s})
                        .Build());
    c.outputs.push_back("w" + s);
  }
  c.inputs.push_back({"lr", {1}});
  return c;
}

// The indexed check (VarUses::NothingBetweenTouches, which the weight
// gradient fold uses) answers as the scan over the units between, for every
// range, sets of vars drawn from the cluster's and fusions of units in the
// range, before and after units are taken away.
TEST(VarUsesTest, NothingBetweenTouchesAnswersAsTheScan) {
  const LoweringCase lc = TouchCase();
  const JitSubgraph sg = MakeSubgraph(lc);
  const jit::Cluster c(sg, SignatureOf(lc), lc.options, OpRegistry::Global());
  jit::Units units;
  for (int i = 0; i < c.num_ops(); ++i) units.push_back(std::make_unique<jit::PendingOp>(c, i));
  std::vector<std::string> names;
  for (const auto& u : units) {
    for (const auto* vars : {&u->reads(), &u->writes()}) names.insert(names.end(), vars->begin(), vars->end());
  }
  std::mt19937 rng(7);
  auto some = [&](size_t k) {
    std::set<std::string> out;
    for (size_t i = 0; i < k; ++i) out.insert(names[rng() % names.size()]);
    return out;
  };
  jit::VarUses uses(units);
  int checked = 0, touched = 0;
  for (int removed = 0; removed < 3; ++removed) {
    const int n = static_cast<int>(units.size());
    for (int from = 0; from < n; ++from) {
      for (int to = from + 1; to < n; ++to) {
        for (int draw = 0; draw < 6; ++draw) {
          const std::set<std::string> reads = some(draw % 3 + 1), writes = some(draw % 2 + 1);
          std::set<int> fused;
          if (draw >= 3 && to - from > 1) fused.insert(from + 1 + static_cast<int>(rng() % (to - from - 1)));
          const bool scan = jit::NothingBetweenTouches(units, from, to, reads, writes, fused);
          EXPECT_EQ(uses.NothingBetweenTouches(from, to, reads, writes, fused), scan)
              << "units " << from << ".." << to << " after " << removed << " removed";
          ++checked;
          touched += scan ? 0 : 1;
        }
      }
    }
    // Take away a unit, as the fold takes the sgd it merges.
    const int u = 4 + 3 * removed;
    uses.Remove(u, *units[u]);
    units[u].reset();
  }
  // Both answers occur, so the comparison means something.
  EXPECT_GT(touched, 0);
  EXPECT_LT(touched, checked);
}

// Every compile records where its time went: the cluster's shapes, each
// lowering step, the emission of each unit kind and the plan, in that order
// (the figures themselves are timings: not checked).
TEST(CompilePhasesTest, EveryStepAndEachUnitKindHasAPhase) {
  const auto obj = LowerCase(GradAndSgd("units_phases", 16, 8, 4, /*want_dx=*/true));
  std::vector<std::string> names;
  for (const auto& p : obj->compile_phases) {
    names.push_back(p.name);
    EXPECT_GE(p.wall_ms, 0.0) << p.name;
    EXPECT_GE(p.cpu_ms, 0.0) << p.name;
  }
  auto at = [&](const std::string& name) {
    return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  const int n = static_cast<int>(names.size());
  EXPECT_EQ(at("cluster"), 0);
  EXPECT_LT(at("weight_grad_fold"), at("elementwise_groups"));
  EXPECT_LT(at("elementwise_groups"), at("framework_fallback"));
  EXPECT_LT(at("framework_fallback"), at("emit matmul_sgd"));
  EXPECT_LT(at("emit matmul_sgd"), at("plan"));
  EXPECT_LT(at("plan"), n);
  EXPECT_EQ(at("plan"), n - 1);
  EXPECT_GE(obj->compile_cpu_ms, 0.0);
}

}  // namespace
}  // namespace kiln::test
