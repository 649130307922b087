// The generated kernels the lowering makes (elementwise groups, bf16 weight
// copies, transposes), resized to the dims their args have at another
// batch size (issue 32): each is the kernel the lowering makes at that size
// (the same layout, code and listing line), and the resizes that would be
// wrong fail with their reason (a dim that was 1, reduce_mean's 1/count).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

// ReluMatmulBiasGrad's chain, and a transpose of x.
LoweringCase Chain(int64_t batch) {
  LoweringCase c = ReluMatmulBiasGrad("ew_resize", batch);
  c.ops.push_back(
      OpBuilder("transpose2").In("X", {"x"}).Out("Out", {"xt"}).Attr("axis", std::vector<int64_t>{1, 0}).Build());
  c.outputs.push_back("xt");
  return c;
}

// The dims of instruction `ins`'s args in `program`.
std::vector<Dims> ArgDims(const runtime::Program& program, const runtime::Instruction& ins) {
  std::vector<Dims> dims;
  for (int b : ins.args) dims.push_back(program.plan.buffers[static_cast<size_t>(b)].dims);
  return dims;
}

bool Generated(const runtime::Instruction& ins) {
  return ins.kernel->code() != nullptr && ins.kernel->name().rfind("ew_", 0) == 0;
}

TEST(LoweringEwResizeTest, ResizedKernelsAreTheOnesLoweredAtTheNewSize) {
  const auto at9 = LowerCase(Chain(9));
  int resized = 0;
  for (int64_t batch : {5, 33}) {
    const auto at = LowerCase(Chain(batch));
    ASSERT_EQ(at->program.instructions.size(), at9->program.instructions.size()) << at->Listing();
    for (size_t i = 0; i < at9->program.instructions.size(); ++i) {
      const runtime::Instruction& from = at9->program.instructions[i];
      const runtime::Instruction& want = at->program.instructions[i];
      if (!Generated(from)) continue;
      std::string why;
      const auto k = from.kernel->Resize(ArgDims(at->program, want), &why);
      ASSERT_NE(k, nullptr) << from.kernel->Describe() << " to batch " << batch << ": " << why;
      EXPECT_EQ(k->code(), from.kernel->code());
      EXPECT_EQ(k->Describe(), want.kernel->Describe()) << "batch " << batch;
      EXPECT_EQ(k->DumpDetail(), want.kernel->DumpDetail()) << "batch " << batch;
      ++resized;
    }
  }
  EXPECT_GE(resized, 2) << at9->Listing();
  // At batch 1 the kernels made at 9 keep their loops (of size 1 now).
  const auto at1 = LowerCase(Chain(1));
  for (size_t i = 0; i < at9->program.instructions.size(); ++i) {
    if (!Generated(at9->program.instructions[i])) continue;
    std::string why;
    EXPECT_NE(at9->program.instructions[i].kernel->Resize(ArgDims(at1->program, at1->program.instructions[i]), &why),
              nullptr)
        << why;
  }
}

TEST(LoweringEwResizeTest, ADimThatWasOneDoesNotGrow) {
  const auto at1 = LowerCase(Chain(1));
  int refused = 0;
  for (const auto& ins : at1->program.instructions) {
    if (!Generated(ins)) continue;
    std::vector<Dims> dims = ArgDims(at1->program, ins);
    for (Dims& d : dims) {
      if (d.size() == 2 && d[0] == 1 && d[1] == 17) d[0] = 4;
    }
    std::string why;
    if (ins.kernel->Resize(dims, &why) != nullptr) continue;
    EXPECT_NE(why.find("was 1 (no loop)"), std::string::npos) << why;
    ++refused;
  }
  EXPECT_GE(refused, 1) << at1->Listing();
}

TEST(LoweringEwResizeTest, AMeanIsMadeForItsCount) {
  LoweringCase c;
  c.name = "ew_resize_mean";
  c.ops = {OpBuilder("relu").In("X", {"x"}).Out("Out", {"r"}).Build(),
           OpBuilder("reduce_mean").In("X", {"r"}).Out("Out", {"m"}).Attr("dim", std::vector<int64_t>{0}).Build()};
  c.inputs = {{"x", {8, 16}}};
  c.outputs = {"m"};
  c.options.use_onednn = false;
  const auto obj = LowerCase(c);
  int refused = 0;
  for (const auto& ins : obj->program.instructions) {
    if (ins.kernel->name().rfind("ew_", 0) != 0) continue;
    std::vector<Dims> dims = ArgDims(obj->program, ins);
    for (Dims& d : dims) {
      if (!d.empty() && d[0] == 8) d[0] = 4;
    }
    std::string why;
    EXPECT_EQ(ins.kernel->Resize(dims, &why), nullptr) << ins.kernel->Describe();
    EXPECT_NE(why.find("constants computed from the dims"), std::string::npos) << why;
    ++refused;
  }
  EXPECT_GE(refused, 1) << obj->Listing();
}

}  // namespace
}  // namespace kiln::test
