// runtime/runner.cc: a compiled program (exp, matmul, softmax) gives the same
// bits with its dying input donated or not; owned inputs are freed after their
// last use and outputs made right before their first writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/lower.h"
#include "framework/allocator.h"
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
