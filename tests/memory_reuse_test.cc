// Memory reuse without changing results: shape-only (no-need-buffer) inputs
// and their early release by the executor; the JIT's arena plan putting temps
// into inputs that die in a cluster (PlanArena donors), the runner using the
// donated memory or a block of its own; build_jit_pass deciding which cluster
// inputs are shape-only or donatable; jit_launch refusing to donate a buffer
// someone else holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/jit_compiler.h"
#include "compiler/lower.h"
#include "framework/allocator.h"
#include "framework/data/synthetic.h"
#include "framework/executor.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "launch_op/jit_launch_op.h"
#include "runtime/program.h"
#include "runtime/runner.h"
#include "tests/jit_pipeline_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

Tensor Copy(const Tensor& t) {
  Tensor c;
  c.CopyFrom(t);
  return c;
}

// "" when a and b have the same dtype, dims and bytes.
std::string BitDiff(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return "shape " + a.ShapeString() + " vs " + b.ShapeString();
  if (!a.initialized() || !b.initialized()) return "a tensor holds no data";
  if (std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) != 0) {
    return "bytes differ: " + test::CompareTensors(a, b, 0, 0);
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

// ---- (1a) the no-need-buffer grad ops give the same bits with a shape-only input ----

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

// ---- (1b) the executor releases a var after its last data use ----------------------

// A registry with every op plus `probe_shape`: reads X only for its shape and
// records what it saw.
struct ProbeRecord {
  int calls = 0;
  bool shape_only = false;
  bool initialized = false;
  Dims dims;
};
ProbeRecord g_probe;

const OpRegistry& ProbeRegistry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterAllOps(*r);
    OpInfo probe;
    probe.type = "probe_shape";
    probe.doc = "test op: reads X's shape, writes Out = [numel(X)]";
    probe.inputs = {{"X"}};
    probe.outputs = {{"Out"}};
    probe.no_need_buffer = {"X"};
    probe.infer_shape = [](InferShapeContext& ctx) { ctx.SetOutput("Out", {1}, DataType::kFP32); };
    probe.reference_kernel = [](ExecContext& ctx) {
      const Tensor& x = ctx.InputMeta("X");
      ++g_probe.calls;
      g_probe.shape_only = x.shape_only();
      g_probe.initialized = x.initialized();
      g_probe.dims = x.dims();
      ctx.Output("Out")->mutable_data<float>()[0] = static_cast<float>(x.numel());
    };
    r->Add(std::move(probe));
    return r;
  }();
  return *registry;
}

// x[M,N] + b[N] = y -> reshape2 -> r -> scale -> s; probe(y); reshape2_grad(X=y, Out@GRAD=s) = dy.
// y's data is last read by reshape2 (op 1); after it only shape readers.
std::vector<proto::OpDesc> ReleaseProgramOps(int64_t m, int64_t n) {
  return {OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"b"}).Out("Out", {"y"}).Build(),
          OpBuilder("reshape2").In("X", {"y"}).Out("Out", {"r"}).Attr("shape", std::vector<int64_t>{n, m}).Build(),
          OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 2.0f).Attr("bias", 0.5f).Build(),
          OpBuilder("probe_shape").In("X", {"y"}).Out("Out", {"count"}).Build(),
          OpBuilder("reshape2_grad")
              .In("X", {"y"})
              .In(GradVarName("Out"), {"s"})
              .Out(GradVarName("X"), {"dy"})
              .Attr("shape", std::vector<int64_t>{n, m})
              .Build()};
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(ExecutorReleaseTest, ShapeOnlyReadersGetTheDimsAfterTheBufferIsReleased) {
  const int64_t m = 5, n = 7;
  std::mt19937 rng(3);
  const Tensor x = test::RandomTensor({m, n}, DataType::kFP32, rng);
  const Tensor b = test::RandomTensor({n}, DataType::kFP32, rng);
  const proto::ProgramDesc program = OneBlock(ReleaseProgramOps(m, n));

  // The expected dy: (x + b) * 2 + 0.5 with y's dims.
  Tensor want(DataType::kFP32, {m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      want.mutable_data<float>()[i * n + j] = (x.data<float>()[i * n + j] + b.data<float>()[j]) * 2.0f + 0.5f;
    }
  }

  for (bool release : {true, false}) {
    SCOPED_TRACE(release ? "release_shape_only" : "no release");
    ExecutorOptions o;
    o.use_onednn = false;
    o.release_shape_only = release;
    Executor exec(o, ProbeRegistry());
    auto plan = exec.Prepare(program, 0, {"dy", "count"});
    const auto& ops = plan->ops();
    ASSERT_EQ(ops.size(), 5u);
    for (size_t i = 0; i < ops.size(); ++i) {
      const bool expect_y = release && i == 1;
      EXPECT_EQ(Contains(ops[i].release_after_names, "y"), expect_y) << "op " << i;
      // Nothing else is released: every other var's last use reads its data.
      EXPECT_EQ(ops[i].release_after_names.size(), expect_y ? 1u : 0u) << "op " << i;
    }
    EXPECT_TRUE(Contains(plan->FreedAfter(4), "y"));
    EXPECT_TRUE(Contains(plan->FreedAfter(2), "r"));
    EXPECT_TRUE(Contains(plan->FreedAfter(4), "s"));

    Scope scope;
    scope.Var("x")->GetMutable()->CopyFrom(x);
    scope.Var("b")->GetMutable()->CopyFrom(b);
    for (int step = 0; step < 2; ++step) {  // a plan runs again over the same scope
      SCOPED_TRACE("step " + std::to_string(step));
      g_probe = {};
      exec.Run(*plan, scope);
      ASSERT_EQ(g_probe.calls, 1);
      EXPECT_EQ(g_probe.shape_only, release);
      EXPECT_EQ(g_probe.initialized, !release);
      EXPECT_EQ(g_probe.dims, (Dims{m, n}));
      EXPECT_EQ(scope.GetVar("count")->Get().data<float>()[0], static_cast<float>(m * n));
      EXPECT_EQ(test::CompareTensors(scope.GetVar("dy")->Get(), want, 1e-6, 1e-6), "");
      // y is freed after its last use (reshape2_grad): neither data nor shape-only.
      const Tensor& y = scope.GetVar("y")->Get();
      EXPECT_FALSE(y.initialized());
      EXPECT_FALSE(y.shape_only());
      EXPECT_FALSE(y.has_shape());
    }
  }
}

// No release for a fetched var, a var read as data after its shape readers,
// or without free_intermediates; a var only shape readers follow is released
// right after its writer.
TEST(ExecutorReleaseTest, ReleaseOnlyWhenNothingButShapeReadersRemain) {
  const int64_t m = 3, n = 11;
  std::mt19937 rng(4);
  const proto::ProgramDesc program = OneBlock(ReleaseProgramOps(m, n));
  ExecutorOptions o;
  o.use_onednn = false;
  Executor exec(o, ProbeRegistry());
  auto plan = exec.Prepare(program, 0, {"dy", "count", "y"});
  for (const auto& op : plan->ops()) EXPECT_TRUE(op.release_after_names.empty()) << "a kept var is not released";
  Scope scope;
  scope.Var("x")->GetMutable()->CopyFrom(test::RandomTensor({m, n}, DataType::kFP32, rng));
  scope.Var("b")->GetMutable()->CopyFrom(test::RandomTensor({n}, DataType::kFP32, rng));
  g_probe = {};
  exec.Run(*plan, scope);
  EXPECT_FALSE(g_probe.shape_only);
  EXPECT_TRUE(scope.GetVar("y")->Get().initialized());

  // A data reader after the shape readers: no release either.
  std::vector<proto::OpDesc> ops = ReleaseProgramOps(m, n);
  ops.push_back(OpBuilder("relu").In("X", {"y"}).Out("Out", {"ry"}).Build());
  auto plan2 = exec.Prepare(OneBlock(ops), 0, {"dy", "count", "ry"});
  for (const auto& op : plan2->ops()) EXPECT_TRUE(op.release_after_names.empty());
  EXPECT_TRUE(Contains(plan2->FreedAfter(5), "y"));

  // free_intermediates off: nothing is released.
  o.free_intermediates = false;
  Executor keep_all(o, ProbeRegistry());
  auto plan3 = keep_all.Prepare(program, 0, {});
  for (const auto& op : plan3->ops()) EXPECT_TRUE(op.release_after_names.empty());

  // Only shape readers after the write: released right after the writer.
  const std::vector<proto::OpDesc> writer_then_probe = {
      OpBuilder("relu").In("X", {"x"}).Out("Out", {"t"}).Build(),
      OpBuilder("probe_shape").In("X", {"t"}).Out("Out", {"count"}).Build(),
  };
  Executor exec2(ExecutorOptions{false, false, true, true}, ProbeRegistry());
  auto plan4 = exec2.Prepare(OneBlock(writer_then_probe), 0, {"count"});
  EXPECT_EQ(plan4->ops()[0].release_after_names, std::vector<std::string>{"t"});
  EXPECT_EQ(plan4->FreedAfter(1), std::vector<std::string>{"t"});
  g_probe = {};
  exec2.Run(*plan4, scope);
  EXPECT_TRUE(g_probe.shape_only);
  EXPECT_EQ(g_probe.dims, (Dims{m, n}));
}

// ---- (1c) Input() on a shape-only tensor; NoNeedBufferVars -------------------------

TEST(ShapeOnlyInputTest, ReadingTheDataOfAShapeOnlyInputFailsNamingIt) {
  Variable var("y");
  Tensor* t = var.GetMutable();
  t->mutable_data<float>();
  t->Resize({4, 6});
  t->mutable_data<float>();
  t->ReleaseBuffer();
  ASSERT_TRUE(t->shape_only());
  const proto::OpDesc desc = OpBuilder("relu").In("X", {"y"}).Out("Out", {"z"}).Build();
  const AttrMap attrs;
  const std::vector<SlotVars> inputs = {{"X", {&var}, {"y"}}};
  const std::vector<SlotVars> outputs;
  ExecContext ctx(desc, attrs, inputs, outputs, 0);
  EXPECT_EQ(&ctx.InputMeta("X"), t);
  EXPECT_EQ(ctx.InputMetaOrNull("X"), t);
  EXPECT_EQ(ctx.InputOrNull("X"), nullptr);
  const std::string msg = test::ErrorOf([&] { ctx.Input("X"); });
  EXPECT_NE(msg.find("shape-only"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;

  // The same through the executor: relu reads the data of a shape-only var.
  Scope scope;
  Tensor* x = scope.Var("x")->GetMutable();
  x->Resize({2, 3});
  x->mutable_data<float>();
  x->ReleaseBuffer();
  const std::string run_msg = test::ErrorOf([&] {
    Executor(ExecutorOptions{false, false, true, true})
        .RunProgram(OneBlock({OpBuilder("relu").In("X", {"x"}).Out("Out", {"r"}).Build()}), scope);
  });
  EXPECT_NE(run_msg.find("shape-only"), std::string::npos) << run_msg;

  // Clear() and attaching a buffer end the shape-only state.
  t->Clear();
  EXPECT_FALSE(t->shape_only());
  EXPECT_FALSE(t->has_shape());
  EXPECT_EQ(ctx.InputMetaOrNull("X"), nullptr);
  t->ReleaseBuffer();
  t->mutable_data<float>();
  EXPECT_FALSE(t->shape_only());
  EXPECT_TRUE(t->initialized());
  float external[24] = {};
  t->ShareExternalData(nullptr, DataType::kFP32, {3, 8});
  EXPECT_TRUE(t->shape_only());
  EXPECT_EQ(t->dims(), (Dims{3, 8}));
  t->ShareExternalData(external, DataType::kFP32, {3, 8});
  EXPECT_FALSE(t->shape_only());
  EXPECT_EQ(&ctx.Input("X").data<float>()[0], external);
}

TEST(ShapeOnlyInputTest, NoNeedBufferVarsExcludesVarsAlsoReadAsDataOrWritten) {
  jit::RegisterJitOps(OpRegistry::GlobalForRegistration());
  const OpRegistry& r = OpRegistry::Global();
  auto reshape_grad = [](const std::string& x, const std::string& dout, const std::string& dx) {
    return OpBuilder("reshape2_grad")
        .In("X", {x})
        .In(GradVarName("Out"), {dout})
        .Out(GradVarName("X"), {dx})
        .Attr("shape", std::vector<int64_t>{-1})
        .Build();
  };
  const OpInfo& rg = r.Get("reshape2_grad");
  EXPECT_EQ(NoNeedBufferVars(rg, reshape_grad("y", "g", "dy")), std::set<std::string>{"y"});
  EXPECT_EQ(NoNeedBufferVars(rg, reshape_grad("y", "y", "dy")), std::set<std::string>{}) << "also read as data";
  EXPECT_EQ(NoNeedBufferVars(rg, reshape_grad("y", "g", "y")), std::set<std::string>{}) << "also written";
  EXPECT_EQ(NoNeedBufferVars(rg, reshape_grad(kEmptyVarName, "g", "dy")), std::set<std::string>{});

  const OpInfo& ag = r.Get("elementwise_add_grad");
  auto add_grad = [](const std::string& y, const std::string& dout, const std::string& dx, const std::string& dy) {
    return OpBuilder("elementwise_add_grad")
        .In("Y", {y})
        .In(GradVarName("Out"), {dout})
        .Out(GradVarName("X"), {dx})
        .Out(GradVarName("Y"), {dy})
        .Build();
  };
  EXPECT_EQ(NoNeedBufferVars(ag, add_grad("b", "g", "dx", "db")), std::set<std::string>{"b"});
  EXPECT_EQ(NoNeedBufferVars(ag, add_grad("g", "g", "dx", "db")), std::set<std::string>{});
  EXPECT_EQ(NoNeedBufferVars(ag, add_grad("b", "g", "b", "db")), std::set<std::string>{});
  // mul/div read Y's values: nothing is shape-only.
  const proto::OpDesc mul_grad = OpBuilder("elementwise_mul_grad")
                                     .In("X", {"a"})
                                     .In("Y", {"b"})
                                     .In(GradVarName("Out"), {"g"})
                                     .Out(GradVarName("X"), {"dx"})
                                     .Build();
  EXPECT_EQ(NoNeedBufferVars(r.Get("elementwise_mul_grad"), mul_grad), std::set<std::string>{});
  // An op without no-need-buffer slots.
  EXPECT_EQ(NoNeedBufferVars(r.Get("relu"), OpBuilder("relu").In("X", {"a"}).Out("Out", {"b"}).Build()),
            std::set<std::string>{});
  // Each of the six grad ops declares its slot.
  EXPECT_EQ(r.Get("elementwise_add_grad").no_need_buffer, std::vector<std::string>{"Y"});
  EXPECT_EQ(r.Get("elementwise_sub_grad").no_need_buffer, std::vector<std::string>{"Y"});
  for (const char* t : {"mean_grad", "reduce_mean_grad", "reduce_sum_grad", "reshape2_grad"}) {
    EXPECT_EQ(r.Get(t).no_need_buffer, std::vector<std::string>{"X"}) << t;
  }

  // jit_launch: its attr names the shape-only inputs; one it also writes is not.
  const OpInfo& launch = r.Get("jit_launch");
  auto launch_op = [](const std::vector<std::string>& in, const std::vector<std::string>& out,
                      const std::vector<std::string>& shape_only) {
    OpBuilder b("jit_launch");
    b.In("X", in).Out("Out", out).Attr("compilation_key", std::string("k"));
    if (!shape_only.empty()) b.Attr("shape_only_inputs", shape_only);
    return b.Build();
  };
  EXPECT_EQ(NoNeedBufferVars(launch, launch_op({"a", "b"}, {"c"}, {"a"})), std::set<std::string>{"a"});
  EXPECT_EQ(NoNeedBufferVars(launch, launch_op({"a", "b"}, {"c"}, {})), std::set<std::string>{});
  EXPECT_EQ(NoNeedBufferVars(launch, launch_op({"a", "b"}, {"a"}, {"a", "b"})), std::set<std::string>{"b"});
}

// ---- (2) PlanArena: temps in dying inputs ------------------------------------------

class NopKernel : public runtime::Kernel {
 public:
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "nop"; }
  void Run(const runtime::BufferView*) const override {}

 private:
  std::string name_ = "nop";
};

runtime::BufferInfo Buffer(const std::string& name, runtime::BufferRole role, int64_t floats, int io = -1,
                           bool donatable = false) {
  runtime::BufferInfo b;
  b.name = name;
  b.dims = {floats};
  b.role = role;
  b.io_index = io;
  b.donatable = donatable;
  if (role == runtime::BufferRole::kTemp) {
    b.offset = 12345;  // planned afresh
    b.region = 77;
  }
  return b;
}

runtime::Instruction Ins(std::vector<int> reads, std::vector<int> writes) {
  static const auto kernel = std::make_shared<NopKernel>();
  runtime::Instruction ins;
  ins.kernel = kernel;
  ins.num_inputs = static_cast<int>(reads.size());
  ins.args = std::move(reads);
  ins.args.insert(ins.args.end(), writes.begin(), writes.end());
  return ins;
}

using runtime::BufferRole;

// %0 x (input, dies here, 256 floats), %1 w (input), %2 a, %3 b, %4 c temps, %5 out.
//   0: a = f(x, w)   1: b = g(x, a)   2: c = h(b)   3: out = k(c, w)
// x is read for the last time at 1: c (written at 2) may take its memory,
// b (written at 1, while x is still read) may not.
runtime::BufferPlan SmallPlan(int64_t c_floats, bool x_donatable = true) {
  runtime::BufferPlan plan;
  plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, x_donatable), Buffer("w", BufferRole::kInput, 256, 1),
                  Buffer("a", BufferRole::kTemp, 100), Buffer("b", BufferRole::kTemp, 200),
                  Buffer("c", BufferRole::kTemp, c_floats), Buffer("out", BufferRole::kOutput, 8, 0)};
  return plan;
}
const std::vector<runtime::Instruction>& SmallInstructions() {
  static const std::vector<runtime::Instruction> ins = {Ins({0, 1}, {2}), Ins({0, 2}, {3}), Ins({3}, {4}),
                                                        Ins({4, 1}, {5})};
  return ins;
}

TEST(PlanArenaDonorTest, TempWrittenAfterTheLastReadGoesIntoTheDyingInput) {
  runtime::BufferPlan plan = SmallPlan(256);
  runtime::PlanArena(SmallInstructions(), &plan, /*reuse=*/true);
  EXPECT_EQ(plan.buffers[4].region, 0) << "c fits exactly in x, written after x's last read";
  EXPECT_EQ(plan.buffers[4].offset, 0u);
  EXPECT_EQ(plan.buffers[3].region, -1) << "b is written by the instruction that last reads x";
  EXPECT_EQ(plan.buffers[2].region, -1);
  EXPECT_EQ(plan.donors, std::vector<int>{0});
  EXPECT_EQ(plan.donated_bytes, 1024u);
  // a [0,1] and b [1,2] overlap at 1: separate arena slots.
  EXPECT_EQ(plan.buffers[2].offset, 0u);
  EXPECT_EQ(plan.buffers[3].offset, 448u);  // 400 bytes aligned up to 64
  EXPECT_EQ(plan.arena_bytes, 448u + 832u);
  EXPECT_EQ(plan.arena_bytes_no_reuse, 448u + 832u + 1024u);
}

TEST(PlanArenaDonorTest, TempTooBigForTheInputGoesToTheArena) {
  runtime::BufferPlan plan = SmallPlan(257);
  runtime::PlanArena(SmallInstructions(), &plan, true);
  EXPECT_EQ(plan.buffers[4].region, -1);
  EXPECT_TRUE(plan.donors.empty());
  EXPECT_EQ(plan.donated_bytes, 0u);
  // c [2,3] overlaps b [1,2] (at +448, 832 bytes) but not a [0,1].
  EXPECT_EQ(plan.buffers[4].offset, 1280u);
  EXPECT_EQ(plan.arena_bytes, 1280u + 1088u);
}

// An instruction that allows an output over a dying input (Instruction::
// inplace, from Kernel::InplacePairs) gets it there: over an arena temp at the
// temp's offset, over a donatable input at its start; never over an input
// read later, nor when the output is bigger.
TEST(PlanArenaDonorTest, InPlacePairsPutTheOutputOverTheDyingInput) {
  // 0: a = f(x)   1: b = g(a) in place over a   2: c = h(b) in place over b,
  // but c is bigger than b   3: out = k(c, w).
  auto plan_for = [](int64_t c_floats, bool allow) {
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, true), Buffer("w", BufferRole::kInput, 256, 1),
                    Buffer("a", BufferRole::kTemp, 100), Buffer("b", BufferRole::kTemp, 100),
                    Buffer("c", BufferRole::kTemp, c_floats), Buffer("out", BufferRole::kOutput, 8, 0)};
    std::vector<runtime::Instruction> ins = {Ins({0}, {2}), Ins({2}, {3}), Ins({3}, {4}), Ins({4, 1}, {5})};
    if (allow) {
      ins[0].inplace = {{0, 1}};  // a over x
      ins[1].inplace = {{0, 1}};  // b over a
      ins[2].inplace = {{0, 1}};  // c over b
    }
    runtime::PlanArena(ins, &plan, true);
    return plan;
  };
  {
    const runtime::BufferPlan plan = plan_for(/*c_floats=*/100, true);
    // a over x (a donatable input that dies at 0), b over a, c over b.
    for (int t : {2, 3, 4}) {
      EXPECT_EQ(plan.buffers[t].region, 0) << plan.buffers[t].name;
      EXPECT_EQ(plan.buffers[t].offset, 0u) << plan.buffers[t].name;
    }
    EXPECT_EQ(plan.arena_bytes, 0u);
    EXPECT_EQ(plan.donors, (std::vector<int>{0}));
  }
  {
    const runtime::BufferPlan plan = plan_for(/*c_floats=*/101, true);
    EXPECT_EQ(plan.buffers[3].region, 0);
    // c does not fit over b: it goes beside b in x's memory (b is live at 2).
    EXPECT_EQ(plan.buffers[4].region, 0);
    EXPECT_EQ(plan.buffers[4].offset, 448u);
    EXPECT_EQ(plan.arena_bytes, 0u);
  }
  {
    // Without the pairs: a is written while x is read (arena); b is written
    // after x's last read (into x); nothing shares memory at an instruction.
    const runtime::BufferPlan plan = plan_for(/*c_floats=*/100, false);
    EXPECT_EQ(plan.buffers[2].region, -1);
    EXPECT_EQ(plan.buffers[3].region, 0);
    EXPECT_EQ(plan.buffers[4].region, 0);
    EXPECT_NE(plan.buffers[3].offset, plan.buffers[4].offset) << "b and c are both live at instruction 2";
  }
  {
    // The input is read again later: no in-place output over it.
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, true), Buffer("a", BufferRole::kTemp, 100),
                    Buffer("out", BufferRole::kOutput, 8, 0)};
    std::vector<runtime::Instruction> ins = {Ins({0}, {1}), Ins({1, 0}, {2})};
    ins[0].inplace = {{0, 1}};
    runtime::PlanArena(ins, &plan, true);
    EXPECT_EQ(plan.buffers[1].region, -1);
  }
}

TEST(PlanArenaDonorTest, NoDonationWithoutReuseOrFromAnInputThatDoesNotDie) {
  {
    runtime::BufferPlan plan = SmallPlan(64);
    runtime::PlanArena(SmallInstructions(), &plan, /*reuse=*/false);
    for (const auto& b : plan.buffers) {
      if (b.role == BufferRole::kTemp) {
        EXPECT_EQ(b.region, -1) << b.name;
      }
    }
    EXPECT_TRUE(plan.donors.empty());
    EXPECT_EQ(plan.donated_bytes, 0u);
    EXPECT_EQ(plan.arena_bytes, plan.arena_bytes_no_reuse);
    EXPECT_EQ(plan.buffers[4].offset, 448u + 832u);
  }
  {
    runtime::BufferPlan plan = SmallPlan(64, /*x_donatable=*/false);
    runtime::PlanArena(SmallInstructions(), &plan, true);
    EXPECT_EQ(plan.buffers[4].region, -1);
    EXPECT_TRUE(plan.donors.empty());
  }
  {
    // Two inputs dying at 0: a temp goes into the smallest one it fits in
    // beside the temps already there.
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("big", BufferRole::kInput, 1000, 0, true), Buffer("small", BufferRole::kInput, 100, 1, true),
                    Buffer("t1", BufferRole::kTemp, 50), Buffer("t2", BufferRole::kTemp, 60),
                    Buffer("t3", BufferRole::kTemp, 500), Buffer("out", BufferRole::kOutput, 1, 0)};
    const std::vector<runtime::Instruction> ins = {Ins({0, 1}, {2}), Ins({2}, {3}), Ins({2, 3}, {4}),
                                                   Ins({4}, {5})};
    runtime::PlanArena(ins, &plan, true);
    EXPECT_EQ(plan.buffers[3].region, 1) << "t2 fits in the smaller dying input";
    EXPECT_EQ(plan.buffers[4].region, 0) << "t3 only fits in the big one";
    EXPECT_EQ(plan.buffers[2].region, -1) << "t1 is written while both inputs are read";
    EXPECT_EQ(plan.donors, (std::vector<int>{0, 1}));
  }
}

// Random plans: temps sharing a region never overlap in bytes while both are
// live; donated temps start after the donor's last read and end within it.
TEST(PlanArenaDonorTest, RandomPlansNeverOverlapLiveTemps) {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> coin(0, 1);
  int plans_with_donors = 0, donated_temps = 0;
  for (int trial = 0; trial < 400; ++trial) {
    runtime::BufferPlan plan;
    const int n_inputs = 1 + static_cast<int>(rng() % 4);
    std::uniform_int_distribution<int64_t> size(1, trial % 3 == 0 ? 40 : 600);
    std::vector<int> available;
    for (int i = 0; i < n_inputs; ++i) {
      const int64_t floats = size(rng);
      const bool donatable = coin(rng) == 1 || i == 0;
      plan.buffers.push_back(Buffer("in" + std::to_string(i), BufferRole::kInput, floats, i, donatable));
      if (rng() % 5 == 0) plan.buffers.back().dtype = DataType::kFP64;
      available.push_back(i);
    }
    const int n_ins = 2 + static_cast<int>(rng() % 12);
    std::vector<runtime::Instruction> ins;
    int outputs = 0;
    for (int k = 0; k < n_ins; ++k) {
      std::vector<int> reads;
      const int n_reads = 1 + static_cast<int>(rng() % 3);
      for (int r = 0; r < n_reads; ++r) {
        const int b = available[rng() % available.size()];
        if (std::find(reads.begin(), reads.end(), b) == reads.end()) reads.push_back(b);
      }
      std::vector<int> writes;
      const int n_writes = 1 + static_cast<int>(rng() % 2);
      for (int w = 0; w < n_writes; ++w) {
        const int id = static_cast<int>(plan.buffers.size());
        const bool out = rng() % 6 == 0;
        const int64_t floats = size(rng);
        plan.buffers.push_back(Buffer((out ? "out" : "t") + std::to_string(id),
                                      out ? BufferRole::kOutput : BufferRole::kTemp, floats, out ? outputs++ : -1));
        writes.push_back(id);
        available.push_back(id);
      }
      ins.push_back(Ins(reads, writes));
    }
    // A temp no instruction names is left alone.
    plan.buffers.push_back(Buffer("unused", BufferRole::kTemp, 10));
    plan.buffers.back().region = -1;
    const int n = static_cast<int>(plan.buffers.size());
    std::vector<int> first(n, 1 << 30), last(n, -1);
    for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
      for (int b : ins[k].args) {
        first[b] = std::min(first[b], k);
        last[b] = std::max(last[b], k);
      }
    }
    runtime::BufferPlan copy = plan;
    runtime::PlanArena(ins, &plan, true);
    runtime::PlanArena(ins, &copy, true);
    SCOPED_TRACE("trial " + std::to_string(trial));

    size_t no_reuse = 0, donated = 0;
    std::set<int> regions;
    for (int b = 0; b < n; ++b) {
      const auto& info = plan.buffers[b];
      EXPECT_EQ(info.offset, copy.buffers[b].offset) << "not deterministic";
      EXPECT_EQ(info.region, copy.buffers[b].region) << "not deterministic";
      if (info.role != BufferRole::kTemp || last[b] < 0) continue;
      const size_t aligned = (std::max<size_t>(info.bytes(), 1) + 63) / 64 * 64;
      no_reuse += aligned;
      EXPECT_EQ(info.offset % 64, 0u) << info.name;
      if (info.region < 0) {
        EXPECT_EQ(info.region, -1);
        EXPECT_LE(info.offset + info.bytes(), plan.arena_bytes) << info.name;
        continue;
      }
      ASSERT_LT(info.region, n);
      const auto& donor = plan.buffers[info.region];
      EXPECT_EQ(donor.role, BufferRole::kInput) << info.name;
      EXPECT_TRUE(donor.donatable) << info.name << " in " << donor.name;
      EXPECT_LT(last[info.region], first[b]) << info.name << " written before " << donor.name << "'s last read";
      EXPECT_LE(info.offset + info.bytes(), donor.bytes()) << info.name << " ends past " << donor.name;
      donated += aligned;
      regions.insert(info.region);
      ++donated_temps;
    }
    plans_with_donors += !regions.empty();
    EXPECT_EQ(plan.arena_bytes_no_reuse, no_reuse);
    EXPECT_LE(plan.arena_bytes, plan.arena_bytes_no_reuse);
    EXPECT_EQ(plan.donated_bytes, donated);
    EXPECT_EQ(plan.donors, std::vector<int>(regions.begin(), regions.end()));
    EXPECT_EQ(plan.buffers[n - 1].region, -1);

    for (int a = 0; a < n; ++a) {
      const auto& ia = plan.buffers[a];
      if (ia.role != BufferRole::kTemp || last[a] < 0) continue;
      for (int b = a + 1; b < n; ++b) {
        const auto& ib = plan.buffers[b];
        if (ib.role != BufferRole::kTemp || last[b] < 0 || ia.region != ib.region) continue;
        const bool live_together = first[a] <= last[b] && first[b] <= last[a];
        const bool bytes_overlap = ia.offset < ib.offset + ib.bytes() && ib.offset < ia.offset + ia.bytes();
        EXPECT_FALSE(live_together && bytes_overlap)
            << ia.name << " [" << first[a] << "," << last[a] << "] +" << ia.offset << " and " << ib.name << " ["
            << first[b] << "," << last[b] << "] +" << ib.offset << " in region " << ia.region;
      }
    }
  }
  // The generator must exercise donation.
  EXPECT_GT(plans_with_donors, 50);
  EXPECT_GT(donated_temps, 100);
}

// ---- (3) the runner: donated or not, the same results ------------------------------

// The JitSubgraph of `ops` with vars declared from a reference run; inputs are
// read before any op writes them.
JitSubgraph MakeSubgraph(const std::vector<proto::OpDesc>& ops, const Scope& reference,
                         const std::vector<std::string>& outputs) {
  JitSubgraph sg;
  sg.block.set_idx(0);
  sg.block.set_parent_idx(-1);
  std::set<std::string> declared, written;
  auto declare = [&](const std::string& name) {
    if (name == kEmptyVarName || !declared.insert(name).second) return;
    const Tensor& t = reference.GetVar(name)->Get();
    proto::VarDesc* v = sg.block.add_vars();
    v->set_name(name);
    v->set_dtype(ToProto(t.dtype()));
    for (int64_t d : t.dims()) v->add_dims(d);
  };
  for (const auto& op : ops) {
    *sg.block.add_ops() = op;
    for (const auto& a : AllInputArgs(op)) {
      declare(a);
      if (!written.count(a) && !Contains(sg.inputs, a)) sg.inputs.push_back(a);
    }
    for (const auto& a : AllOutputArgs(op)) {
      declare(a);
      written.insert(a);
    }
  }
  sg.outputs = outputs;
  return sg;
}

// exp(x) = a (generated elementwise kernel: reads x for the last time and may
// write a over it in place), matmul(a, w) = b (a still fills x's memory, so b
// goes to the arena), softmax(b) = out.
std::vector<proto::OpDesc> DonorChain() {
  return {OpBuilder("exp").In("X", {"x"}).Out("Out", {"a"}).Build(),
          OpBuilder("matmul").In("X", {"a"}).In("Y", {"w"}).Out("Out", {"b"}).Build(),
          OpBuilder("softmax").In("X", {"b"}).Out("Out", {"out"}).Build()};
}

TEST(RunnerDonationTest, TempsInADonatedInputGiveTheSameResults) {
  std::mt19937 rng(5);
  const std::map<std::string, Tensor> inputs = {{"x", test::RandomTensor({9, 33}, DataType::kFP32, rng)},
                                                {"w", test::RandomTensor({33, 20}, DataType::kFP32, rng, -0.3, 0.3)}};
  const std::vector<proto::OpDesc> ops = DonorChain();
  auto reference = test::RunOps(ops, inputs, /*use_onednn=*/false);
  JitSubgraph sg = MakeSubgraph(ops, *reference, {"out"});
  ASSERT_EQ(sg.inputs, (std::vector<std::string>{"x", "w"}));
  sg.donatable_inputs = {"x"};
  jit::ShapeSignature sig;
  for (const auto& name : sg.inputs) sig.inputs.push_back({inputs.at(name).dtype(), inputs.at(name).dims()});

  for (bool onednn : {false, true}) {
    SCOPED_TRACE(onednn ? "oneDNN anchors" : "reference anchors");
    jit::CompileOptions o;
    o.isa = HostIsa();
    o.use_onednn = onednn;
    auto obj = jit::Lower(JitSubgraphFingerprint(sg), sg, sig, o);
    const runtime::BufferPlan& plan = obj->program.plan;
    const std::string listing = obj->Listing();
    ASSERT_EQ(plan.donors.size(), 1u) << listing;
    const int x_id = plan.donors[0];
    EXPECT_EQ(plan.buffers[x_id].name, "x");
    EXPECT_TRUE(plan.buffers[x_id].donatable);
    int in_x = 0;
    for (const auto& b : plan.buffers) {
      if (b.role == BufferRole::kTemp && b.region == x_id) {
        ++in_x;
        EXPECT_EQ(b.name, "a") << listing;
        EXPECT_EQ(b.offset, 0u) << "a is written in place over x" << listing;
      }
      if (b.name == "b") {
        EXPECT_EQ(b.region, -1) << "b is live with a, which fills x" << listing;
      }
    }
    EXPECT_EQ(in_x, 1) << listing;
    EXPECT_GT(plan.donated_bytes, 0u);
    EXPECT_NE(listing.find("in dying input"), std::string::npos) << listing;

    // Without the input marked donatable the plan has no donors.
    JitSubgraph plain = sg;
    plain.donatable_inputs.clear();
    EXPECT_NE(JitSubgraphFingerprint(plain), JitSubgraphFingerprint(sg));
    EXPECT_TRUE(jit::Lower(JitSubgraphFingerprint(plain), plain, sig, o)->program.plan.donors.empty());

    auto run = [&](const std::vector<bool>& donate, Tensor* x_after) {
      std::vector<Tensor> bound;
      std::vector<void*> in_ptrs;
      for (const auto& name : obj->input_names) {
        bound.push_back(Copy(inputs.at(name)));
        in_ptrs.push_back(bound.back().raw_data());
      }
      Tensor out(obj->output_dtypes[0], obj->output_dims[0]);
      std::fill(out.mutable_data<float>(), out.mutable_data<float>() + out.numel(), -7.0f);
      runtime::Runner::Run(obj->program, in_ptrs, {out.raw_data()}, donate);
      *x_after = bound[0];
      for (size_t i = 1; i < bound.size(); ++i) {
        EXPECT_EQ(BitDiff(bound[i], inputs.at(obj->input_names[i])), "") << "input " << obj->input_names[i];
      }
      return out;
    };
    Tensor x_donated, x_kept, x_default;
    const Tensor donated = run({true, true}, &x_donated);
    const Tensor kept = run({false, false}, &x_kept);
    const Tensor by_default = run({}, &x_default);
    EXPECT_EQ(BitDiff(donated, kept), "");
    EXPECT_EQ(BitDiff(by_default, kept), "");
    EXPECT_EQ(test::CompareTensors(donated, reference->GetVar("out")->Get(), 1e-5, 1e-4), "");
    EXPECT_NE(BitDiff(x_donated, inputs.at("x")), "") << "the donated input's memory held a";
    EXPECT_EQ(BitDiff(x_kept, inputs.at("x")), "") << "an input not donated is untouched";
    EXPECT_EQ(BitDiff(x_default, inputs.at("x")), "") << "no donate list: nothing donated";
    // The temp a = exp(x) was written over x.
    const Tensor& a_ref = reference->GetVar("a")->Get();
    Tensor a_in_x(DataType::kFP32, a_ref.dims());
    std::memcpy(a_in_x.mutable_data<float>(), x_donated.raw_data(), a_ref.bytes());
    EXPECT_EQ(test::CompareTensors(a_in_x, a_ref, 1e-5, 1e-5), "");
  }
}

// A kernel that records the allocator's live bytes when it runs.
class ProbeKernel : public runtime::Kernel {
 public:
  explicit ProbeKernel(std::vector<size_t>* seen) : seen_(seen) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "probe"; }
  void Run(const runtime::BufferView*) const override {
    seen_->push_back(CachingAllocator::Global().stats().in_use_bytes);
  }

 private:
  std::string name_ = "probe";
  std::vector<size_t>* seen_;
};

// The runner frees an owned (donated) input after its last use and makes an
// output only before the instruction that first writes it.
TEST(RunnerDonationTest, OwnedInputsAreFreedAtTheirLastUseAndOutputsMadeLate) {
  constexpr int64_t kBig = 256 * 1024;  // floats: 1 MiB
  std::vector<size_t> seen;
  auto probe = std::make_shared<ProbeKernel>(&seen);
  runtime::Program program;
  program.plan.buffers = {Buffer("x", BufferRole::kInput, kBig, 0, true), Buffer("t", BufferRole::kTemp, 64),
                          Buffer("out", BufferRole::kOutput, 64, 0)};
  runtime::Instruction a;  // t = f(x): x's last use
  a.kernel = probe;
  a.args = {0, 1};
  a.num_inputs = 1;
  runtime::Instruction b;  // out = g(t)
  b.kernel = probe;
  b.args = {1, 2};
  b.num_inputs = 1;
  program.instructions = {a, b};
  runtime::PlanArena(program.instructions, &program.plan, true);
  ASSERT_EQ(program.plan.free_after.size(), 2u);
  EXPECT_EQ(program.plan.free_after[0], (std::vector<int>{0}));
  EXPECT_EQ(program.plan.alloc_before[1], (std::vector<int>{0}));

  for (bool own : {true, false}) {
    SCOPED_TRACE(own ? "owned" : "not owned");
    seen.clear();
    auto x = std::make_shared<Allocation>(static_cast<size_t>(kBig) * 4);
    void* x_ptr = x->ptr();
    std::vector<std::shared_ptr<Allocation>> owned;
    std::weak_ptr<Allocation> x_weak = x;
    if (own) {
      owned.push_back(std::move(x));
    }
    std::unique_ptr<Allocation> out;
    int made = 0;
    size_t seen_when_made = 0;
    runtime::Runner::Run(program, {x_ptr}, {nullptr}, {own}, std::move(owned), [&](int io) {
      EXPECT_EQ(io, 0);
      ++made;
      seen_when_made = seen.size();
      out = std::make_unique<Allocation>(64 * 4);
      return out->ptr();
    });
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(made, 1);
    EXPECT_EQ(seen_when_made, 1u) << "the output is made after instruction 0 ran, before instruction 1";
    if (own) {
      EXPECT_TRUE(x_weak.expired()) << "the launch dropped the donated buffer";
      // At instruction 1, x (1 MiB) is gone and the output (256 B) exists.
      EXPECT_GE(seen[0], seen[1] + static_cast<size_t>(kBig) * 4 - 4096);
    } else {
      EXPECT_FALSE(x_weak.expired());
      EXPECT_LE(seen[0], seen[1]);
    }
  }
}

// ---- (4) build_jit_pass: shape-only and donatable cluster vars ---------------------

class JitPassMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { jit::RegisterJitOps(OpRegistry::GlobalForRegistration()); }
  void SetUp() override {
    jit::JitCompiler::Instance().ClearCache();
    jit::ResetLaunchStats();
    jit::SetLaunchMode(jit::LaunchMode::kRuntime);
  }
};

std::vector<std::string> OpTypes(const JitSubgraph& sg) {
  std::vector<std::string> types;
  for (const auto& op : sg.block.ops()) types.push_back(op.type());
  return types;
}

const proto::OpDesc* FindLaunch(const proto::ProgramDesc& p, const std::string& key) {
  for (const auto& op : p.blocks(0).ops()) {
    if (op.type() != "jit_launch") continue;
    for (const auto& a : op.attrs()) {
      if (a.name() == "compilation_key" && a.s() == key) return &op;
    }
  }
  return nullptr;
}

std::vector<std::string> StringsAttr(const proto::OpDesc& op, const std::string& name) {
  for (const auto& a : op.attrs()) {
    if (a.name() == name) return {a.strings().begin(), a.strings().end()};
  }
  return {};
}

TEST_F(JitPassMemoryTest, TransformerClustersHaveShapeOnlyAndDonatableVars) {
  TransformerConfig tc;
  tc.seq_len = 5;
  tc.d_model = 8;
  tc.num_heads = 2;
  tc.ffn_dim = 12;
  tc.classes = 3;
  TrainConfig train;
  train.lr = 0.1f;
  const Model m = BuildTransformer(tc, train);
  const std::set<std::string> keep = {m.features, m.labels, m.loss};
  BuildJitPassOptions o;
  o.keep_vars = keep;
  BuildJitReport report;
  const proto::ProgramDesc p = test::ApplyBuildJit(m.train, o, &report);
  ASSERT_GE(report.clusters.size(), 2u) << report.ToString();

  const proto::BlockDesc& block = m.train.blocks(0);
  std::set<std::string> reshape_inputs, persistable;
  for (const auto& op : block.ops()) {
    if (op.type() != "reshape2") continue;
    for (const auto& a : AllInputArgs(op)) reshape_inputs.insert(a);
  }
  for (const auto& v : block.vars()) {
    if (v.persistable()) persistable.insert(v.name());
  }
  ASSERT_FALSE(reshape_inputs.empty());

  bool backward_seen = false, forward_seen = false;
  int donatable_total = 0;
  for (const auto& c : report.clusters) {
    const JitSubgraph& sg = jit::JitCompiler::Instance().GetSubgraph(c.key);
    const std::vector<std::string> types = OpTypes(sg);
    const bool backward = Contains(types, "reshape2_grad");
    const bool forward = Contains(types, "reshape2") && !backward;
    SCOPED_TRACE(std::string(backward ? "backward" : forward ? "forward" : "other") + " cluster " + c.key);
    EXPECT_EQ(sg.shape_only_outputs, c.shape_only_outputs);
    EXPECT_EQ(sg.donatable_inputs, c.donatable_inputs);
    const proto::OpDesc* launch = FindLaunch(p, c.key);
    ASSERT_NE(launch, nullptr);
    EXPECT_EQ(StringsAttr(*launch, "shape_only_inputs"), c.shape_only_inputs);
    for (const auto& v : c.shape_only_inputs) {
      EXPECT_TRUE(Contains(c.inputs, v)) << v;
      EXPECT_FALSE(Contains(c.donatable_inputs, v)) << v << " is read for its shape only";
    }
    for (const auto& v : c.shape_only_outputs) {
      EXPECT_TRUE(Contains(c.outputs, v)) << v;
      EXPECT_FALSE(keep.count(v)) << v;
    }
    for (const auto& v : c.donatable_inputs) {
      EXPECT_TRUE(Contains(c.inputs, v)) << v;
      EXPECT_FALSE(keep.count(v)) << v << " is fed or fetched";
      EXPECT_FALSE(persistable.count(v)) << v << " is persistable";
      EXPECT_NE(v, m.features);
      EXPECT_NE(v, m.labels);
    }
    donatable_total += static_cast<int>(c.donatable_inputs.size());
    if (backward) {
      backward_seen = true;
      bool reshape_input = false;
      for (const auto& v : c.shape_only_inputs) reshape_input = reshape_input || reshape_inputs.count(v);
      EXPECT_TRUE(reshape_input) << report.ToString();
      EXPECT_TRUE(Contains(c.inputs, m.features)) << "the backward cluster reads the features";
    }
    if (forward) {
      forward_seen = true;
      EXPECT_FALSE(c.shape_only_outputs.empty()) << report.ToString();
      bool reshape_output = false;
      for (const auto& v : c.shape_only_outputs) reshape_output = reshape_output || reshape_inputs.count(v);
      EXPECT_TRUE(reshape_output) << report.ToString();
    }
  }
  EXPECT_TRUE(backward_seen) << report.ToString();
  EXPECT_TRUE(forward_seen) << report.ToString();
  EXPECT_GT(donatable_total, 0) << report.ToString();
  const std::string text = report.ToString();
  EXPECT_NE(text.find("shape-only inputs:"), std::string::npos) << text;
  EXPECT_NE(text.find("shape-only outputs:"), std::string::npos) << text;
  EXPECT_NE(text.find("inputs dying here:"), std::string::npos) << text;

  // Fetching a var that died in a cluster keeps it from being donated.
  std::string dying;
  for (const auto& c : report.clusters) {
    if (dying.empty() && !c.donatable_inputs.empty()) dying = c.donatable_inputs.back();
  }
  ASSERT_FALSE(dying.empty());
  BuildJitPassOptions o2 = o;
  o2.keep_vars.insert(dying);
  BuildJitReport report2;
  test::ApplyBuildJit(m.train, o2, &report2);
  bool still_input = false;
  for (const auto& c : report2.clusters) {
    EXPECT_FALSE(Contains(c.donatable_inputs, dying)) << dying << " is fetched\n" << report2.ToString();
    still_input = still_input || Contains(c.inputs, dying);
  }
  EXPECT_TRUE(still_input) << report2.ToString();

  // A few training steps give the same losses as the program without the JIT.
  const Dataset data = MakeSyntheticSequences(24, tc.seq_len, tc.d_model, tc.classes, 9);
  auto losses = [&](const proto::ProgramDesc& program) {
    Scope scope;
    Executor().RunProgram(m.startup, scope);
    Executor exec;
    auto plan = exec.Prepare(program, 0, {m.loss});
    std::vector<float> out;
    for (int s = 0; s < 3; ++s) {
      const Dataset b = SliceRows(data, s * 8, (s + 1) * 8);
      FeedTensor(program.blocks(0), scope, m.features, b.features);
      FeedTensor(program.blocks(0), scope, m.labels, b.labels);
      exec.Run(*plan, scope);
      out.push_back(scope.GetVar(m.loss)->Get().data<float>()[0]);
    }
    return out;
  };
  const std::vector<float> off = losses(m.train);
  const std::vector<float> on = losses(p);
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < off.size(); ++i) EXPECT_NEAR(on[i], off[i], 1e-4f * std::max(1.0f, off[i])) << "step " << i;
  const jit::LaunchStats stats = jit::GetLaunchStats();
  EXPECT_GT(stats.launches, 0);
  EXPECT_EQ(stats.framework_fallbacks, 0);
  // The backward cluster's dying inputs (activations, softmax_0, ...) hold its temps.
  EXPECT_GT(stats.inputs_donated, 0);
}

// softmax_with_cross_entropy (not lowerable) = sm, then the cluster
// exp(sm) -> matmul -> softmax; optionally a later data reader of sm.
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

TEST_F(JitPassMemoryTest, InputReadAfterTheClusterOrKeptIsNotDonatable) {
  struct Case {
    std::string what;
    bool later_reader;
    std::set<std::string> extra_keep;
    bool donatable;
  };
  for (const Case& c : std::vector<Case>{{"sm dies in the cluster", false, {}, true},
                                         {"sm read as data after the cluster", true, {}, false},
                                         {"sm fetched", false, {"sm"}, false}}) {
    SCOPED_TRACE(c.what);
    const proto::ProgramDesc program = DonorProgram(c.later_reader, 4, 12, 6);
    BuildJitPassOptions o;
    o.keep_vars = {"logits", "labels", "out", "ce"};
    if (c.later_reader) o.keep_vars.insert("ce2");
    o.keep_vars.insert(c.extra_keep.begin(), c.extra_keep.end());
    BuildJitReport report;
    test::ApplyBuildJit(program, o, &report);
    ASSERT_EQ(report.clusters.size(), 1u) << report.ToString();
    const auto& cl = report.clusters[0];
    EXPECT_EQ(std::set<std::string>(cl.inputs.begin(), cl.inputs.end()), (std::set<std::string>{"sm", "w"}))
        << report.ToString();
    EXPECT_TRUE(cl.shape_only_inputs.empty());
    EXPECT_TRUE(cl.shape_only_outputs.empty());
    EXPECT_EQ(Contains(cl.donatable_inputs, "sm"), c.donatable) << report.ToString();
    EXPECT_FALSE(Contains(cl.donatable_inputs, "w")) << "persistable";
  }
}

// ---- (5) jit_launch does not donate an input whose buffer is shared ---------------

TEST_F(JitPassMemoryTest, SharedDyingInputIsKeptAndNotScribbled) {
  const int64_t batch = 6, classes = 40, hidden = 16;
  const proto::ProgramDesc program = DonorProgram(false, batch, classes, hidden);
  BuildJitPassOptions po;
  po.keep_vars = {"logits", "labels", "out"};
  BuildJitReport report;
  const proto::ProgramDesc jitted = test::ApplyBuildJit(program, po, &report);
  ASSERT_EQ(report.clusters.size(), 1u);
  ASSERT_EQ(report.clusters[0].donatable_inputs, std::vector<std::string>{"sm"}) << report.ToString();

  std::mt19937 rng(6);
  const Tensor logits = test::RandomTensor({batch, classes}, DataType::kFP32, rng, -2, 2);
  std::vector<int64_t> label_values;
  for (int64_t i = 0; i < batch; ++i) label_values.push_back(static_cast<int64_t>(rng() % classes));
  const Tensor labels = test::Int64Tensor({batch, 1}, label_values);
  const Tensor w = test::RandomTensor({classes, hidden}, DataType::kFP32, rng, -0.5, 0.5);

  // held: a tensor the test keeps that shares sm's buffer (nullptr: not shared).
  auto run = [&](const proto::ProgramDesc& p, Tensor* held, Tensor* sm_ref) {
    Scope scope;
    scope.Var("w")->GetMutable()->CopyFrom(w);
    FeedTensor(p.blocks(0), scope, "logits", logits);
    FeedTensor(p.blocks(0), scope, "labels", labels);
    if (held != nullptr) {
      *held = Tensor(DataType::kFP32, {batch, classes});
      std::fill(held->mutable_data<float>(), held->mutable_data<float>() + held->numel(), -1.0f);
      scope.Var("sm")->GetMutable()->ShareBufferWith(*held);
      EXPECT_EQ(held->use_count(), 2);
    }
    Executor exec;
    std::set<std::string> keep = {"out"};
    if (sm_ref != nullptr) keep.insert("sm");
    auto plan = exec.Prepare(p, 0, keep);
    exec.Run(*plan, scope);
    if (sm_ref != nullptr) *sm_ref = Copy(scope.GetVar("sm")->Get());
    return Copy(scope.GetVar("out")->Get());
  };

  Tensor sm_ref;
  const Tensor want = run(program, nullptr, &sm_ref);  // JIT off, sm kept

  jit::ResetLaunchStats();
  Tensor held;
  const Tensor shared = run(jitted, &held, nullptr);
  jit::LaunchStats stats = jit::GetLaunchStats();
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.inputs_kept, 1) << "sm's buffer is shared with the test's tensor";
  EXPECT_EQ(stats.inputs_donated, 0);
  EXPECT_EQ(held.use_count(), 1) << "the executor freed sm after its last use";
  EXPECT_EQ(BitDiff(held, sm_ref), "") << "the shared buffer holds softmax_with_cross_entropy's output, untouched";
  EXPECT_EQ(test::CompareTensors(shared, want, 1e-5, 1e-4), "");

  jit::ResetLaunchStats();
  const Tensor alone = run(jitted, nullptr, nullptr);
  stats = jit::GetLaunchStats();
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.inputs_donated, 1) << "sm alone owns its buffer: donated";
  EXPECT_EQ(stats.inputs_kept, 0);
  EXPECT_EQ(BitDiff(alone, shared), "");
}

}  // namespace
}  // namespace kiln
