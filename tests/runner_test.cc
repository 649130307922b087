// runtime/runner.cc on hand-built programs whose test kernels log the
// pointers they are given: inputs and outputs bound zero-copy, temps in the
// arena, views at their root's memory (also an output made late), outputs
// made right before their first writer, temps in a donated input or in a
// block of their own, owned inputs freed after their last use,
// RunInstruction, runs timed into a profiler (its rows: profiler_test). And a
// compiled program (exp, matmul, softmax) giving the same bits with its dying
// input donated or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler/lower.h"
#include "framework/allocator.h"
#include "runtime/profiler.h"
#include "runtime/program.h"
#include "runtime/runner.h"
#include "tests/lowering_test_util.h"
#include "tests/memory_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using runtime::BufferRole;
using test::BitDiff;
using test::Buffer;
using test::Copy;
using test::Ins;
using test::ViewOf;

// A kernel that runs `fn` on its arguments.
class TestKernel : public runtime::Kernel {
 public:
  using Fn = std::function<void(const runtime::BufferView*)>;
  TestKernel(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "test kernel " + name_; }
  void Run(const runtime::BufferView* args) const override { fn_(args); }

 private:
  std::string name_;
  Fn fn_;
};

// Every call's argument pointers and dims, in order.
struct Log {
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<Dims>> dims;
};

// out = sum of `num_inputs` FP32 inputs (of out's numel), logged.
std::shared_ptr<TestKernel> Adder(int num_inputs, Log* log) {
  return std::make_shared<TestKernel>("add", [num_inputs, log](const runtime::BufferView* args) {
    log->ptrs.emplace_back();
    log->dims.emplace_back();
    for (int k = 0; k <= num_inputs; ++k) {
      log->ptrs.back().push_back(args[k].data);
      log->dims.back().push_back(*args[k].dims);
    }
    float* out = static_cast<float*>(args[num_inputs].data);
    for (int64_t i = 0; i < Numel(*args[num_inputs].dims); ++i) {
      float sum = 0;
      for (int k = 0; k < num_inputs; ++k) sum += static_cast<const float*>(args[k].data)[i];
      out[i] = sum;
    }
  });
}

runtime::Instruction AddIns(std::vector<int> reads, int write, Log* log) {
  const int n = static_cast<int>(reads.size());
  return Ins(std::move(reads), {write}, Adder(n, log));
}

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = start++;
  return v;
}

char* Ptr(void* p) { return static_cast<char*>(p); }

constexpr int64_t kN = 16;

TEST(RunnerTest, InputsAndOutputsAreTheCallersMemoryAndTempsLiveInTheArenaOrAnOutput) {
  //   0: t1 = in0 + in1   1: t2 = t1 + in0   2: out = t2 + in1
  Log log;
  runtime::Program p;
  p.plan.buffers = {Buffer("in0", BufferRole::kInput, kN, 0), Buffer("in1", BufferRole::kInput, kN, 1),
                    Buffer("t1", BufferRole::kTemp, kN), Buffer("t2", BufferRole::kTemp, kN),
                    Buffer("out", BufferRole::kOutput, kN, 0)};
  p.instructions = {AddIns({0, 1}, 2, &log), AddIns({2, 0}, 3, &log), AddIns({3, 1}, 4, &log)};
  runtime::PlanArena(p.instructions, &p.plan, true);
  const auto& b1 = p.plan.buffers[2];
  const auto& b2 = p.plan.buffers[3];
  ASSERT_TRUE(b1.region != b2.region || b1.offset != b2.offset) << "t1 and t2 are both live at 1";
  std::vector<float> in0 = Iota(kN, 1), in1 = Iota(kN, 100), out(kN, -1);
  const size_t in_use_before = CachingAllocator::Global().stats().in_use_bytes;
  runtime::Runner::Run(p, {in0.data(), in1.data()}, {out.data()});
  EXPECT_EQ(CachingAllocator::Global().stats().in_use_bytes, in_use_before) << "the arena lives for the launch";
  ASSERT_EQ(log.ptrs.size(), 3u);
  void* t1 = log.ptrs[0][2];
  void* t2 = log.ptrs[1][2];
  EXPECT_EQ(log.ptrs[0], (std::vector<void*>{in0.data(), in1.data(), t1}));
  EXPECT_EQ(log.ptrs[1], (std::vector<void*>{t1, in0.data(), t2}));
  EXPECT_EQ(log.ptrs[2], (std::vector<void*>{t2, in1.data(), out.data()}));
  // t1 [0,1] ends before out is first written (2): it lives in out's memory;
  // t2 [1,2] in the arena.
  ASSERT_EQ(b1.region, 4);
  EXPECT_EQ(Ptr(t1), Ptr(out.data()) + static_cast<ptrdiff_t>(b1.offset)) << "t1 at its offset in out";
  EXPECT_EQ(b2.region, -1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t2) % 64, 0u);
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(out[i], 2 * in0[i] + 2 * in1[i]) << i;
  EXPECT_EQ(in0, Iota(kN, 1)) << "inputs are read, not written";
  // With a profiler, every instruction runs through it.
  runtime::Profiler profiler;
  std::vector<float> out2(kN);
  runtime::Runner::Run(p, {in0.data(), in1.data()}, {out2.data()}, {}, {}, nullptr, &profiler);
  EXPECT_EQ(profiler.calls(), 3);
  EXPECT_EQ(log.ptrs.size(), 6u);
  EXPECT_EQ(out2, out);
}

TEST(RunnerTest, ViewsGetTheirRootsMemoryWithTheirOwnDims) {
  //   0: t = f(in_view)   1: out_view = g(t_view)
  Log log;
  runtime::Program p;
  p.plan.buffers = {Buffer("in", BufferRole::kInput, kN, 0), ViewOf("in_view", 0, {4, 4}),
                    Buffer("t", BufferRole::kTemp, kN),      ViewOf("t_view", 2, {2, 8}),
                    Buffer("out", BufferRole::kOutput, kN, 0), ViewOf("out_view", 4, {8, 2})};
  p.instructions = {AddIns({1}, 2, &log), AddIns({3}, 5, &log)};
  runtime::PlanArena(p.instructions, &p.plan, true);
  std::vector<float> in = Iota(kN, 3), out(kN, -1);
  runtime::Runner::Run(p, {in.data()}, {out.data()});
  ASSERT_EQ(log.ptrs.size(), 2u);
  EXPECT_EQ(log.ptrs[0][0], in.data());
  EXPECT_EQ(log.ptrs[1][0], log.ptrs[0][1]) << "t_view is t's memory";
  EXPECT_EQ(log.ptrs[1][1], out.data());
  EXPECT_EQ(log.dims[0][0], (Dims{4, 4}));
  EXPECT_EQ(log.dims[1], (std::vector<Dims>{{2, 8}, {8, 2}}));
  EXPECT_EQ(out, in);
}

// Outputs given as null are made by allocate_output right before the
// instruction that first writes them (through a view too), each once;
// outputs given are not made.
TEST(RunnerTest, OutputsAreMadeRightBeforeTheirFirstWriter) {
  //   0: out0 = in   1: t = out0   2: out1_view = t
  Log log;
  runtime::Program p;
  p.plan.buffers = {Buffer("in", BufferRole::kInput, kN, 0), Buffer("out0", BufferRole::kOutput, kN, 0),
                    Buffer("t", BufferRole::kTemp, kN), Buffer("out1", BufferRole::kOutput, kN, 1),
                    ViewOf("out1_view", 3, {4, 4})};
  p.instructions = {AddIns({0}, 1, &log), AddIns({1}, 2, &log), AddIns({2}, 4, &log)};
  runtime::PlanArena(p.instructions, &p.plan, true);
  EXPECT_EQ(p.plan.alloc_before, (std::vector<std::vector<int>>{{0}, {}, {1}}));
  std::vector<float> in = Iota(kN, 7), given(kN, -1);
  for (bool give_out0 : {true, false}) {
    SCOPED_TRACE(give_out0 ? "out0 given" : "both made");
    log = {};
    std::vector<std::vector<float>> made;
    std::vector<std::pair<int, size_t>> calls;  // (io, instructions run before)
    made.reserve(2);
    runtime::Runner::Run(p, {in.data()}, {give_out0 ? given.data() : nullptr, nullptr}, {}, {}, [&](int io) {
      calls.emplace_back(io, log.ptrs.size());
      made.emplace_back(kN, -1.0f);
      return static_cast<void*>(made.back().data());
    });
    const std::vector<std::pair<int, size_t>> want_calls =
        give_out0 ? std::vector<std::pair<int, size_t>>{{1, 2}} : std::vector<std::pair<int, size_t>>{{0, 0}, {1, 2}};
    EXPECT_EQ(calls, want_calls);
    ASSERT_EQ(log.ptrs.size(), 3u);
    EXPECT_EQ(log.ptrs[0][1], give_out0 ? given.data() : made[0].data());
    EXPECT_EQ(log.ptrs[2][1], made.back().data()) << "the view of out1 has out1's memory once it is made";
    EXPECT_EQ(made.back(), in);
  }
}

// A temp planned into a dying input uses the input's memory when the caller
// donates it, else a block of its own; the results are the same.
TEST(RunnerTest, TempsPlannedInADyingInputUseItOnlyWhenDonated) {
  //   0: a = x + w   1: c = a + w (in x's memory)   2: out = c + w
  Log log;
  runtime::Program p;
  p.plan.buffers = {Buffer("x", BufferRole::kInput, kN, 0, true), Buffer("w", BufferRole::kInput, kN, 1),
                    Buffer("a", BufferRole::kTemp, kN), Buffer("c", BufferRole::kTemp, kN),
                    Buffer("out", BufferRole::kOutput, kN, 0)};
  p.instructions = {AddIns({0, 1}, 2, &log), AddIns({2, 1}, 3, &log), AddIns({3, 1}, 4, &log)};
  runtime::PlanArena(p.instructions, &p.plan, true);
  ASSERT_EQ(p.plan.buffers[3].region, 0) << "c goes into x";
  const std::vector<float> x0 = Iota(kN, 1);
  std::vector<float> w = Iota(kN, 50);
  std::vector<float> want(kN);
  for (int64_t i = 0; i < kN; ++i) want[i] = x0[i] + 3 * w[i];
  for (const std::vector<bool>& donate : std::vector<std::vector<bool>>{{true, false}, {false, false}, {}}) {
    const bool donated = !donate.empty() && donate[0];
    SCOPED_TRACE(donated ? "donated" : donate.empty() ? "no donate list" : "not donated");
    log = {};
    std::vector<float> x = x0, out(kN, -1);
    runtime::Runner::Run(p, {x.data(), w.data()}, {out.data()}, donate);
    ASSERT_EQ(log.ptrs.size(), 3u);
    char* c = Ptr(log.ptrs[1][2]);
    const bool in_x = c >= Ptr(x.data()) && c < Ptr(x.data() + kN);
    EXPECT_EQ(in_x, donated);
    if (donated) {
      EXPECT_EQ(c, Ptr(x.data()) + p.plan.buffers[3].offset);
    }
    EXPECT_NE(c, Ptr(log.ptrs[0][2])) << "c is not a's arena slot";
    EXPECT_EQ(out, want);
    EXPECT_EQ(x == x0, !donated) << "only a donated input's memory is written";
  }
}

// Owned donated inputs are dropped after the instruction that last uses their
// memory: y after its last read, x only after the last use of the temp
// placed in it.
TEST(RunnerTest, OwnedInputsAreFreedAfterTheLastUseOfTheirMemory) {
  //   0: a = f(x, y)   1: t = g(a) (in x's memory)   2: out = h(t)
  std::weak_ptr<Allocation> x_weak, y_weak;
  std::vector<std::pair<bool, bool>> alive;  // (x, y) as each instruction runs
  auto note = std::make_shared<TestKernel>(
      "note", [&](const runtime::BufferView*) { alive.emplace_back(!x_weak.expired(), !y_weak.expired()); });
  runtime::Program p;
  p.plan.buffers = {Buffer("x", BufferRole::kInput, kN, 0, true), Buffer("y", BufferRole::kInput, 2 * kN, 1, true),
                    Buffer("a", BufferRole::kTemp, kN), Buffer("t", BufferRole::kTemp, kN),
                    Buffer("out", BufferRole::kOutput, kN, 0)};
  p.instructions = {Ins({0, 1}, {2}, note), Ins({2}, {3}, note), Ins({3}, {4}, note)};
  runtime::PlanArena(p.instructions, &p.plan, true);
  ASSERT_EQ(p.plan.buffers[3].region, 0) << "t goes into x, the smaller dying input";
  EXPECT_EQ(p.plan.free_after, (std::vector<std::vector<int>>{{1}, {}, {0}}));
  auto x = std::make_shared<Allocation>(kN * sizeof(float));
  auto y = std::make_shared<Allocation>(2 * kN * sizeof(float));
  x_weak = x;
  y_weak = y;
  std::vector<void*> in = {x->ptr(), y->ptr()};
  std::vector<float> out(kN);
  std::vector<std::shared_ptr<Allocation>> owned = {std::move(x), std::move(y)};
  runtime::Runner::Run(p, in, {out.data()}, {true, true}, std::move(owned));
  EXPECT_EQ(alive, (std::vector<std::pair<bool, bool>>{{true, true}, {true, false}, {true, false}}));
  EXPECT_TRUE(x_weak.expired());
}

TEST(RunnerTest, RunInstructionRunsOneInstructionOnTheGivenMemory) {
  Log log;
  runtime::Program p;
  p.plan.buffers = {Buffer("in", BufferRole::kInput, kN, 0), ViewOf("v", 0, {4, 4}),
                    Buffer("out", BufferRole::kOutput, kN, 0)};
  p.instructions = {AddIns({0}, 2, &log), AddIns({1, 0}, 2, &log)};
  std::vector<float> a = Iota(kN, 1), b = Iota(kN, 20), out(kN);
  runtime::Profiler profiler;
  runtime::Runner::RunInstruction(p, 1, {a.data(), b.data(), out.data()}, &profiler);
  ASSERT_EQ(log.ptrs.size(), 1u);
  EXPECT_EQ(log.ptrs[0], (std::vector<void*>{a.data(), b.data(), out.data()})) << "no root, no plan: as given";
  EXPECT_EQ(log.dims[0], (std::vector<Dims>{{4, 4}, {kN}, {kN}})) << "the plan's dims";
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  EXPECT_EQ(profiler.calls(), 1);
  runtime::Runner::RunInstruction(p, 0, {b.data(), out.data()});
  EXPECT_EQ(out, b);
  EXPECT_EQ(profiler.calls(), 1) << "not profiled without a profiler";
  EXPECT_THROW(runtime::Runner::RunInstruction(p, 2, {}), std::out_of_range);
  EXPECT_DEATH(runtime::Runner::RunInstruction(p, 0, {a.data()}), "arg_data.size");
}

// ---- moved from memory_reuse_test: a compiled program, and the caching allocator ----

// The donor chain over `inputs` x and w, with x dying in the cluster.
test::LoweringCase DonorCase(const std::map<std::string, Tensor>& inputs) {
  test::LoweringCase c;
  c.ops = test::DonorChain();
  c.inputs = {{"x", inputs.at("x").dims()}, {"w", inputs.at("w").dims()}};
  c.outputs = {"out"};
  c.donatable = {"x"};
  return c;
}

TEST(RunnerDonationTest, TempsInADonatedInputGiveTheSameResults) {
  std::mt19937 rng(5);
  const std::map<std::string, Tensor> inputs = {{"x", test::RandomTensor({9, 33}, DataType::kFP32, rng)},
                                                {"w", test::RandomTensor({33, 20}, DataType::kFP32, rng, -0.3, 0.3)}};
  const std::vector<proto::OpDesc> ops = test::DonorChain();
  auto reference = test::RunOps(ops, inputs, /*use_onednn=*/false);
  JitSubgraph sg = test::MakeSubgraph(DonorCase(inputs));
  ASSERT_EQ(sg.inputs, (std::vector<std::string>{"x", "w"}));
  ASSERT_EQ(sg.donatable_inputs, (std::vector<std::string>{"x"}));
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

}  // namespace
}  // namespace kiln
