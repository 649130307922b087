// What the compile cache's and the JIT runtime's tests share: a small real
// cluster (relu, scale), a test op whose shape inference holds compiles at a
// gate (to make threads meet inside a compile), signatures and a counter.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {

using Object = std::shared_ptr<const jit::CompiledObject>;

// Holds the compiles that reach it (in the test_gate op's shape inference)
// until ready(number of compiles held) is true; from then on lets every
// compile through.
class Gate {
 public:
  explicit Gate(std::function<bool(int)> ready) : ready_(std::move(ready)) {}
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    max_inside_ = std::max(max_inside_, inside_);
    // Only a guard against hanging when the compiler is broken (the test's
    // assertions then fail); no timing is checked.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!open_ && !ready_(inside_) && std::chrono::steady_clock::now() < give_up) {
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    open_ = true;
    --inside_;
    cv_.notify_all();
  }
  int max_inside() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_inside_;
  }

 private:
  std::function<bool(int)> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0, max_inside_ = 0;
  bool open_ = false;
};
inline Gate* g_gate = nullptr;  // set while a test's threads run

// test_gate: Out = X; each compile of a cluster holding it passes g_gate.
inline void RegisterGateOp() {
  if (OpRegistry::Global().Find("test_gate") != nullptr) return;
  OpInfo info;
  info.type = "test_gate";
  info.doc = "test op: Out = X; its shape inference waits at the test's gate";
  info.inputs = {{"X"}};
  info.outputs = {{"Out"}};
  info.infer_shape = [](InferShapeContext& ctx) {
    if (g_gate != nullptr) g_gate->Pass();
    ctx.SetOutput("Out", ctx.InputDims("X"), ctx.InputDtype("X"));
  };
  info.reference_kernel = [](ExecContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X")); };
  OpRegistry::GlobalForRegistration().Add(std::move(info));
}

// relu(x) = r, scale(r) = s (gated: test_gate(x) first).
inline JitSubgraph ReluScale(bool gated = false) {
  LoweringCase c;
  const std::string x = gated ? "g" : "x";
  if (gated) c.ops.push_back(OpBuilder("test_gate").In("X", {"x"}).Out("Out", {"g"}).Build());
  c.ops.push_back(OpBuilder("relu").In("X", {x}).Out("Out", {"r"}).Build());
  c.ops.push_back(OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 2.0f).Build());
  c.inputs = {{"x", {4, 8}}};
  c.outputs = {"s"};
  return MakeSubgraph(c);
}

inline jit::ShapeSignature Sig(const std::vector<Dims>& dims) {
  jit::ShapeSignature sig;
  for (const Dims& d : dims) sig.inputs.push_back({DataType::kFP32, d});
  return sig;
}
inline const jit::ShapeSignature kA = Sig({{4, 8}}), kB = Sig({{2, 8}}), kC = Sig({{3, 8}}), kD = Sig({{1, 8}});

inline size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace kiln::test
