// bool operands of the generated elementwise kernels and the comparisons
// (compiler/codegen/ew_codegen_bool.cc): loads, stores and compares on the AVX2 and
// (when the CPU has it) AVX-512 paths, on sizes around the vector widths and
// the unrolled loop, masked tails, strided and broadcast operands,
// multi-threaded runs and spilled pointers, against the reference
// interpreter bit for bit. Every output has guard elements after it that a
// store beyond its end would change, and a test puts operands against an
// inaccessible page, which a load beyond their end would touch.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "framework/error.h"
#include "framework/ew/ew_reference.h"
#include "tests/ew_codegen_test_util.h"

namespace kiln::jit {
namespace {

using ew_test::Isas;
using ew_test::SameBits;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kGuard = 64;  // elements after each output that must stay as they were
constexpr float kGuardF32 = 12345.0f;
constexpr uint8_t kGuardByte = 0xcd;
// Sizes around the 8 and 16 lanes and the unrolled loop (4 x 16), and a long one.
constexpr int64_t kSizes[] = {1, 15, 16, 17, 63, 64, 65, 4099};

// An operand in both forms: floats for the reference (a bool's 0.0/1.0) and,
// for a bool operand, the bytes the kernel reads or writes.
struct Operand {
  EwElem elem = EwElem::kF32;
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  void* data() { return elem == EwElem::kBool ? static_cast<void*>(bytes.data()) : values.data(); }
};

// f32 values from a small set, so that comparisons see ties, signed zeros,
// infinities and NaNs often.
Operand MakeInput(EwElem elem, int64_t n, std::mt19937& rng) {
  static const float kValues[] = {-2.0f, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 2.0f, kInf, -kInf, kNan, 1e-40f};
  std::uniform_int_distribution<int> pick(0, 10), bit(0, 1);
  Operand op;
  op.elem = elem;
  for (int64_t i = 0; i < n; ++i) {
    if (elem == EwElem::kBool) {
      op.bytes.push_back(static_cast<uint8_t>(bit(rng)));
      op.values.push_back(op.bytes.back());
    } else {
      op.values.push_back(kValues[pick(rng)]);
    }
  }
  return op;
}

Operand MakeOutput(EwElem elem, int64_t n) {
  Operand op;
  op.elem = elem;
  op.values.assign(static_cast<size_t>(n), -7.0f);  // an element not written shows
  op.values.resize(static_cast<size_t>(n + kGuard), kGuardF32);
  if (elem == EwElem::kBool) {
    op.bytes.assign(static_cast<size_t>(n), 0xab);
    op.bytes.resize(static_cast<size_t>(n + kGuard), kGuardByte);
  }
  return op;
}

// Runs `p` over `l` (operands given the elems) on `isa` and checks every
// output and its guard against the float reference.
void Check(const EwProgram& p, EwLayout l, const std::vector<EwElem>& in_elems, const std::vector<EwElem>& out_elems,
           Isa isa, int threads, const std::string& what) {
  for (size_t k = 0; k < in_elems.size(); ++k) l.inputs[k].elem = in_elems[k];
  for (size_t k = 0; k < out_elems.size(); ++k) l.outputs[k].elem = out_elems[k];
  const std::string where = what + " " + IsaName(isa) + " " + l.ToString() + " threads " + std::to_string(threads);
  std::mt19937 rng(static_cast<uint32_t>(l.numel() * 13 + threads));
  std::vector<Operand> in, out;
  std::vector<std::vector<float>> want;
  for (size_t k = 0; k < l.inputs.size(); ++k) {
    in.push_back(MakeInput(l.inputs[k].elem, l.InputExtent(static_cast<int>(k)), rng));
  }
  for (size_t k = 0; k < l.outputs.size(); ++k) {
    const int64_t n = l.OutputExtent(static_cast<int>(k));
    out.push_back(MakeOutput(l.outputs[k].elem, n));
    want.emplace_back(static_cast<size_t>(n), 0.0f);
  }
  std::vector<const float*> ref_in;
  for (auto& o : in) ref_in.push_back(o.values.data());
  std::vector<float*> ref_out;
  for (auto& w : want) ref_out.push_back(w.data());
  RunReferenceFloat(p, l, ref_in, ref_out);

  FusedElementwiseKernel k("bool_test", p, l, isa);
  k.Create();
  std::vector<const void*> ip;
  for (auto& o : in) ip.push_back(o.data());
  std::vector<void*> op;
  for (auto& o : out) op.push_back(o.data());
  k.Run(ip.data(), op.data(), threads);
  for (size_t o = 0; o < out.size(); ++o) {
    const size_t n = want[o].size();
    for (size_t i = 0; i < n + kGuard; ++i) {
      const bool guard = i >= n;
      if (out[o].elem == EwElem::kBool) {
        const uint8_t expect = guard ? kGuardByte : (want[o][i] != 0.0f ? 1 : 0);
        ASSERT_EQ(out[o].bytes[i], expect) << where << ": out" << o << (guard ? " guard" : "") << "[" << i << "]";
      } else {
        const float expect = guard ? kGuardF32 : want[o][i];
        ASSERT_TRUE(SameBits(out[o].values[i], expect))
            << where << ": out" << o << (guard ? " guard" : "") << "[" << i << "] = " << out[o].values[i] << ", want "
            << expect;
      }
    }
  }
}

const EwOp kComparisons[] = {EwOp::kLt, EwOp::kLe, EwOp::kGt, EwOp::kGe, EwOp::kEq, EwOp::kNe};

EwValue Cmp(EwProgram& p, EwOp op, EwValue a, EwValue b) {
  switch (op) {
    case EwOp::kLt: return p.Lt(a, b);
    case EwOp::kLe: return p.Le(a, b);
    case EwOp::kGt: return p.Gt(a, b);
    case EwOp::kGe: return p.Ge(a, b);
    case EwOp::kEq: return p.Eq(a, b);
    default: return p.Ne(a, b);
  }
}

// out0 (f32) = select(c, x, y), out1 (bool) = x > y, out2 (bool) = c,
// out3 (f32) = c + x <= y: bool in and out, a compare into each elem.
EwProgram MixedProgram() {
  EwProgram p;
  const EwValue c = p.Load(0), x = p.Load(1), y = p.Load(2);
  p.Store(0, p.Select(c, x, y));
  p.Store(1, p.Gt(x, y));
  p.Store(2, c);
  p.Store(3, p.Add(c, p.Le(x, y)));
  return p;
}
const std::vector<EwElem> kMixedIn = {EwElem::kBool, EwElem::kF32, EwElem::kF32};
const std::vector<EwElem> kMixedOut = {EwElem::kF32, EwElem::kBool, EwElem::kBool, EwElem::kF32};

// Every ordered pair of special values through each comparison, stored as
// f32 (1.0/0.0) and as bool: IEEE's answers (all false with a NaN but ne).
TEST(EwCodegenBoolTest, ComparisonsFollowIeeeOnEveryPairOfSpecialValues) {
  const std::vector<float> values = {-kInf, -2.5f, -1e-40f, -0.0f, 0.0f, 1e-40f, 1.0f, 3.4e38f, kInf, kNan};
  std::vector<float> xs, ys;
  for (float a : values) {
    for (float b : values) {
      xs.push_back(a);
      ys.push_back(b);
    }
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  for (Isa isa : Isas()) {
    for (EwOp op : kComparisons) {
      EwProgram p;
      const EwValue r = Cmp(p, op, p.Load(0), p.Load(1));
      p.Store(0, r);
      p.Store(1, r);
      EwLayout l = CollapseLayout({n}, {{n}, {n}}, {{n}, {n}});
      l.outputs[1].elem = EwElem::kBool;
      FusedElementwiseKernel k("cmp", p, l, isa);
      k.Create();
      std::vector<float> f32(static_cast<size_t>(n), -7.0f);
      std::vector<uint8_t> b8(static_cast<size_t>(n), 0xab);
      const void* in[] = {xs.data(), ys.data()};
      void* outs[] = {f32.data(), b8.data()};
      k.Run(in, outs, 1);
      for (int64_t i = 0; i < n; ++i) {
        const float a = xs[i], b = ys[i];
        const bool want = op == EwOp::kLt ? a < b : op == EwOp::kLe ? a <= b : op == EwOp::kGt ? a > b
                        : op == EwOp::kGe ? a >= b : op == EwOp::kEq ? a == b : a != b;
        EXPECT_EQ(f32[i], want ? 1.0f : 0.0f) << EwOpName(op) << "(" << a << ", " << b << ") " << IsaName(isa);
        EXPECT_EQ(b8[i], want ? 1 : 0) << EwOpName(op) << "(" << a << ", " << b << ") " << IsaName(isa);
      }
    }
  }
}

TEST(EwCodegenBoolTest, EachComparisonMatchesTheReferenceWithTails) {
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      for (EwOp op : kComparisons) {
        EwProgram p;
        const EwValue r = Cmp(p, op, p.Load(0), p.Load(1));
        p.Store(0, r);
        p.Store(1, r);
        const EwLayout l = CollapseLayout({n}, {{n}, {n}}, {{n}, {n}});
        Check(p, l, {EwElem::kF32, EwElem::kF32}, {EwElem::kF32, EwElem::kBool}, isa, 1, EwOpName(op));
      }
    }
  }
}

TEST(EwCodegenBoolTest, FlatRunsWithTailsMatchTheReferenceBitForBit) {
  const EwProgram p = MixedProgram();
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      const EwLayout l = CollapseLayout({n}, {{n}, {n}, {n}}, {{n}, {n}, {n}, {n}});
      Check(p, l, kMixedIn, kMixedOut, isa, 1, "flat");
    }
  }
}

// Rows with a constant tail (rank 2+), a bool row broadcast down, a bool
// column broadcast across (inner stride 0), rank 3 and 4.
TEST(EwCodegenBoolTest, StridedAndBroadcastOperandsWithTails) {
  const EwProgram p = MixedProgram();
  struct Shape {
    Dims iter, c, y;
  };
  std::vector<Shape> shapes;
  for (int64_t n : kSizes) shapes.push_back({{3, n}, {3, n}, {3, n}});
  const Shape more[] = {
      {{5, 17}, {1, 17}, {5, 17}},            // a bool row broadcast down
      {{4, 19}, {4, 1}, {4, 1}},              // a bool and an f32 column broadcast across
      {{7, 65}, {7, 1}, {1, 65}},
      {{2, 3, 21}, {2, 1, 21}, {2, 3, 1}},    // rank 3
      {{3, 5, 2, 9}, {1, 5, 1, 9}, {3, 1, 2, 9}},
  };
  shapes.insert(shapes.end(), std::begin(more), std::end(more));
  for (Isa isa : Isas()) {
    for (const Shape& s : shapes) {
      const EwLayout l = CollapseLayout(s.iter, {s.c, s.iter, s.y}, {s.iter, s.iter, s.iter, s.iter});
      Check(p, l, kMixedIn, kMixedOut, isa, 1, "strided");
    }
  }
}

// f32 -> bool stores value != 0 (NaN true, -0 false); bool -> f32 loads 0/1.
TEST(EwCodegenBoolTest, CastsBetweenF32AndBool) {
  EwProgram p;
  p.Store(0, p.Load(0));
  p.Store(1, p.Load(1));
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      const EwLayout l = CollapseLayout({n}, {{n}, {n}}, {{n}, {n}});
      Check(p, l, {EwElem::kF32, EwElem::kBool}, {EwElem::kBool, EwElem::kF32}, isa, 1, "cast");
      Check(p, l, {EwElem::kBool, EwElem::kBool}, {EwElem::kBool, EwElem::kBool}, isa, 1, "copy");
    }
  }
}

TEST(EwCodegenBoolTest, MultiThreadedRunsSplitBoolOperandsLikeF32Ones) {
  const EwProgram p = MixedProgram();
  for (Isa isa : Isas()) {
    for (int64_t n : {int64_t{300001}, int64_t{1} << 18}) {
      const EwLayout l = CollapseLayout({n}, {{n}, {n}, {n}}, {{n}, {n}, {n}, {n}});
      Check(p, l, kMixedIn, kMixedOut, isa, 2, "threads");
    }
    const Dims it = {1031, 257};
    const EwLayout l2 = CollapseLayout(it, {{1, 257}, it, {1031, 1}}, {it, it, it, it});
    Check(p, l2, kMixedIn, kMixedOut, isa, 2, "threads");
  }
}

// More operands than the generator has pointer registers (12): the rest live
// in stack slots and are loaded through rax, bool ones too.
TEST(EwCodegenBoolTest, SpilledPointersOfBoolOperands) {
  constexpr int kInputs = 14;
  EwProgram p;
  EwValue sum = p.Load(0);
  for (int i = 1; i < kInputs; ++i) sum = p.Add(sum, p.Load(i));
  p.Store(0, p.Gt(sum, p.Const(1.0f)));
  p.Store(1, p.Mul(sum, p.Const(0.5f)));
  std::vector<EwElem> in_elems;
  for (int i = 0; i < kInputs; ++i) in_elems.push_back(i % 2 ? EwElem::kBool : EwElem::kF32);
  for (Isa isa : Isas()) {
    for (int64_t n : {5, 37, 1000}) {
      const EwLayout l = CollapseLayout({3, n}, std::vector<Dims>(kInputs, Dims{3, n}), {{3, n}, {3, n}});
      Check(p, l, in_elems, {EwElem::kBool, EwElem::kF32}, isa, 1, "spilled");
    }
  }
}

// `bytes` bytes that end where an inaccessible page begins.
class EdgeBuffer {
 public:
  explicit EdgeBuffer(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + page - 1) / page * page + page;
    base_ = static_cast<uint8_t*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    KILN_CHECK(base_ != MAP_FAILED, "mmap failed");
    KILN_CHECK(mprotect(base_ + size_ - page, page, PROT_NONE) == 0, "mprotect failed");
    data_ = base_ + size_ - page - bytes;
  }
  ~EdgeBuffer() { munmap(base_, size_); }
  EdgeBuffer(const EdgeBuffer&) = delete;
  EdgeBuffer& operator=(const EdgeBuffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Masked tails read and write nothing past an operand's end: a bool input
// and a bool output that end at an inaccessible page (a load or store
// beyond them faults), in one row and in rows of a rank-2 space.
TEST(EwCodegenBoolTest, TailsTouchNothingPastTheEnd) {
  EwProgram p;
  const EwValue c = p.Load(0);
  p.Store(0, p.Select(c, p.Const(2.0f), p.Const(-1.0f)));
  p.Store(1, p.Eq(c, p.Const(0.0f)));
  for (Isa isa : Isas()) {
    for (int64_t n : kSizes) {
      for (const Dims& dims : {Dims{n}, Dims{3, n}}) {
        const EwLayout l = CollapseLayout(dims, {dims}, {dims, dims});
        const int64_t total = Numel(dims);
        EdgeBuffer in(static_cast<size_t>(total)), out(static_cast<size_t>(total));
        std::vector<float> f32(static_cast<size_t>(total));
        for (int64_t i = 0; i < total; ++i) in.data()[i] = static_cast<uint8_t>(i % 3 == 0);
        EwLayout bl = l;
        bl.inputs[0].elem = EwElem::kBool;
        bl.outputs[1].elem = EwElem::kBool;
        FusedElementwiseKernel k("edge", p, bl, isa);
        k.Create();
        const void* ins[] = {in.data()};
        void* outs[] = {f32.data(), out.data()};
        k.Run(ins, outs, 1);
        for (int64_t i = 0; i < total; ++i) {
          ASSERT_EQ(f32[i], i % 3 == 0 ? 2.0f : -1.0f) << IsaName(isa) << " " << DimsToString(dims) << " [" << i << "]";
          ASSERT_EQ(out.data()[i], i % 3 == 0 ? 0 : 1) << IsaName(isa) << " " << DimsToString(dims) << " [" << i << "]";
        }
      }
    }
  }
}

TEST(EwCodegenBoolTest, AReductionOutputCannotBeBool) {
  EwLayout l = CollapseLayout({4, 8}, {{4, 8}}, {{1, 8}});
  l.outputs[0].elem = EwElem::kBool;
  try {
    l.Validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("out0 is a reduction and bool"), std::string::npos) << e.what();
  }
  EXPECT_EQ(EwElemBytes(EwElem::kBool), 1);
  l.outputs[0].strides = {8, 1};
  EXPECT_EQ(l.ToString(), "dims=[4,8] in0=[8,1] out0=[8,1]:bool");
}

}  // namespace
}  // namespace kiln::jit
