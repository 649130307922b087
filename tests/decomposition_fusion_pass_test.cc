// decomposition_fusion_pass: goldens for where it fires (the LayerNorm with
// and without its affine tail, both of PyTorch's erf GELU exports) and where
// it must not (a mean over the wrong axis, exponent 3, an intermediate with
// another reader, GELU with another constant, an unknown constant, a program
// with grad ops); the exported attentions put into attention_fusion_pass's
// form and where they must not be (a mask that is not causal or not
// constant, a finite fill); ImportedConstants; registration and place in the
// pipeline; and the numbers: the program fused before append_backward gives
// the unfused program's loss and gradients, JIT off and on (with the JIT the
// attention becomes fused_attention).
#include "passes/decomposition_fusion_pass.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/backward.h"
#include "framework/executor.h"
#include "framework/file_util.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/scope.h"
#include "framework/validate.h"
#include "passes/pass_registry.h"
#include "passes/pipeline.h"
#include "tests/golden_util.h"
#include "tests/program_maker.h"
#include "tests/test_jit.h"

namespace kiln {
namespace {

using ir::Graph;

constexpr float kSqrt2 = 1.41421356f;

// Programs in the importer's spelling: scalar constants are persistable,
// stop_gradient vars of rank 0 whose values the startup program assigns
// (here: `constants`).
struct DecompProgram : test::ProgramMaker {
  DecompProgram() : ProgramMaker(test::OutputDecl::kByShapeInference) {}
  std::map<std::string, float> constants;
  std::map<std::string, Tensor> tensors;

  DecompProgram& Const(const std::string& name, float value) {
    Var(name, {});
    proto::VarDesc* v = FindMutableVarDesc(block, name);
    v->set_persistable(true);
    v->set_stop_gradient(true);
    constants[name] = value;
    return *this;
  }
  DecompProgram& Bin(const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
    Op(OpBuilder(type).In("X", {x}).In("Y", {y}).Out("Out", {out}));
    return *this;
  }
  DecompProgram& Unary(const std::string& type, const std::string& x, const std::string& out) {
    Op(OpBuilder(type).In("X", {x}).Out("Out", {out}));
    return *this;
  }
  // (x - mean(x)) / sqrt(mean((x - mean(x))^factor) + eps) [* g + b], means
  // over `axis`; out = p + "y".
  DecompProgram& LayerNorm(const std::string& p, const std::string& x, int64_t n, bool affine = true,
                           int64_t axis = -1, float factor = 2.0f) {
    Const(p + "eps", 1e-5f);
    Op(OpBuilder("reduce_mean").In("X", {x}).Out("Out", {p + "m"}).Attr("dim", std::vector<int64_t>{axis})
           .Attr("keep_dim", true));
    Bin("elementwise_sub", x, p + "m", p + "d");
    Op(OpBuilder("pow").In("X", {p + "d"}).Out("Out", {p + "sq"}).Attr("factor", factor));
    Op(OpBuilder("reduce_mean").In("X", {p + "sq"}).Out("Out", {p + "v"}).Attr("dim", std::vector<int64_t>{axis})
           .Attr("keep_dim", true));
    Bin("elementwise_add", p + "v", p + "eps", p + "a");
    Unary("sqrt", p + "a", p + "s");
    if (!affine) return Bin("elementwise_div", p + "d", p + "s", p + "y");
    Param(p + "g", {n}).Param(p + "b", {n});
    Bin("elementwise_div", p + "d", p + "s", p + "n");
    Bin("elementwise_mul", p + "n", p + "g", p + "gn");
    return Bin("elementwise_add", p + "gn", p + "b", p + "y");
  }
  // A constant tensor of `dims` with element n = value(i, j), i and j the
  // row and column of n in the last two dims.
  DecompProgram& ConstTensor(const std::string& name, const Dims& dims, const std::function<float(int64_t, int64_t)>& value) {
    Var(name, dims);
    proto::VarDesc* v = FindMutableVarDesc(block, name);
    v->set_persistable(true);
    v->set_stop_gradient(true);
    Tensor t(DataType::kFP32, dims);
    float* d = t.mutable_data<float>();
    const int64_t cols = dims.back(), rows = dims[dims.size() - 2];
    for (int64_t n = 0; n < t.numel(); ++n) d[n] = value((n / cols) % rows, n % cols);
    tensors[name] = t;
    return *this;
  }
  // q, v [2, 2, 6, 4]; keys as kiln's attention wants them ([2, 2, 6, 4],
  // read with transpose_Y) or as the exports give them (a transpose2 to
  // [2, 2, 4, 6]); scores scaled by `div`, masked by where(mask == 0,
  // `fill`, s) with `mask` [6, 6] (tril), softmax, matmul; out = p + "o".
  DecompProgram& WhereAttention(const std::string& p, const std::string& mask, float fill = -INFINITY) {
    Var(p + "q", {2, 2, 6, 4}).Var(p + "k", {2, 2, 6, 4}).Var(p + "v", {2, 2, 6, 4});
    Const(p + "div", 2.0f).Const(p + "zero", 0.0f).Const(p + "fill", fill);
    Op(OpBuilder("transpose2").In("X", {p + "k"}).Out("Out", {p + "kt"}).Attr("axis", std::vector<int64_t>{0, 1, 3, 2}));
    Bin("matmul", p + "q", p + "kt", p + "s0").Bin("elementwise_div", p + "s0", p + "div", p + "s1");
    Bin("equal", mask, p + "zero", p + "eq");
    Op(OpBuilder("expand_v2").In("X", {p + "eq"}).Out("Out", {p + "cond"}).Attr("shape", std::vector<int64_t>{2, 2, 6, 6}));
    Op(OpBuilder("expand_v2").In("X", {p + "fill"}).Out("Out", {p + "fills"}).Attr("shape", std::vector<int64_t>{2, 2, 6, 6}));
    Op(OpBuilder("where").In("Condition", {p + "cond"}).In("X", {p + "fills"}).In("Y", {p + "s1"}).Out("Out", {p + "s2"}));
    Unary("softmax", p + "s2", p + "p");
    return Bin("matmul", p + "p", p + "v", p + "o");
  }
  // nn.MultiheadAttention's export: q / c, matmul with transpose_Y, * 1,
  // + mask * 1 with `mask` [1, 6, 6], softmax, matmul; out = p + "o".
  DecompProgram& AddAttention(const std::string& p, const std::string& mask) {
    Var(p + "q", {2, 2, 6, 4}).Var(p + "k", {2, 2, 6, 4}).Var(p + "v", {2, 2, 6, 4});
    Const(p + "div", 2.0f).Const(p + "one", 1.0f);
    Bin("elementwise_div", p + "q", p + "div", p + "qs");
    Op(OpBuilder("matmul").In("X", {p + "qs"}).In("Y", {p + "k"}).Out("Out", {p + "s0"}).Attr("transpose_Y", true));
    Bin("elementwise_mul", p + "s0", p + "one", p + "s1").Bin("elementwise_mul", mask, p + "one", p + "m");
    Bin("elementwise_add", p + "s1", p + "m", p + "s2");
    Unary("softmax", p + "s2", p + "p");
    return Bin("matmul", p + "p", p + "v", p + "o");
  }
  // No mask: keys transposed by a transpose2, scores * 0.5; out = p + "o".
  DecompProgram& PlainAttention(const std::string& p) {
    Var(p + "q", {2, 2, 6, 4}).Var(p + "k", {2, 6, 2, 4}).Var(p + "v", {2, 2, 6, 4});
    Const(p + "half", 0.5f);
    Op(OpBuilder("transpose2").In("X", {p + "k"}).Out("Out", {p + "kt"}).Attr("axis", std::vector<int64_t>{0, 2, 3, 1}));
    Bin("matmul", p + "q", p + "kt", p + "s0").Bin("elementwise_mul", p + "s0", p + "half", p + "s1");
    Unary("softmax", p + "s1", p + "p");
    return Bin("matmul", p + "p", p + "v", p + "o");
  }
  // F.gelu's export ((x * u) * 0.5) or the written-out 0.5 * x * u, u =
  // 1 + erf(x / c1); out = p + "y".
  DecompProgram& Gelu(const std::string& p, const std::string& x, bool torch_form, float c1 = kSqrt2,
                      float half = 0.5f) {
    Const(p + "c1", c1).Const(p + "one", 1.0f).Const(p + "half", half);
    Bin("elementwise_div", x, p + "c1", p + "t");
    Unary("erf", p + "t", p + "e");
    Bin("elementwise_add", p + "e", p + "one", p + "u");
    if (torch_form) {
      Bin("elementwise_mul", x, p + "u", p + "w");
      return Bin("elementwise_mul", p + "w", p + "half", p + "y");
    }
    Bin("elementwise_mul", x, p + "half", p + "w");
    return Bin("elementwise_mul", p + "w", p + "u", p + "y");
  }
};

Tensor Scalar(float value) {
  Tensor t(DataType::kFP32, {});
  *t.mutable_data<float>() = value;
  return t;
}

DecompositionFusionPassOptions Options(const DecompProgram& p, const std::set<std::string>& keep) {
  DecompositionFusionPassOptions o;
  o.keep_vars = keep;
  for (const auto& [name, value] : p.constants) o.constants[name] = Scalar(value);
  for (const auto& [name, t] : p.tensors) o.constants[name] = t;
  return o;
}

const float kInf = INFINITY;

int CountOps(const proto::ProgramDesc& p, const std::string& type) {
  return static_cast<int>(std::count_if(p.blocks(0).ops().begin(), p.blocks(0).ops().end(),
                                        [&](const proto::OpDesc& op) { return op.type() == type; }));
}

// ---- Goldens -------------------------------------------------------------------

std::string GoldenDir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden/decomposition_fusion_pass/"; }

DecompositionFusionReport CheckGolden(const std::string& name, const DecompProgram& built,
                                      const std::set<std::string>& keep, bool expect_change) {
  const std::string input_path = GoldenDir() + name + ".pbtxt";
  const std::string golden_path = GoldenDir() + name + ".golden";
  if (test::UpdateGolden()) WriteFileAtomic(input_path, ProgramToText(built.program));
  const proto::ProgramDesc program = LoadProgram(input_path);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(program, built.program))
      << input_path << " differs from the test's builder; regenerate with KILN_UPDATE_GOLDEN=1";
  ValidateProgram(program);

  DecompositionFusionReport report;
  Graph graph = Graph::FromBlock(program.blocks(0));
  const std::string before = graph.Print();
  const bool changed = DecompositionFusionPass(Options(built, keep), &report).Run(graph);
  graph.Verify();
  EXPECT_EQ(changed, expect_change) << name;
  proto::ProgramDesc after = program;
  *after.mutable_blocks(0) = graph.ToBlock();
  ValidateProgram(after);

  std::string keep_list, consts;
  for (const auto& k : keep) keep_list += (keep_list.empty() ? "" : ", ") + k;
  for (const auto& [k, v] : built.constants) consts += (consts.empty() ? "" : ", ") + k + "=" + std::to_string(v);
  std::string t = "# " + name + ": decomposition_fusion_pass golden (regenerate with KILN_UPDATE_GOLDEN=1)\n";
  t += "# options: keep_vars=[" + keep_list + "]\n# constants: " + consts + "\n## before\n" + before;
  t += std::string("## after: ") + (changed ? "changed" : "unchanged") + "\n" + graph.Print();
  t += "## report\n" + report.ToString() + "\n";
  test::ExpectGolden(golden_path, t);
  return report;
}

// A LayerNorm with its affine tail, one without, and both GELU exports.
TEST(DecompositionFusionPassGolden, Fires) {
  DecompProgram p;
  p.Var("x", {-1, 8, 16});
  p.LayerNorm("ln.", "x", 16).Gelu("ga.", "ln.y", true).Gelu("gb.", "ga.y", false).LayerNorm("pl.", "gb.y", 16, false);
  const DecompositionFusionReport r = CheckGolden("fires", p, {"x", "pl.y"}, true);
  EXPECT_EQ(r.ToString(), "fused 2 layer_norm (ln.y, pl.y), 2 gelu (ga.y, gb.y)");
}

// Does not fire: a's means run over axis 1, b squares with exponent 3, c's
// difference is also fetched, d's variance also feeds another op, e's GELU
// divides by 1.5, f's halves with 0.6, g's constant has no known value.
TEST(DecompositionFusionPassGolden, DoesNotFire) {
  DecompProgram p;
  p.Var("x", {-1, 8, 16});
  p.LayerNorm("a.", "x", 16, true, 1).LayerNorm("b.", "x", 16, true, -1, 3.0f).LayerNorm("c.", "x", 16);
  p.LayerNorm("d.", "x", 16).Unary("relu", "d.v", "d.other");
  p.Gelu("e.", "x", true, 1.5f).Gelu("f.", "x", false, kSqrt2, 0.6f).Gelu("g.", "x", true);
  p.constants.erase("g.c1");
  const DecompositionFusionReport r =
      CheckGolden("not_fired", p, {"x", "a.y", "b.y", "c.y", "c.d", "d.y", "d.other", "e.y", "f.y", "g.y"}, false);
  EXPECT_EQ(r.ToString(), "fused no decomposition");
}

// With append_backward's grad ops reading the intermediates the pass leaves
// the patterns alone: fusing them would drop values the grads read.
TEST(DecompositionFusionPass, LeavesAProgramWithGradOps) {
  DecompProgram p;
  p.Var("x", {4, 8, 16});
  p.LayerNorm("ln.", "x", 16).Gelu("g.", "ln.y", true).Unary("mean", "g.y", "loss");
  const proto::ProgramDesc train = p.WithBackward("loss");
  Graph graph = Graph::FromBlock(train.blocks(0));
  EXPECT_FALSE(DecompositionFusionPass(Options(p, {"x", "loss"})).Run(graph));
}

// What the startup program assigns to main's persistable stop_gradient
// vars, and nothing else (a parameter's initialiser stays out).
TEST(DecompositionFusionPass, ImportedConstants) {
  DecompProgram main;
  main.Const("eps", 0).Const("half", 0).Param("w", {2});
  proto::ProgramDesc startup = main.program;
  proto::BlockDesc* b = startup.mutable_blocks(0);
  b->add_ops()->CopyFrom(OpBuilder("assign_value").Out("Out", {"eps"}).Attr("shape", std::vector<int64_t>{})
                             .Attr("dtype", int64_t{0}).Attr("fp32_values", std::vector<float>{1e-5f}).Build());
  b->add_ops()->CopyFrom(OpBuilder("assign_value").Out("Out", {"w"}).Attr("shape", std::vector<int64_t>{2})
                             .Attr("dtype", int64_t{0}).Attr("fp32_values", std::vector<float>{1, 2}).Build());
  b->add_ops()->CopyFrom(OpBuilder("fill_constant").Out("Out", {"half"}).Attr("shape", std::vector<int64_t>{})
                             .Attr("value", 0.5f).Build());
  const std::map<std::string, Tensor> got = ImportedConstants(main.program, startup);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.at("eps").data<float>()[0], 1e-5f);
  EXPECT_EQ(got.at("half").data<float>()[0], 0.5f);
}

// Both exported attentions: the GPT block's (keys transposed by a
// transpose2, scores divided, where(tril == 0, -inf, s)) and
// nn.MultiheadAttention's (queries divided, scores * 1 + a -inf triu mask
// * 1) become matmul(q, k)[transpose_Y, alpha] and the causal softmax; one
// without a mask keeps its softmax.
TEST(DecompositionFusionPassGolden, AttentionFires) {
  DecompProgram p;
  p.ConstTensor("tril", {6, 6}, [](int64_t i, int64_t j) { return j <= i ? 1.0f : 0.0f; });
  p.ConstTensor("triu", {1, 6, 6}, [](int64_t i, int64_t j) { return j > i ? -kInf : 0.0f; });
  p.WhereAttention("a.", "tril").AddAttention("b.", "triu").PlainAttention("c.");
  std::set<std::string> keep;
  for (const std::string q : {"a.", "b.", "c."}) {
    for (const std::string v : {"q", "k", "v", "o"}) keep.insert(q + v);
  }
  const DecompositionFusionReport r = CheckGolden("attention_fires", p, keep, true);
  EXPECT_EQ(r.ToString(), "fused 3 attention (a.p (causal), b.p (causal), c.p)");
}

// Does not fire: a's mask hides the diagonal too (not causal), b's tril is
// a parameter (it may train), c fills with -1e9 (not -inf), d's additive
// mask holds -1 where it should hold 0.
TEST(DecompositionFusionPassGolden, AttentionDoesNotFire) {
  DecompProgram p;
  p.ConstTensor("strict", {6, 6}, [](int64_t i, int64_t j) { return j < i ? 1.0f : 0.0f; });
  p.ConstTensor("tril", {6, 6}, [](int64_t i, int64_t j) { return j <= i ? 1.0f : 0.0f; });
  p.ConstTensor("bad", {1, 6, 6}, [](int64_t i, int64_t j) { return j > i ? -kInf : -1.0f; });
  p.Param("ptril", {6, 6});
  p.WhereAttention("a.", "strict").WhereAttention("b.", "ptril").WhereAttention("c.", "tril", -1e9f);
  p.AddAttention("d.", "bad");
  std::set<std::string> keep;
  for (const std::string q : {"a.", "b.", "c.", "d."}) {
    for (const std::string v : {"q", "k", "v", "o"}) keep.insert(q + v);
  }
  const DecompositionFusionReport r = CheckGolden("attention_not_fired", p, keep, false);
  EXPECT_EQ(r.ToString(), "fused no decomposition");
}

TEST(DecompositionFusionPass, RegistryAndPipeline) {
  PassConfig config;
  auto pass = PassRegistry::Global().Create("decomposition_fusion_pass", config);
  EXPECT_EQ(pass->name(), "decomposition_fusion_pass");
  // First in the pipeline, with or without the JIT.
  test::TestJit jit;
  PipelineOptions o = jit.Pipeline(BuildJitPassOptions{});
  o.fuse_decompositions = o.fuse_attention = true;
  std::vector<std::string> names;
  for (const auto& q : BuildPipeline(o)) names.emplace_back(q->name());
  EXPECT_EQ(names, (std::vector<std::string>{"decomposition_fusion_pass", "attention_fusion_pass", "build_jit_pass"}));
  o.build_jit = false;
  names.clear();
  for (const auto& q : BuildPipeline(o)) names.emplace_back(q->name());
  EXPECT_EQ(names, (std::vector<std::string>{"decomposition_fusion_pass"}));
}

// ---- Numbers -------------------------------------------------------------------

struct Values {
  std::vector<std::vector<float>> values;  // loss, x@GRAD, ln.g@GRAD, ln.b@GRAD
};

// Runs `program`, its ops from `registry`, with each of `feeds` (name, dims)
// random in [-2, 2) and the constants set; the values of `fetch`.
Values Execute(const proto::ProgramDesc& program, const DecompProgram& p,
               const std::vector<std::pair<std::string, Dims>>& feeds, const std::vector<std::string>& fetch,
               const OpRegistry& registry = OpRegistry::Global()) {
  Scope scope;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2, 2);
  for (const auto& [name, dims] : feeds) {
    Tensor t(DataType::kFP32, dims);
    float* d = t.mutable_data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = u(rng);
    FeedTensor(program.blocks(0), scope, name, t);
  }
  for (const auto& [name, t] : Options(p, {}).constants) FeedTensor(program.blocks(0), scope, name, t);
  ExecutorOptions eo;
  eo.free_intermediates = false;
  Executor(eo, registry).RunProgram(program, scope);
  Values r;
  for (const std::string& name : fetch) {
    const Tensor* t = scope.GetTensor(name);
    r.values.emplace_back(t->data<float>(), t->data<float>() + t->numel());
  }
  return r;
}

// The program with the pass run on its forward part, then append_backward.
proto::ProgramDesc FusedThenBackward(const DecompProgram& p, const std::set<std::string>& keep) {
  proto::ProgramDesc fused = p.program;
  Graph graph = Graph::FromBlock(fused.blocks(0));
  EXPECT_TRUE(DecompositionFusionPass(Options(p, keep)).Run(graph));
  *fused.mutable_blocks(0) = graph.ToBlock();
  AppendBackward(&fused, "loss");
  return fused;
}

void ExpectClose(const Values& a, const Values& b, const std::string& what) {
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t k = 0; k < a.values.size(); ++k) {
    ASSERT_EQ(a.values[k].size(), b.values[k].size()) << what << " value " << k;
    for (size_t i = 0; i < a.values[k].size(); ++i) {
      EXPECT_NEAR(a.values[k][i], b.values[k][i], 1e-5 * std::max(1.0f, std::fabs(b.values[k][i])))
          << what << " value " << k << " [" << i << "]";
    }
  }
}

// Fused before append_backward (as kiln.onnx.load does): layer_norm_grad and
// gelu_grad give the decomposition's gradients; the same with the JIT.
TEST(DecompositionFusionPassNumbers, SameLossAndGradientsJitOffAndOn) {
  test::TestJit jit;
  DecompProgram p;
  p.Var("x", {4, 8, 16});
  p.LayerNorm("ln.", "x", 16).Gelu("ga.", "ln.y", true).Gelu("gb.", "ga.y", false).Unary("mean", "gb.y", "loss");
  const proto::ProgramDesc unfused = p.WithBackward("loss");
  const proto::ProgramDesc fused = FusedThenBackward(p, {"x", "loss"});
  EXPECT_EQ(CountOps(fused, "layer_norm_grad"), 1);
  EXPECT_EQ(CountOps(fused, "gelu_grad"), 2);
  EXPECT_EQ(CountOps(fused, "erf") + CountOps(fused, "reduce_mean"), 0);

  const std::vector<std::pair<std::string, Dims>> feeds = {{"x", {4, 8, 16}}, {"ln.g", {16}}, {"ln.b", {16}}};
  const std::vector<std::string> fetch = {"loss", "x@GRAD", "ln.g@GRAD", "ln.b@GRAD"};
  const Values want = Execute(unfused, p, feeds, fetch);
  ExpectClose(Execute(fused, p, feeds, fetch), want, "fused, JIT off");
  const std::set<std::string> keep(fetch.begin(), fetch.end());
  for (const proto::ProgramDesc* program : std::vector<const proto::ProgramDesc*>{&fused, &unfused}) {
    PipelineOptions o = jit.Pipeline(BuildJitPassOptions{});
    o.keep_vars = keep;
    const proto::ProgramDesc jitted = RunPipeline(*program, o, jit.registry());
    ASSERT_GT(CountOps(jitted, "jit_launch"), 0);
    ExpectClose(Execute(jitted, p, feeds, fetch, jit.registry()), want, program == &fused ? "fused, JIT on" : "unfused, JIT on");
  }
}

// Both exported attentions: the causal softmax and its grad give the masked
// softmax's loss and q/k/v gradients; with the JIT, attention_fusion_pass
// turns them into fused_attention and fused_attention_grad.
TEST(DecompositionFusionPassNumbers, AttentionSameLossAndGradientsJitOffAndOn) {
  test::TestJit jit;
  DecompProgram p;
  p.ConstTensor("tril", {6, 6}, [](int64_t i, int64_t j) { return j <= i ? 1.0f : 0.0f; });
  p.ConstTensor("triu", {1, 6, 6}, [](int64_t i, int64_t j) { return j > i ? -kInf : 0.0f; });
  p.WhereAttention("a.", "tril").AddAttention("b.", "triu").PlainAttention("c.");
  p.Bin("elementwise_add", "a.o", "b.o", "ab").Bin("elementwise_add", "ab", "c.o", "o").Unary("mean", "o", "loss");
  const proto::ProgramDesc unfused = p.WithBackward("loss");
  const proto::ProgramDesc fused = FusedThenBackward(p, {"loss"});
  EXPECT_EQ(CountOps(fused, "fused_softmax_mask_upper_triangle_grad"), 2);
  EXPECT_EQ(CountOps(fused, "where"), 0);
  EXPECT_EQ(CountOps(fused, "softmax"), 1);

  std::vector<std::pair<std::string, Dims>> feeds;
  std::vector<std::string> fetch = {"loss"};
  for (const std::string a : {"a.", "b.", "c."}) {
    for (const std::string v : {"q", "k", "v"}) {
      feeds.push_back({a + v, a + v == "c.k" ? Dims{2, 6, 2, 4} : Dims{2, 2, 6, 4}});
      fetch.push_back(a + v + "@GRAD");
    }
  }
  const Values want = Execute(unfused, p, feeds, fetch);
  ExpectClose(Execute(fused, p, feeds, fetch), want, "fused, JIT off");
  PipelineOptions o = jit.Pipeline(BuildJitPassOptions{});
  o.fuse_attention = true;
  o.keep_vars = std::set<std::string>(fetch.begin(), fetch.end());
  AttentionFusionReport report;
  o.config.attention_fusion_report = &report;
  const proto::ProgramDesc jitted = RunPipeline(fused, o, jit.registry());
  EXPECT_EQ(report.fused.size(), 3u) << report.ToString();
  ExpectClose(Execute(jitted, p, feeds, fetch, jit.registry()), want, "fused, JIT on with fused_attention");
}

}  // namespace
}  // namespace kiln
