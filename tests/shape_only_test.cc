// Shape-only (no-need-buffer) inputs in the framework: the executor releases
// a var's buffer once only shape readers remain and those readers still see
// its dims; reading the data of a shape-only input fails naming it; the
// tensor's shape-only state; NoNeedBufferVars leaves out vars also read as
// data or written. (The grad ops' bits with a shape-only input:
// shape_only_grad_test; jit_launch's shape-only inputs: jit_launch_memory_test.)
#include <gtest/gtest.h>

#include <algorithm>
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

using test::Contains;
using test::OneBlock;

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
  ExecContext ctx(desc, attrs, inputs, outputs, 0, onednn::Settings{});
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
}

}  // namespace
}  // namespace kiln
