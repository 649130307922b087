// bf16 operands of the generated elementwise kernels: the scalar rounding
// rules (framework/bf16.h), then loads and stores on every ISA and rounding
// path this CPU has, on odd sizes and tails, broadcasts, special values and
// multi-threaded runs, against the reference interpreter bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "framework/bf16.h"
#include "framework/error.h"
#include "framework/ew/ew_reference.h"

namespace kiln::jit {
namespace {

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

TEST(Bf16Test, RoundsToNearestEvenWithTheInstructionsSpecialCases) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f807fffu)), 0x3f80);  // below it
  EXPECT_EQ(FloatToBf16Bits(-2.5f), 0xc020);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00000001u)), 0x0000);              // denormal: zero
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x807fffffu)), 0x8000);              // of its sign
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f800001u)), 0x7fc0);  // signalling NaN: quiet
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xffc12345u)), 0xffc1);  // sign and top payload kept
  EXPECT_EQ(Bits(Bf16BitsToFloat(0xc020)), 0xc0200000u);
  EXPECT_EQ(RoundThroughBf16(3.0f), 3.0f);
}

struct Path {
  Isa isa;
  Bf16Store store;
  std::string Name() const { return std::string(IsaName(isa)) + "/" + Bf16StoreName(store); }
};

std::vector<Path> Paths() {
  std::vector<Path> paths;
  if (IsaSupported(Isa::kAvx2)) paths.push_back({Isa::kAvx2, Bf16Store::kIntegerSequence});
  if (IsaSupported(Isa::kAvx512)) {
    paths.push_back({Isa::kAvx512, Bf16Store::kIntegerSequence});
    if (HasAvx512Bf16()) {
      paths.push_back({Isa::kAvx512, Bf16Store::kVcvtneps2bf16});
    } else {
      std::printf("[ note ] no AVX512_BF16: the vcvtneps2bf16 path is not tested\n");
    }
  } else {
    std::printf("[ note ] AVX-512 not supported by this CPU: its paths are not tested\n");
  }
  return paths;
}

// An operand's data in both forms: floats for the reference (a bf16
// operand's values widened) and the bytes the kernel reads or writes.
struct Operand {
  EwElem elem = EwElem::kF32;
  std::vector<float> values;
  std::vector<uint16_t> bf16;
  void* data() { return elem == EwElem::kBF16 ? static_cast<void*>(bf16.data()) : values.data(); }
};

// Random values with some specials mixed in: ties, denormals, infinities,
// NaNs, values that round up to infinity.
std::vector<float> Values(int64_t n, std::mt19937& rng, bool specials) {
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  const float special[] = {FromBits(0x3f808000u), FromBits(0x3f818000u), FromBits(0x00000123u),
                           FromBits(0x80400000u), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), FromBits(0x7fc00001u),
                           FromBits(0xff812345u), std::numeric_limits<float>::max(), -0.0f};
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const int p = pick(rng);
    x = specials && p < 10 && pick(rng) < 4 ? special[p] : dist(rng);
  }
  return v;
}

Operand MakeInput(EwElem elem, int64_t n, std::mt19937& rng, bool specials) {
  Operand op;
  op.elem = elem;
  op.values = Values(n, rng, specials);
  if (elem == EwElem::kBF16) {
    for (float& x : op.values) {
      op.bf16.push_back(FloatToBf16Bits(x));
      x = Bf16BitsToFloat(op.bf16.back());
    }
  }
  return op;
}

// Runs `p` over `l` on the path and checks every output against the float
// reference bit for bit (NaNs too: both follow framework/bf16.h).
void Check(const EwProgram& p, EwLayout l, const std::vector<EwElem>& in_elems, const std::vector<EwElem>& out_elems,
           const Path& path, int threads, bool specials, const std::string& what) {
  for (size_t k = 0; k < in_elems.size(); ++k) l.inputs[k].elem = in_elems[k];
  for (size_t k = 0; k < out_elems.size(); ++k) l.outputs[k].elem = out_elems[k];
  std::mt19937 rng(static_cast<uint32_t>(l.numel() * 7 + threads));
  std::vector<Operand> in, out;
  for (size_t k = 0; k < l.inputs.size(); ++k) {
    in.push_back(MakeInput(l.inputs[k].elem, l.InputExtent(static_cast<int>(k)), rng, specials));
  }
  std::vector<std::vector<float>> want;
  for (size_t k = 0; k < l.outputs.size(); ++k) {
    const int64_t n = l.OutputExtent(static_cast<int>(k));
    Operand o;
    o.elem = l.outputs[k].elem;
    o.values.assign(static_cast<size_t>(n), -7.0f);
    o.bf16.assign(static_cast<size_t>(n), 0xdead);  // an element not written shows
    out.push_back(std::move(o));
    want.emplace_back(static_cast<size_t>(n), 0.0f);
  }
  std::vector<const float*> ref_in;
  for (auto& o : in) ref_in.push_back(o.values.data());
  std::vector<float*> ref_out;
  for (auto& w : want) ref_out.push_back(w.data());
  RunReferenceFloat(p, l, ref_in, ref_out);

  FusedElementwiseKernel k("bf16_test", p, l, path.isa);
  k.set_bf16_store(path.store);
  k.Create();
  std::vector<const void*> ip;
  for (auto& o : in) ip.push_back(o.data());
  std::vector<void*> op;
  for (auto& o : out) op.push_back(o.data());
  k.Run(ip.data(), op.data(), threads);
  for (size_t k2 = 0; k2 < out.size(); ++k2) {
    for (size_t i = 0; i < want[k2].size(); ++i) {
      const float got = out[k2].elem == EwElem::kBF16 ? Bf16BitsToFloat(out[k2].bf16[i]) : out[k2].values[i];
      ASSERT_EQ(Bits(got), Bits(want[k2][i]))
          << what << " " << path.Name() << " " << l.ToString() << " threads " << threads << ": out" << k2 << "[" << i
          << "] = " << got << ", want " << want[k2][i];
    }
  }
}

// out0 (bf16) = x * y + 0.25 and out1 (f32) = x - y, for bf16 y.
EwProgram MixedProgram() {
  EwProgram p;
  const EwValue x = p.Load(0), y = p.Load(1);
  p.Store(0, p.Add(p.Mul(x, y), p.Const(0.25f)));
  p.Store(1, p.Sub(x, y));
  return p;
}

TEST(EwCodegenBf16Test, FlatRunsWithTailsMatchTheReferenceBitForBit) {
  const EwProgram p = MixedProgram();
  for (const Path& path : Paths()) {
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 1000, 4099}) {
      const EwLayout l = CollapseLayout({n}, {{n}, {n}}, {{n}, {n}});
      Check(p, l, {EwElem::kF32, EwElem::kBF16}, {EwElem::kBF16, EwElem::kF32}, path, 1, false, "flat");
    }
  }
}

TEST(EwCodegenBf16Test, SpecialValuesRoundAndWidenAsTheScalarRules) {
  EwProgram cast;
  cast.Store(0, cast.Load(0));
  cast.Store(1, cast.Load(1));
  for (const Path& path : Paths()) {
    for (int64_t n : {13, 257, 1029}) {
      const EwLayout l = CollapseLayout({n}, {{n}, {n}}, {{n}, {n}});
      // f32 -> bf16 rounds, bf16 -> f32 widens.
      Check(cast, l, {EwElem::kF32, EwElem::kBF16}, {EwElem::kBF16, EwElem::kF32}, path, 1, true, "cast");
    }
  }
}

TEST(EwCodegenBf16Test, StridedAndBroadcastOperandsWithTails) {
  const EwProgram p = MixedProgram();
  struct Shape {
    Dims iter, x, y;
  };
  const Shape shapes[] = {
      {{3, 37}, {3, 37}, {3, 37}},          // rows with a tail
      {{5, 16}, {5, 16}, {1, 16}},          // a bf16 row broadcast down
      {{4, 19}, {4, 19}, {4, 1}},           // a bf16 column broadcast across (inner stride 0)
      {{2, 3, 21}, {2, 3, 21}, {2, 1, 21}}, // rank 3
      {{3, 5, 2, 9}, {3, 5, 2, 9}, {1, 5, 1, 9}},
  };
  for (const Path& path : Paths()) {
    for (const Shape& s : shapes) {
      const EwLayout l = CollapseLayout(s.iter, {s.x, s.y}, {s.iter, s.iter});
      Check(p, l, {EwElem::kF32, EwElem::kBF16}, {EwElem::kBF16, EwElem::kF32}, path, 1, false, "strided");
      Check(p, l, {EwElem::kBF16, EwElem::kBF16}, {EwElem::kBF16, EwElem::kBF16}, path, 1, false, "all bf16");
    }
  }
}

TEST(EwCodegenBf16Test, MultiThreadedRunsSplitBf16OperandsLikeF32Ones) {
  const EwProgram p = MixedProgram();
  for (const Path& path : Paths()) {
    for (int64_t n : {int64_t{300001}, int64_t{1} << 18}) {
      const EwLayout l = CollapseLayout({n}, {{n}, {n}}, {{n}, {n}});
      Check(p, l, {EwElem::kF32, EwElem::kBF16}, {EwElem::kBF16, EwElem::kF32}, path, 2, false, "threads");
    }
    const EwLayout l2 = CollapseLayout({1031, 257}, {{1031, 257}, {1, 257}}, {{1031, 257}, {1031, 257}});
    Check(p, l2, {EwElem::kBF16, EwElem::kBF16}, {EwElem::kBF16, EwElem::kF32}, path, 2, false, "threads");
  }
}

// More operands than the generator has pointer registers (12): the rest
// live in stack slots and are loaded through rax, bf16 ones too.
TEST(EwCodegenBf16Test, SpilledPointersOfBf16Operands) {
  constexpr int kInputs = 14;
  EwProgram p;
  EwValue sum = p.Load(0);
  for (int i = 1; i < kInputs; ++i) sum = p.Add(sum, p.Load(i));
  p.Store(0, sum);
  p.Store(1, p.Mul(sum, p.Const(0.5f)));
  std::vector<EwElem> in_elems;
  for (int i = 0; i < kInputs; ++i) in_elems.push_back(i % 2 ? EwElem::kBF16 : EwElem::kF32);
  for (const Path& path : Paths()) {
    for (int64_t n : {5, 37, 1000}) {
      const EwLayout l = CollapseLayout({3, n}, std::vector<Dims>(kInputs, Dims{3, n}), {{3, n}, {3, n}});
      Check(p, l, in_elems, {EwElem::kBF16, EwElem::kF32}, path, 1, false, "spilled");
      Check(p, l, in_elems, {EwElem::kF32, EwElem::kBF16}, path, 1, false, "spilled");
    }
  }
}

TEST(EwCodegenBf16Test, AReductionOutputCannotBeBf16) {
  EwProgram p;
  p.Store(0, p.Load(0));
  EwLayout l = CollapseLayout({4, 8}, {{4, 8}}, {{1, 8}});
  l.outputs[0].elem = EwElem::kBF16;
  try {
    l.Validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("out0 is a reduction and bf16"), std::string::npos) << e.what();
  }
}

TEST(EwCodegenBf16Test, TheInstructionIsRefusedWhereTheCpuLacksIt) {
  EwProgram p;
  p.Store(0, p.Load(0));
  EwLayout l = CollapseLayout({8}, {{8}}, {{8}});
  l.outputs[0].elem = EwElem::kBF16;
  FusedElementwiseKernel k("refused", p, l, Isa::kAvx2);
  k.set_bf16_store(Bf16Store::kVcvtneps2bf16);
  try {
    k.Create();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("vcvtneps2bf16 needs AVX-512 with AVX512_BF16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::jit
