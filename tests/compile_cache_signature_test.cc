// CompileCache and the signatures it is asked for: one that the cluster's
// shape inference rejects is the caller's error (raised, naming the op and
// the cluster, never cached, never counted toward the recompile limit); a
// compile that fails after that is cached as a failure and answered from
// the cache.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compile_cache.h"
#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using jit::CompileCache;

jit::ShapeSignature Sig(const std::vector<Dims>& dims) {
  jit::ShapeSignature sig;
  for (const Dims& d : dims) sig.inputs.push_back({DataType::kFP32, d});
  return sig;
}

jit::CompileCacheOptions Options(int recompile_limit = 8) {
  jit::CompileCacheOptions o;
  o.recompile_limit = recompile_limit;
  // Every signature compiles on its own here: these tests are about the cache
  // of specialised compiles (tests/dynamic_shapes_test.cc has the dynamic ones).
  o.dynamic = jit::DynamicPolicy::kOff;
  o.compile = test::LoweringCase::DefaultOptions();
  o.cluster_name = [](const std::string&) { return std::string("c4"); };
  return o;
}

// x + b -> relu: b must broadcast into x.
std::string AddRelu(CompileCache& compiler) {
  test::LoweringCase c;
  c.ops = {OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"b"}).Out("Out", {"y"}).Build(),
           OpBuilder("relu").In("X", {"y"}).Out("Out", {"r"}).Build()};
  c.inputs = {{"x", {4, 8}}, {"b", {8}}};
  c.outputs = {"r"};
  return compiler.AddSubgraph(test::MakeSubgraph(c));
}

// test_no_lowering: Out = X, with an elementwise lowering that always
// throws: a compile that fails after shape inference.
void RegisterNoLoweringOp() {
  if (OpRegistry::Global().Find("test_no_lowering") != nullptr) return;
  OpInfo info;
  info.type = "test_no_lowering";
  info.doc = "test op: Out = X; its JIT lowering throws";
  info.inputs = {{"X"}};
  info.outputs = {{"Out"}};
  info.infer_shape = [](InferShapeContext& ctx) { ctx.SetOutput("Out", ctx.InputDims("X"), ctx.InputDtype("X")); };
  info.reference_kernel = [](ExecContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X")); };
  info.jit = JitLowering::kElementwise;
  info.elementwise = [](const EwOpView&) -> std::vector<EwFragment> {
    ThrowInvalidArgument("test_no_lowering cannot be lowered");
  };
  OpRegistry::GlobalForRegistration().Add(std::move(info));
}

TEST(CompileCacheSignatureTest, ARejectedSignatureRaisesNamingTheOpAndIsNeitherCachedNorCounted) {
  CompileCache compiler(Options(/*recompile_limit=*/2));
  const std::string key = AddRelu(compiler);
  const jit::ShapeSignature bad = Sig({{4, 8}, {2, 4, 8}});  // Y of higher rank than X
  for (int i = 0; i < 5; ++i) {  // more bad signatures than the limit
    const std::string err = test::ErrorOf([&] { compiler.Compile(key, bad); });
    EXPECT_NE(err.find("op #0 'elementwise_add'"), std::string::npos) << err;
    EXPECT_NE(err.find("higher rank"), std::string::npos) << err;
    EXPECT_NE(err.find("JIT cluster c4"), std::string::npos) << err;
  }
  jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(s.fallback_calls, 0);
  EXPECT_TRUE(compiler.CachedObjects().empty());
  // The budget of two signatures is still whole: both compile.
  EXPECT_NE(compiler.Compile(key, Sig({{4, 8}, {8}})), nullptr);
  EXPECT_NE(compiler.Compile(key, Sig({{16, 8}, {8}})), nullptr);
  s = compiler.stats();
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(compiler.Compile(key, Sig({{2, 8}, {8}})), nullptr) << "the third good signature is past the limit";
}

TEST(CompileCacheSignatureTest, AFailedCompileIsAnsweredFromTheCache) {
  RegisterNoLoweringOp();
  CompileCache compiler(Options());
  test::LoweringCase c;
  c.ops = {OpBuilder("test_no_lowering").In("X", {"x"}).Out("Out", {"y"}).Build()};
  c.inputs = {{"x", {4, 8}}};
  c.outputs = {"y"};
  const std::string key = compiler.AddSubgraph(test::MakeSubgraph(c));
  testing::internal::CaptureStderr();
  EXPECT_EQ(compiler.Compile(key, Sig({{4, 8}})), nullptr);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot be compiled for (f32[4,8])"), std::string::npos) << err;
  EXPECT_NE(err.find("test_no_lowering cannot be lowered"), std::string::npos) << err;
  EXPECT_EQ(compiler.stats().failures, 1);
  EXPECT_EQ(compiler.stats().fallback_calls, 0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(compiler.Compile(key, Sig({{4, 8}})), nullptr);
  err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "") << "not compiled again";
  const jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.fallback_calls, 1);
  EXPECT_TRUE(compiler.CachedObjects().empty());
}

// test_reject: Out = X; its shape inference rejects rows != 4, after
// waiting (while g_reject_wait is set) until another caller found the
// signature in flight (a hit), so that caller waits on the rejected compile.
std::atomic<bool> g_reject_wait{false};
CompileCache* g_reject_compiler = nullptr;

void RegisterRejectOp() {
  if (OpRegistry::Global().Find("test_reject") != nullptr) return;
  OpInfo info;
  info.type = "test_reject";
  info.doc = "test op: Out = X; shape inference rejects rows other than 4";
  info.inputs = {{"X"}};
  info.outputs = {{"Out"}};
  info.infer_shape = [](InferShapeContext& ctx) {
    const Dims x = ctx.InputDims("X");
    if (x[0] != 4 && g_reject_wait.exchange(false)) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (g_reject_compiler->stats().hits < 1 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (x[0] != 4) ctx.Fail("input X: expected 4 rows, got ", x[0]);
    ctx.SetOutput("Out", x, ctx.InputDtype("X"));
  };
  info.reference_kernel = [](ExecContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X")); };
  OpRegistry::GlobalForRegistration().Add(std::move(info));
}

std::string RejectRelu(CompileCache& compiler) {
  test::LoweringCase c;
  c.ops = {OpBuilder("test_reject").In("X", {"x"}).Out("Out", {"y"}).Build(),
           OpBuilder("relu").In("X", {"y"}).Out("Out", {"r"}).Build()};
  c.inputs = {{"x", {4, 8}}};
  c.outputs = {"r"};
  return compiler.AddSubgraph(test::MakeSubgraph(c));
}

// Two callers of one bad signature: the one that checks it raises, the one
// that waited on it gets no object (it runs the framework ops, which raise
// the same error); neither counts toward the limit.
TEST(CompileCacheSignatureTest, ACallerWaitingOnARejectedSignatureGetsNoObject) {
  RegisterRejectOp();
  CompileCache compiler(Options(/*recompile_limit=*/1));
  g_reject_compiler = &compiler;
  const std::string key = RejectRelu(compiler);
  g_reject_wait = true;
  std::string checker_error;
  std::thread checker([&] { checker_error = test::ErrorOf([&] { compiler.Compile(key, Sig({{3, 8}})); }); });
  while (g_reject_wait) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the checker is in
  std::shared_ptr<const jit::CompiledObject> waited = compiler.Compile(key, Sig({{3, 8}}));
  checker.join();
  EXPECT_EQ(waited, nullptr);
  EXPECT_NE(checker_error.find("expected 4 rows, got 3"), std::string::npos) << checker_error;
  const jit::CacheStats s = compiler.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.failures, 0);
  EXPECT_NE(compiler.Compile(key, Sig({{4, 8}})), nullptr) << "the limit of one is still whole";
}

// A rejected signature never takes a cache slot: with room for one object,
// the compiled one stays.
TEST(CompileCacheSignatureTest, ARejectedSignatureNeverEvictsACompiledOne) {
  jit::CompileCacheOptions o = Options();
  o.cache_capacity = 1;
  CompileCache compiler(o);
  const std::string key = AddRelu(compiler);
  const auto good = compiler.Compile(key, Sig({{4, 8}, {8}}));
  ASSERT_NE(good, nullptr);
  EXPECT_NE(test::ErrorOf([&] { compiler.Compile(key, Sig({{4, 8}, {2, 4, 8}})); }), "");
  EXPECT_EQ(compiler.CachedObjects(), std::vector<std::shared_ptr<const jit::CompiledObject>>{good});
  EXPECT_EQ(compiler.stats().evictions, 0);
  EXPECT_EQ(compiler.Compile(key, Sig({{4, 8}, {8}})), good);
}

}  // namespace
}  // namespace kiln
