// Generated elementwise kernels at sizes other than the ones they were made
// for (issue 32): a kernel made at one size is resized (the runtime kernel's
// Resize through EwLayoutResizer, the way the lowering makes it) to sizes of
// 1, below one vector, one vector, odd sizes with tails and long ones, with
// broadcast inputs, sums, bf16 and bool operands, on every ISA; each result
// is checked against the reference interpreter over the layout
// CollapseLayout makes of the new sizes afresh. Resizes the code cannot
// serve fail with their reason.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/codegen/ew_runtime_kernel.h"
#include "framework/bf16.h"
#include "framework/ew/ew_reference.h"
#include "framework/ew/ew_resize.h"
#include "tests/ew_codegen_test_util.h"

namespace kiln::jit {
namespace {

using ew_test::Isas;
using ew_test::SameBits;

// An operand of a test case: which iteration dims it has ('1') or is
// broadcast / summed along ('0'), its element type, and whether its var
// leaves out the dims it does not have (a bias [C] read over [B, C]).
struct OperandSpec {
  std::string walks;
  EwElem elem = EwElem::kF32;
  bool squeeze = false;
};

struct Case {
  std::string name;
  std::vector<OperandSpec> inputs, outputs;
};

Dims PaddedDims(const OperandSpec& s, const Dims& iter) {
  Dims d(iter.size(), 1);
  for (size_t i = 0; i < iter.size(); ++i) d[i] = s.walks[i] == '1' ? iter[i] : 1;
  return d;
}

Dims VarDims(const OperandSpec& s, const Dims& iter) {
  const Dims padded = PaddedDims(s, iter);
  if (!s.squeeze) return padded;
  Dims d;
  for (size_t i = 0; i < iter.size(); ++i) {
    if (s.walks[i] == '1') d.push_back(padded[i]);
  }
  return d.empty() ? Dims{1} : d;
}

// A random program of operations the float reference computes as the
// generated code does, bit for bit, reading every input and writing every
// output. Inputs are small integers and outputs are clamped to [-4, 4], so
// that sums are exact in any order too (or NaN in both).
EwProgram RandomProgram(size_t num_inputs, size_t num_outputs, uint32_t seed) {
  std::mt19937 rng(seed);
  EwProgram p;
  std::vector<EwValue> pool;
  for (size_t k = 0; k < num_inputs; ++k) pool.push_back(p.Load(static_cast<int>(k)));
  pool.push_back(p.Const(2.0f));
  auto pick = [&] { return pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)]; };
  for (int i = 0; i < 12; ++i) {
    const EwValue a = pick(), b = pick(), c = pick();
    switch (std::uniform_int_distribution<int>(0, 8)(rng)) {
      case 0: pool.push_back(p.Add(a, b)); break;
      case 1: pool.push_back(p.Sub(a, b)); break;
      case 2: pool.push_back(p.Mul(a, b)); break;
      case 3: pool.push_back(p.Max(a, b)); break;
      case 4: pool.push_back(p.Min(a, b)); break;
      case 5: pool.push_back(p.Fma(a, b, c)); break;
      case 6: pool.push_back(p.Select(p.Gt(a, b), b, c)); break;
      case 7: pool.push_back(p.Abs(a)); break;
      default: pool.push_back(p.Neg(p.Add(a, c))); break;
    }
  }
  // Every input reaches an output: the first output adds them all.
  auto clamp = [&](EwValue v) { return p.Max(p.Min(v, p.Const(4.0f)), p.Const(-4.0f)); };
  EwValue all = pool[0];
  for (size_t k = 1; k < num_inputs; ++k) all = p.Add(all, pool[k]);
  p.Store(0, clamp(p.Add(all, pool.back())));
  for (size_t o = 1; o < num_outputs; ++o) p.Store(static_cast<int>(o), clamp(pick()));
  return p;
}

// One operand's memory: floats for the reference and, for bf16 / bool, the
// bits the kernel reads or writes.
struct Buffer {
  EwElem elem = EwElem::kF32;
  std::vector<float> values;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> bytes;
  void* data() {
    if (elem == EwElem::kBF16) return bf16.data();
    if (elem == EwElem::kBool) return bytes.data();
    return values.data();
  }
  float At(size_t i) const {
    if (elem == EwElem::kBF16) return Bf16BitsToFloat(bf16[i]);
    if (elem == EwElem::kBool) return bytes[i] != 0 ? 1.0f : 0.0f;
    return values[i];
  }
};

Buffer MakeInput(EwElem elem, int64_t n, std::mt19937& rng) {
  Buffer b;
  b.elem = elem;
  std::uniform_int_distribution<int> dist(-2, 2);
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(dist(rng));
    if (elem == EwElem::kBF16) {
      b.bf16.push_back(FloatToBf16Bits(x));
      b.values.push_back(Bf16BitsToFloat(b.bf16.back()));
    } else if (elem == EwElem::kBool) {
      b.bytes.push_back(x > 0 ? 1 : 0);
      b.values.push_back(b.bytes.back());
    } else {
      b.values.push_back(x);
    }
  }
  return b;
}

Buffer MakeOutput(EwElem elem, int64_t n) {
  Buffer b;
  b.elem = elem;
  b.values.assign(static_cast<size_t>(n), -7.0f);  // an element not written shows
  b.bf16.assign(static_cast<size_t>(n), 0x7fc1);
  b.bytes.assign(static_cast<size_t>(n), 0xab);
  return b;
}

// Runs `kernel` (made for `c`) at iteration dims `iter` on `threads`
// threads and checks it against the reference bit for bit (RandomProgram's
// sums are exact). Returns the outputs (as floats).
std::vector<std::vector<float>> CheckAt(const runtime::Kernel& kernel, const Case& c, const EwProgram& p,
                                        const Dims& iter, int threads, const std::string& what) {
  std::vector<Dims> in_pad, out_pad, var_dims;
  for (const auto& s : c.inputs) in_pad.push_back(PaddedDims(s, iter));
  for (const auto& s : c.outputs) out_pad.push_back(PaddedDims(s, iter));
  EwLayout ref = CollapseLayout(iter, in_pad, out_pad);
  for (size_t k = 0; k < c.inputs.size(); ++k) ref.inputs[k].elem = c.inputs[k].elem;
  for (size_t k = 0; k < c.outputs.size(); ++k) ref.outputs[k].elem = c.outputs[k].elem;
  std::mt19937 rng(static_cast<uint32_t>(Numel(iter) * 7));  // the same inputs on every thread count
  std::vector<Buffer> bufs;
  std::vector<runtime::BufferView> views;
  std::vector<const float*> ref_in;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    bufs.push_back(MakeInput(c.inputs[k].elem, Numel(in_pad[k]), rng));
    var_dims.push_back(VarDims(c.inputs[k], iter));
  }
  std::vector<std::vector<float>> want;
  std::vector<float*> ref_out;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    bufs.push_back(MakeOutput(c.outputs[k].elem, Numel(out_pad[k])));
    var_dims.push_back(VarDims(c.outputs[k], iter));
    want.emplace_back(static_cast<size_t>(Numel(out_pad[k])), 0.0f);
  }
  for (size_t k = 0; k < c.inputs.size(); ++k) ref_in.push_back(bufs[k].values.data());
  for (auto& w : want) ref_out.push_back(w.data());
  RunReferenceFloat(p, ref, ref_in, ref_out);
  for (size_t k = 0; k < bufs.size(); ++k) views.push_back({bufs[k].data(), DataType::kFP32, &var_dims[k]});
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernel.Run(views.data());
  omp_set_num_threads(saved_threads);
  std::vector<std::vector<float>> outs;
  for (size_t o = 0; o < c.outputs.size(); ++o) {
    const Buffer& got = bufs[c.inputs.size() + o];
    outs.emplace_back();
    for (size_t i = 0; i < want[o].size(); ++i) outs.back().push_back(got.At(i));
    // A sum over dims that are 1 at this size is a copy for the reference
    // and 0 + x for the kernel made where they were not: -0 becomes +0.
    const bool sum = c.outputs[o].walks.find('0') != std::string::npos;
    for (size_t i = 0; i < want[o].size(); ++i) {
      const float g = got.At(i), w = want[o][i];
      EXPECT_TRUE(SameBits(g, w) || (sum && g == w)) << what << " out" << o << "[" << i << "] = " << g << ", want "
                                                     << w;
      if (testing::Test::HasFailure()) return outs;
    }
  }
  return outs;
}

// The runtime kernel the lowering would make for `c` at `iter`.
std::shared_ptr<const runtime::Kernel> MakeKernel(const Case& c, const EwProgram& p, const Dims& iter, Isa isa,
                                                  bool deterministic = false) {
  std::vector<Dims> in_pad, out_pad, var_dims;
  for (const auto& s : c.inputs) {
    in_pad.push_back(PaddedDims(s, iter));
    var_dims.push_back(VarDims(s, iter));
  }
  for (const auto& s : c.outputs) {
    out_pad.push_back(PaddedDims(s, iter));
    var_dims.push_back(VarDims(s, iter));
  }
  EwLayout l = CollapseLayout(iter, in_pad, out_pad);
  for (size_t k = 0; k < c.inputs.size(); ++k) l.inputs[k].elem = c.inputs[k].elem;
  for (size_t k = 0; k < c.outputs.size(); ++k) l.outputs[k].elem = c.outputs[k].elem;
  auto k = std::make_shared<FusedElementwiseKernel>(c.name, p, l, isa);
  k->set_deterministic(deterministic);
  k->Create();
  auto resizer = std::make_shared<const EwLayoutResizer>(iter, in_pad, out_pad, var_dims);
  return MakeEwRuntimeKernel(k, "test kernel over " + l.ToString(),
                             [resizer](const std::vector<Dims>& d, std::string* why) { return resizer->LayoutAt(d, why); });
}

std::vector<Dims> ArgDims(const Case& c, const Dims& iter) {
  std::vector<Dims> d;
  for (const auto& s : c.inputs) d.push_back(VarDims(s, iter));
  for (const auto& s : c.outputs) d.push_back(VarDims(s, iter));
  return d;
}

// Makes the kernel at sizes[0] and resizes it to every size (the first
// too), checking each against the reference.
void CheckSizes(const Case& c, const std::vector<Dims>& sizes, uint32_t seed) {
  const EwProgram p = RandomProgram(c.inputs.size(), c.outputs.size(), seed);
  for (Isa isa : Isas()) {
    const auto kernel = MakeKernel(c, p, sizes[0], isa);
    for (const Dims& iter : sizes) {
      const std::string what = c.name + " " + IsaName(isa) + " made at " + DimsToString(sizes[0]) + " run at " +
                               DimsToString(iter);
      std::string why;
      const auto resized = kernel->Resize(ArgDims(c, iter), &why);
      ASSERT_NE(resized, nullptr) << what << ": " << why;
      EXPECT_EQ(resized->code(), kernel->code()) << what << ": the code is shared";
      CheckAt(*resized, c, p, iter, 1, what);
    }
  }
}

const Case kFlat{"flat",
                 {{"1", EwElem::kF32}, {"1", EwElem::kBF16}, {"0", EwElem::kF32}, {"1", EwElem::kBool}},
                 {{"1", EwElem::kF32}, {"1", EwElem::kBF16}, {"1", EwElem::kBool}, {"0", EwElem::kF32}}};

TEST(EwResizeTest, FlatKernelAtEverySizeAroundTheVectors) {
  std::vector<Dims> sizes{{1000}};
  for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 33, 64, 65, 1001, 4099}) sizes.push_back({n});
  CheckSizes(kFlat, sizes, 1);
}

// A bias [C] (a var of lower rank), a [B, 1] column, and sums over rows
// (dim 0) and over the inner dim.
const Case kRows{"rows",
                 {{"11", EwElem::kF32}, {"01", EwElem::kF32, true}, {"10", EwElem::kBF16}, {"11", EwElem::kBool}},
                 {{"11", EwElem::kBF16}, {"01", EwElem::kF32}, {"10", EwElem::kF32}, {"11", EwElem::kBool}}};

TEST(EwResizeTest, RowsWithBroadcastsAndSums) {
  CheckSizes(kRows, {{64, 40}, {1, 40}, {3, 7}, {5, 1}, {1, 1}, {7, 16}, {9, 17}, {2, 33}, {3, 1001}, {64, 40}}, 2);
}

// No two dims merge: four loop levels, sums over dims 1 and 3 (inner) and
// over 0 and 2.
const Case kRank4{"rank4",
                  {{"1111", EwElem::kF32}, {"1010", EwElem::kBF16}, {"0101", EwElem::kBool}},
                  {{"1111", EwElem::kBF16}, {"1010", EwElem::kF32}, {"0101", EwElem::kF32}, {"1111", EwElem::kF32}}};

TEST(EwResizeTest, FourLoopLevels) {
  CheckSizes(kRank4, {{3, 5, 4, 9}, {2, 3, 2, 17}, {1, 1, 1, 1}, {4, 2, 3, 33}, {2, 7, 1, 3}, {1, 2, 1, 16}}, 3);
}

// Dims 1 and 2 merge (every operand walks both or neither); they stay one
// loop at other sizes, 1 included.
const Case kMerged{"merged",
                   {{"1111", EwElem::kF32}, {"0110", EwElem::kF32, true}},
                   {{"1111", EwElem::kF32}, {"0110", EwElem::kF32}}};

TEST(EwResizeTest, MergedDimsStayOneLoop) {
  CheckSizes(kMerged, {{3, 4, 5, 6}, {2, 1, 5, 7}, {2, 3, 1, 1}, {1, 1, 1, 17}, {5, 2, 3, 8}}, 4);
}

// More operands than GPRs: pointers and steps in the frame.
TEST(EwResizeTest, ManyOperandsKeepPointersInTheFrame) {
  Case c{"many", {}, {{"111", EwElem::kF32}, {"101", EwElem::kF32}, {"010", EwElem::kF32}}};
  const char* walks[] = {"111", "101", "011", "110", "100", "001"};
  for (int k = 0; k < 14; ++k) c.inputs.push_back({walks[k % 6], k % 3 == 2 ? EwElem::kBF16 : EwElem::kF32});
  CheckSizes(c, {{3, 4, 20}, {2, 5, 17}, {1, 1, 3}, {4, 1, 33}, {3, 4, 20}}, 8);
}

TEST(EwResizeTest, DeterministicSumsDoNotDependOnThreads) {
  const EwProgram p = RandomProgram(kRows.inputs.size(), kRows.outputs.size(), 5);
  for (Isa isa : Isas()) {
    const auto kernel = MakeKernel(kRows, p, {16, 24}, isa, /*deterministic=*/true);
    const Dims iter{6001, 24};  // large enough to run in chunks
    const auto resized = kernel->Resize(ArgDims(kRows, iter), nullptr);
    ASSERT_NE(resized, nullptr);
    const std::string what = std::string("rows deterministic ") + IsaName(isa);
    const auto one = CheckAt(*resized, kRows, p, iter, 1, what);
    for (int threads : {2, 3}) {
      const auto more = CheckAt(*resized, kRows, p, iter, threads, what);
      ASSERT_EQ(more.size(), one.size());
      for (size_t o = 0; o < one.size(); ++o) {
        for (size_t i = 0; i < one[o].size(); ++i) {
          ASSERT_TRUE(SameBits(more[o][i], one[o][i])) << what << " threads " << threads << " out" << o << "[" << i << "]";
        }
      }
    }
  }
}

TEST(EwResizeTest, ResizesTheCodeCannotServeFailWithTheReason) {
  const EwProgram p = RandomProgram(kRows.inputs.size(), kRows.outputs.size(), 6);
  const auto at_batch1 = MakeKernel(kRows, p, {1, 40}, HostIsa());
  std::string why;
  EXPECT_EQ(at_batch1->Resize(ArgDims(kRows, {4, 40}), &why), nullptr);
  EXPECT_NE(why.find("was 1 (no loop)"), std::string::npos) << why;

  const auto kernel = MakeKernel(kRows, p, {64, 40}, HostIsa());
  std::vector<Dims> dims = ArgDims(kRows, {8, 40});
  dims[2] = {8, 40};  // the [B, 1] column is not broadcast any more
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_NE(why.find("input 2"), std::string::npos) << why;
  dims = ArgDims(kRows, {8, 40});
  dims[0] = {8, 40, 1};
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_NE(why.find("rank"), std::string::npos) << why;
  dims = ArgDims(kRows, {8, 40});
  dims[4] = {9, 40};  // outputs disagree with inputs on the rows
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_NE(why.find("disagree"), std::string::npos) << why;
}

TEST(EwResizeTest, AOneElementVarThatGrowsIsAmbiguous) {
  const Case c{"scalar", {{"11", EwElem::kF32}, {"00", EwElem::kF32, true}}, {{"11", EwElem::kF32}}};
  const EwProgram p = RandomProgram(2, 1, 7);
  const auto kernel = MakeKernel(c, p, {4, 40}, HostIsa());
  std::vector<Dims> dims = ArgDims(c, {5, 3});
  ASSERT_NE(kernel->Resize(dims, nullptr), nullptr);  // still [1]
  dims[1] = {3};
  std::string why;
  EXPECT_EQ(kernel->Resize(dims, &why), nullptr);
  EXPECT_NE(why.find("ambiguous"), std::string::npos) << why;
}

// The kernel's own guard: a layout whose sums differ from the code's.
TEST(EwResizeTest, ResizedRefusesLayoutsOfAnotherStructure) {
  EwProgram p;
  p.Store(0, p.Load(0));
  EwLayout l;
  l.rank = 2;
  l.dims = {{1, 8, 1, 1}};
  l.inputs.resize(1);
  l.outputs.resize(1);
  l.inputs[0].strides = {{8, 1, 0, 0}};
  l.outputs[0].strides = {{0, 1, 0, 0}};  // dim 0 has size 1: a copy, not a sum
  FusedElementwiseKernel k("guard", p, l, HostIsa());
  k.Create();
  EwLayout bigger = l;
  bigger.dims[0] = 4;
  std::string why;
  EXPECT_EQ(k.Resized(bigger, &why), nullptr);
  EXPECT_NE(why.find("would be a sum"), std::string::npos) << why;
  EwLayout other = l;
  other.inputs[0].strides[0] = 0;
  EXPECT_EQ(k.Resized(other, &why), nullptr);
  EXPECT_NE(why.find("stride 0 is 0 in one only"), std::string::npos) << why;
  EwLayout wider = l;
  wider.dims[1] = 19;
  const auto r = k.Resized(wider, &why);
  ASSERT_NE(r, nullptr) << why;
  std::vector<float> in(19), out(19, -1.0f);
  for (int i = 0; i < 19; ++i) in[static_cast<size_t>(i)] = static_cast<float>(i);
  r->Run({in.data()}, {out.data()});
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace kiln::jit
