// The Xbyak generator of fused elementwise kernels (AVX-512 and AVX2) and the
// vector math it expands inline.
//
// Loop structure (rank r, inner dim n = dims[r-1], W = 16 zmm / 8 ymm lanes):
//   for each row (odometer over dims 0..r-2, dim 0 in [begin, end)):
//     zero inner-reduction accumulators
//     for j in blocks of U*W: body x U      (U = 4/2/1 by body size)
//     for j in blocks of W:   body
//     tail (n % W lanes):     body, masked (k1 / vmaskmovps)
//     add accumulator sums to their outputs
//   A rank-1 layout is one row of end-begin elements, counted at run time.
// Every operand has a row pointer (in a GPR, or a stack slot when more than 12
// are live); rows advance by constant per-level deltas.
//
// Vector registers: T0..T5 scratch (vmm0-5), then one accumulator per
// inner-reduction output, then the allocator's pool.
//
// Math (float32, measured against double on dense sweeps of [-110,110] and
// random magnitudes 1e-40..1e2, see ew_codegen_test; both ISAs give the same bits):
//  exp: clamp x to [-104, 89] (exp underflows to 0 / overflows to inf beyond;
//       NaN kept), n = rint(x log2e), Cody-Waite r = x - n*C1 - n*C2 with
//       C1 = 0.693359375 (exact in 9 bits) and C2 = ln2 - C1, |r| <= 0.347;
//       e^r by a degree-6 Chebyshev fit (abs error 1.95e-9 on [-ln2/2, ln2/2]);
//       scaled by 2^(n>>1) * 2^(n - n>>1) built in the exponent bits, so results
//       down to the subnormals and up to overflow round once.
//       Measured: <= 1.05 ulp.
//  tanh: |x| < 0.625: x + x^3 P(x^2), P a degree-5 Chebyshev fit of
//       (tanh(t)-t)/t^3 in t^2 (abs error 1.6e-9); otherwise 1 - 2/(e^{2|x|}+1)
//       (saturates to 1 for |x| > 9.01 and for inf); sign copied from x.
//       Measured: <= 1.32 ulp, abs <= 7.9e-8.
//  sigmoid: 1 / (1 + e^{-x}); e^{-x} = inf for x < -89 gives 0, tiny values
//       keep their absolute accuracy. Measured: abs <= 8.9e-8, <= 2.2 ulp.
//  erf/erfc: |x| < 0.75: erf = x P(x^2), P a degree-5 Chebyshev fit of
//       erf(t)/t in t^2 (abs error 1.5e-9); otherwise erfc(|x|) =
//       e^{-x^2} R(2/(2+|x|)) with R a degree-9 Chebyshev fit of
//       erfc(x) e^{x^2} in t = 2/(2+x) for x in [0.75, 10.5] (relative error
//       5e-9), |x| clamped to 10.5 (erfc underflows before), and e^{-x^2}
//       corrected for the rounding of x^2 (e^{-hi-lo} ~ e^{-hi}(1-lo));
//       erf = sign(x)(1 - erfc(|x|)), erfc(x<0) = 2 - erfc(|x|).
//       Measured: erf <= 2.4 ulp, abs <= 1.04e-7; erfc abs <= 1.58e-7
//       (4.3 ulp near |x| = 0.6, where erfc ~ 0.4 carries 1 - erf's rounding).
// (Figures from the test sweep of 2.8M points: every error is at most 0.33
// of the contract 2e-7 + 4 ulp of the double result.)
// The fits are Chebyshev interpolants (near-minimax) computed at 40 digits
// with mpmath.chebyfit over the stated intervals, rounded to float.
#include <cmath>
#include <cstring>
#include <map>
#include <type_traits>

#include "compiler/ew_codegen_plan.h"
#include "compiler/jit_kernel.h"
#include "framework/error.h"

namespace kiln {
namespace compiler {
namespace {

using Xbyak::Address;
using Xbyak::Operand;
using Xbyak::Reg64;

// Fitted coefficients, highest degree first (see the header comment).
constexpr float kExpPoly[] = {0.0013941108433972674f, 0.008375126398153335f, 0.04166635289677516f,
                              0.16666415514653277f,   0.5000000047117757f,   1.000000037716214f,
                              1.0f};
constexpr float kTanhPoly[] = {0.002292744816178142f, -0.008343945515839153f, 0.02176891865102821f,
                               -0.053959259577204544f, 0.1333330355691574f,   -0.3333333317214036f};
constexpr float kErfPoly[] = {-0.0006756479568680047f, 0.005115332112532226f, -0.026835114568609705f,
                              0.11283386538414544f,    -0.37612619469437675f, 1.1283791655787516f};
constexpr float kErfcPoly[] = {-0.07725671357486187f, 0.36289463470950356f,  -0.6315819581926175f,
                               0.4270148201158337f,   -0.12098381366407872f, 0.24059128202483931f,
                               0.23348723205283425f,  0.2838560420528134f,   0.2819611726234992f,
                               4.4269131809241094e-06f};
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpLo = -104.0f;
constexpr float kExpHi = 89.0f;
constexpr float kTanhSmall = 0.625f;
constexpr float kErfSmall = 0.75f;
constexpr float kErfcClamp = 10.5f;
constexpr uint32_t kSignBit = 0x80000000u;
constexpr uint32_t kAbsMask = 0x7fffffffu;

constexpr int kCmpLtOq = 0x11;
constexpr int kCmpGtOq = 0x1e;

// Stack frame (bytes from rsp).
constexpr int kFrameIdx = 0;        // outer indices, 8 bytes each
constexpr int kFrameEnd = 32;       // dim-0 end
constexpr int kFrameBoundU = 40;    // rank 1: bytes covered by the unrolled loop
constexpr int kFrameBound1 = 48;    // rank 1: bytes covered by full vectors
constexpr int kFrameRem = 56;       // rank 1: tail lanes
constexpr int kFrameArgs = 64;      // the EwKernelArgs pointer
constexpr int kFrameMask = 96;      // AVX2: current tail mask (32 bytes)
constexpr int kFrameMaskTab = 128;  // AVX2 rank 1: 8 x ~0 then 8 x 0
constexpr int kFramePtrs = 192;     // row pointers that did not get a GPR

template <typename Vmm>
class EwGenerator : public JitKernel {
 public:
  static constexpr bool kAvx512 = std::is_same<Vmm, Xbyak::Zmm>::value;
  static constexpr int kW = kAvx512 ? 16 : 8;
  static constexpr int kVecBytes = kW * 4;

  EwGenerator(const std::string& name, const EwKernelPlan& plan)
      : JitKernel(name), plan_(plan), layout_(plan.layout) {}

 protected:
  void Generate() override;

 private:
  struct PtrLoc {
    bool used = false;
    bool in_reg = false;
    Reg64 reg = Reg64(0);
    int off = 0;
  };

  Vmm T(int i) const { return Vmm(i); }
  Vmm Acc(int a) const { return Vmm(kEwTempRegs + a); }
  Vmm Pool(int r) const { return Vmm(kEwTempRegs + num_acc_ + r); }

  // Constants live in a table after the code, one 64-byte line each.
  Address C(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return CI(bits);
  }
  Address CI(uint32_t bits) {
    auto it = const_index_.find(bits);
    int idx;
    if (it == const_index_.end()) {
      idx = static_cast<int>(consts_.size());
      consts_.push_back(bits);
      const_index_.emplace(bits, idx);
    } else {
      idx = it->second;
    }
    return ptr[rip + l_consts_ + idx * 64];
  }

  bool InnerContiguous(const EwOperand& op) const {
    return op.strides[layout_.rank - 1] == 1 || layout_.dims[layout_.rank - 1] == 1;
  }
  const PtrLoc& InPtr(int k) const { return ptrs_[k]; }
  const PtrLoc& OutPtr(int k) const { return ptrs_[layout_.inputs.size() + k]; }
  // The register holding an operand's row pointer (rax for spilled pointers).
  Reg64 PtrReg(const PtrLoc& p) {
    if (p.in_reg) return p.reg;
    mov(rax, qword[rsp + p.off]);
    return rax;
  }

  void AssignPointers();
  void LoadPointers();
  void AddPtrDeltas(int level);
  void AddImm(const Operand& dst, int64_t v);
  void SetTailMaskConst(int rem);
  void SetTailMaskRuntime();  // rem in rax (1..W-1)
  void InnerLoop();
  void Body(int off, bool masked);
  void Compute(const EwStep& s, int off, bool masked);
  void LoadInput(const Vmm& d, int input, int off, bool masked);
  void StoreOutput(const Vmm& s, int output, int off, bool masked);
  void Epilogue();
  void EmitConstTable();
  int UnrollFactor() const;

  // ISA-neutral helpers.
  void And(const Vmm& d, const Vmm& a, const Operand& b) {
    if constexpr (kAvx512) vpandd(d, a, b); else vandps(d, a, b);
  }
  void Or(const Vmm& d, const Vmm& a, const Operand& b) {
    if constexpr (kAvx512) vpord(d, a, b); else vorps(d, a, b);
  }
  void Xor(const Vmm& d, const Vmm& a, const Operand& b) {
    if constexpr (kAvx512) vpxord(d, a, b); else vxorps(d, a, b);
  }
  // cond = a < b (ordered); AVX-512 keeps it in k2, AVX2 in `tmp`.
  void CmpLt(const Vmm& a, const Operand& b, const Vmm& tmp) {
    if constexpr (kAvx512) vcmpps(k2, a, b, kCmpLtOq); else vcmpps(tmp, a, b, kCmpLtOq);
  }
  // d = cond ? if_true : if_false.
  void Select(const Vmm& d, const Vmm& cond_tmp, const Vmm& if_true, const Vmm& if_false) {
    if constexpr (kAvx512) {
      (void)cond_tmp;
      vblendmps(d | k2, if_false, if_true);
    } else {
      vblendvps(d, if_false, if_true, cond_tmp);
    }
  }
  void Horner(const Vmm& acc, const Vmm& x, const float* coef, int n) {
    vmovups(acc, C(coef[0]));
    for (int i = 1; i < n; ++i) vfmadd213ps(acc, x, C(coef[i]));
  }

  // Math expansions. d may alias x; x must not be a scratch register except
  // where noted. Scratch used: Exp T0-T2, Sigmoid T0-T3, Tanh T0-T4,
  // ErfcTail/Erf/Erfc T0-T5.
  void Exp(const Vmm& d, const Vmm& x);
  void Sigmoid(const Vmm& d, const Vmm& x);
  void Tanh(const Vmm& d, const Vmm& x);
  void ErfcTail();  // T4 = erfc(T5) for T5 = |x|
  void Erf(const Vmm& d, const Vmm& x);
  void Erfc(const Vmm& d, const Vmm& x);
  void Fma(const Vmm& d, const Vmm& a, const Vmm& b, const Vmm& c);

  const EwKernelPlan& plan_;
  const EwLayout& layout_;
  int num_acc_ = 0;
  std::vector<int> acc_of_output_;
  std::vector<PtrLoc> ptrs_;
  int frame_bytes_ = 0;
  int unroll_ = 1;
  int spill_off_ = 0;
  Xbyak::Label l_consts_;
  std::vector<uint32_t> consts_;
  std::map<uint32_t, int> const_index_;
};

template <typename Vmm>
void EwGenerator<Vmm>::AssignPointers() {
  const size_t n_in = layout_.inputs.size();
  ptrs_.assign(n_in + layout_.outputs.size(), PtrLoc());
  for (const EwInstr& in : plan_.instrs) {
    if (in.op == EwOp::kLoad) ptrs_[in.operand].used = true;
  }
  for (size_t k = 0; k < layout_.outputs.size(); ++k) ptrs_[n_in + k].used = true;
  // Operands touched on every vector get the GPRs first.
  const Reg64 pool[] = {rbx, rbp, rsi, rdi, rcx, r9, r10, r11, r12, r13, r14, r15};
  size_t next_reg = 0;
  int next_slot = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < ptrs_.size(); ++k) {
      PtrLoc& p = ptrs_[k];
      if (!p.used) continue;
      const EwOperand& op = k < n_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
      if ((pass == 0) != InnerContiguous(op)) continue;
      if (next_reg < sizeof(pool) / sizeof(pool[0])) {
        p.in_reg = true;
        p.reg = pool[next_reg++];
      } else {
        p.off = kFramePtrs + 8 * next_slot++;
      }
    }
  }
  spill_off_ = kFramePtrs + 8 * next_slot;
  spill_off_ = (spill_off_ + 63) / 64 * 64;
  frame_bytes_ = spill_off_ + 64 * plan_.num_spill_slots;
}

template <typename Vmm>
void EwGenerator<Vmm>::AddImm(const Operand& dst, int64_t v) {
  if (v == 0) return;
  if (v >= INT32_MIN && v <= INT32_MAX) {
    add(dst, static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    mov(rdx, v);
    add(dst, rdx);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::LoadPointers() {
  const size_t n_in = layout_.inputs.size();
  for (size_t k = 0; k < ptrs_.size(); ++k) {
    const PtrLoc& p = ptrs_[k];
    if (!p.used) continue;
    const bool is_in = k < n_in;
    const EwOperand& op = is_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
    const int idx = static_cast<int>(is_in ? k : k - n_in);
    mov(rax, qword[rsp + kFrameArgs]);
    mov(rax, qword[rax + static_cast<int>(is_in ? offsetof(EwKernelArgs, inputs) : offsetof(EwKernelArgs, outputs))]);
    mov(rax, qword[rax + 8 * idx]);
    const int64_t step = op.strides[0] * 4;
    if (step != 0) {
      KILN_CHECK(step <= INT32_MAX, "ew kernel: dim-0 stride too large");
      mov(rdx, qword[rsp + kFrameIdx]);
      imul(rdx, rdx, static_cast<int>(step));
      add(rax, rdx);
    }
    if (p.in_reg) {
      mov(p.reg, rax);
    } else {
      mov(qword[rsp + p.off], rax);
    }
  }
}

// Moves every row pointer from the last row of level `level`'s inner levels
// to the first row of the next index at `level`.
template <typename Vmm>
void EwGenerator<Vmm>::AddPtrDeltas(int level) {
  const size_t n_in = layout_.inputs.size();
  for (size_t k = 0; k < ptrs_.size(); ++k) {
    const PtrLoc& p = ptrs_[k];
    if (!p.used) continue;
    const EwOperand& op = k < n_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
    int64_t delta = op.strides[level];
    for (int e = level + 1; e <= layout_.rank - 2; ++e) delta -= (layout_.dims[e] - 1) * op.strides[e];
    if (delta == 0) continue;
    if (p.in_reg) {
      AddImm(p.reg, delta * 4);
    } else {
      AddImm(qword[rsp + p.off], delta * 4);
    }
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::SetTailMaskConst(int rem) {
  if constexpr (kAvx512) {
    mov(edx, (1u << rem) - 1);
    kmovw(k1, edx);
  } else {
    for (int i = 0; i < 8; ++i) mov(dword[rsp + kFrameMask + 4 * i], i < rem ? -1 : 0);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::SetTailMaskRuntime() {
  if constexpr (kAvx512) {
    xor_(edx, edx);
    bts(edx, eax);
    dec(edx);
    kmovw(k1, edx);
  } else {
    // Lanes 0..rem-1 set: 8 dwords starting at MaskTab + 4*(8-rem).
    neg(rax);
    vmovups(T(0), ptr[rsp + rax * 4 + kFrameMaskTab + 32]);
    vmovups(ptr[rsp + kFrameMask], T(0));
  }
}

template <typename Vmm>
int EwGenerator<Vmm>::UnrollFactor() const {
  int cost = 0;
  for (const EwStep& s : plan_.steps) {
    if (s.kind != EwStep::Kind::kCompute) {
      ++cost;
      continue;
    }
    switch (plan_.instrs[s.instr].op) {
      case EwOp::kExp:
      case EwOp::kTanh:
      case EwOp::kSigmoid:
      case EwOp::kErf:
      case EwOp::kErfc: cost += 25; break;
      default: ++cost;
    }
  }
  return cost <= 12 ? 4 : cost <= 40 ? 2 : 1;
}

template <typename Vmm>
void EwGenerator<Vmm>::Generate() {
  const int rank = layout_.rank;
  num_acc_ = static_cast<int>(plan_.inner_reduction_outputs.size());
  acc_of_output_.assign(layout_.outputs.size(), -1);
  for (int a = 0; a < num_acc_; ++a) acc_of_output_[plan_.inner_reduction_outputs[a]] = a;
  KILN_CHECK(kEwTempRegs + num_acc_ + plan_.num_regs <= EwVectorRegs(kAvx512 ? Isa::kAvx512 : Isa::kAvx2),
             "ew kernel: plan uses more vector registers than the ISA has");
  AssignPointers();
  unroll_ = UnrollFactor();

  Preamble(static_cast<size_t>(frame_bytes_));
  mov(qword[rsp + kFrameArgs], rdi);
  mov(rax, qword[rdi + static_cast<int>(offsetof(EwKernelArgs, begin))]);
  mov(qword[rsp + kFrameIdx], rax);
  mov(rdx, qword[rdi + static_cast<int>(offsetof(EwKernelArgs, end))]);
  mov(qword[rsp + kFrameEnd], rdx);
  Xbyak::Label l_done, l_row;
  cmp(rax, rdx);
  jge(l_done, T_NEAR);
  LoadPointers();

  if (rank == 1) {
    mov(rax, qword[rsp + kFrameEnd]);
    sub(rax, qword[rsp + kFrameIdx]);
    mov(rdx, rax);
    and_(rdx, static_cast<uint32_t>(-(unroll_ * kW)));
    shl(rdx, 2);
    mov(qword[rsp + kFrameBoundU], rdx);
    mov(rdx, rax);
    and_(rdx, static_cast<uint32_t>(-kW));
    shl(rdx, 2);
    mov(qword[rsp + kFrameBound1], rdx);
    and_(rax, kW - 1);
    mov(qword[rsp + kFrameRem], rax);
    if constexpr (!kAvx512) {
      for (int i = 0; i < 16; ++i) mov(dword[rsp + kFrameMaskTab + 4 * i], i < 8 ? -1 : 0);
    }
  } else {
    const int rem = static_cast<int>(layout_.dims[rank - 1] % kW);
    if (rem != 0) SetTailMaskConst(rem);
    for (int d = 1; d <= rank - 2; ++d) mov(qword[rsp + kFrameIdx + 8 * d], 0);
  }

  L(l_row);
  for (int a = 0; a < num_acc_; ++a) Xor(Acc(a), Acc(a), Acc(a));
  InnerLoop();
  Epilogue();
  if (rank >= 2) {
    for (int level = rank - 2; level >= 1; --level) {
      KILN_CHECK(layout_.dims[level] <= INT32_MAX, "ew kernel: dim too large");
      Xbyak::Label l_wrap;
      inc(qword[rsp + kFrameIdx + 8 * level]);
      cmp(qword[rsp + kFrameIdx + 8 * level], static_cast<uint32_t>(layout_.dims[level]));
      jge(l_wrap, T_NEAR);
      AddPtrDeltas(level);
      jmp(l_row, T_NEAR);
      L(l_wrap);
      mov(qword[rsp + kFrameIdx + 8 * level], 0);
    }
    inc(qword[rsp + kFrameIdx]);
    mov(rax, qword[rsp + kFrameIdx]);
    cmp(rax, qword[rsp + kFrameEnd]);
    jge(l_done, T_NEAR);
    AddPtrDeltas(0);
    jmp(l_row, T_NEAR);
  }
  L(l_done);
  Postamble();
  EmitConstTable();
}

template <typename Vmm>
void EwGenerator<Vmm>::InnerLoop() {
  const int rank = layout_.rank;
  xor_(r8, r8);  // r8 = byte offset of the current vector in the row
  Xbyak::Label l_unroll, l_unroll_end, l_one, l_one_end, l_tail_end;
  if (rank == 1) {
    if (unroll_ > 1) {
      L(l_unroll);
      cmp(r8, qword[rsp + kFrameBoundU]);
      jae(l_unroll_end, T_NEAR);
      for (int u = 0; u < unroll_; ++u) Body(u * kVecBytes, false);
      add(r8, unroll_ * kVecBytes);
      jmp(l_unroll, T_NEAR);
      L(l_unroll_end);
    }
    L(l_one);
    cmp(r8, qword[rsp + kFrameBound1]);
    jae(l_one_end, T_NEAR);
    Body(0, false);
    add(r8, kVecBytes);
    jmp(l_one, T_NEAR);
    L(l_one_end);
    mov(rax, qword[rsp + kFrameRem]);
    test(rax, rax);
    jz(l_tail_end, T_NEAR);
    SetTailMaskRuntime();
    Body(0, true);
    L(l_tail_end);
    return;
  }
  const int64_t n = layout_.dims[rank - 1];
  const int64_t bound_u = n / (unroll_ * kW) * (unroll_ * kW) * 4;
  const int64_t bound_1 = n / kW * kW * 4;
  KILN_CHECK(bound_1 <= INT32_MAX, "ew kernel: inner dim too large");
  if (unroll_ > 1 && bound_u > 0) {
    L(l_unroll);
    for (int u = 0; u < unroll_; ++u) Body(u * kVecBytes, false);
    add(r8, unroll_ * kVecBytes);
    cmp(r8, static_cast<uint32_t>(bound_u));
    jb(l_unroll, T_NEAR);
  }
  const int64_t done = unroll_ > 1 ? bound_u : 0;
  if (bound_1 > done) {
    L(l_one);
    Body(0, false);
    add(r8, kVecBytes);
    cmp(r8, static_cast<uint32_t>(bound_1));
    jb(l_one, T_NEAR);
  }
  if (n % kW != 0) Body(0, true);
}

template <typename Vmm>
void EwGenerator<Vmm>::Body(int off, bool masked) {
  for (const EwStep& s : plan_.steps) {
    switch (s.kind) {
      case EwStep::Kind::kSpill: vmovups(ptr[rsp + spill_off_ + 64 * s.slot], Pool(s.dst)); break;
      case EwStep::Kind::kReload: vmovups(Pool(s.dst), ptr[rsp + spill_off_ + 64 * s.slot]); break;
      case EwStep::Kind::kCompute: Compute(s, off, masked); break;
    }
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::LoadInput(const Vmm& d, int input, int off, bool masked) {
  const Reg64 p = PtrReg(InPtr(input));
  if (!InnerContiguous(layout_.inputs[input])) {
    vbroadcastss(d, dword[p]);
    return;
  }
  const Address addr = ptr[p + r8 + off];
  if (!masked) {
    vmovups(d, addr);
  } else if constexpr (kAvx512) {
    vmovups(d | k1 | T_z, addr);
  } else {
    vmovups(T(0), ptr[rsp + kFrameMask]);
    vmaskmovps(d, T(0), addr);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::StoreOutput(const Vmm& s, int output, int off, bool masked) {
  const int acc = acc_of_output_[output];
  if (acc >= 0) {
    if (!masked) {
      vaddps(Acc(acc), Acc(acc), s);
    } else if constexpr (kAvx512) {
      vaddps(Acc(acc) | k1, Acc(acc), s);
    } else {
      vmovups(T(0), ptr[rsp + kFrameMask]);
      vandps(T(0), T(0), s);
      vaddps(Acc(acc), Acc(acc), T(0));
    }
    return;
  }
  const Reg64 p = PtrReg(OutPtr(output));
  const Address addr = ptr[p + r8 + off];
  const bool reduce = layout_.IsReduction(output);
  if (!masked) {
    if (reduce) {
      vaddps(T(0), s, addr);
      vmovups(addr, T(0));
    } else {
      vmovups(addr, s);
    }
    return;
  }
  if constexpr (kAvx512) {
    if (reduce) {
      vmovups(T(0) | k1 | T_z, addr);
      vaddps(T(0), T(0), s);
      vmovups(addr | k1, T(0));
    } else {
      vmovups(addr | k1, s);
    }
  } else {
    vmovups(T(1), ptr[rsp + kFrameMask]);
    if (reduce) {
      vmaskmovps(T(0), T(1), addr);
      vaddps(T(0), T(0), s);
      vmaskmovps(addr, T(1), T(0));
    } else {
      vmaskmovps(addr, T(1), s);
    }
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Fma(const Vmm& d, const Vmm& a, const Vmm& b, const Vmm& c) {
  if (d.getIdx() == a.getIdx()) {
    vfmadd213ps(d, b, c);
  } else if (d.getIdx() == b.getIdx()) {
    vfmadd213ps(d, a, c);
  } else if (d.getIdx() == c.getIdx()) {
    vfmadd231ps(d, a, b);
  } else {
    vmovaps(d, a);
    vfmadd213ps(d, b, c);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Compute(const EwStep& s, int off, bool masked) {
  const EwInstr& in = plan_.instrs[s.instr];
  if (in.op == EwOp::kStore) {
    StoreOutput(Pool(s.src[0]), in.operand, off, masked);
    return;
  }
  const Vmm d = Pool(s.dst);
  const Vmm a = s.src[0] >= 0 ? Pool(s.src[0]) : d;
  const Vmm b = s.src[1] >= 0 ? Pool(s.src[1]) : d;
  switch (in.op) {
    case EwOp::kLoad: LoadInput(d, in.operand, off, masked); break;
    case EwOp::kConst: vmovups(d, C(in.imm)); break;
    case EwOp::kAdd: vaddps(d, a, b); break;
    case EwOp::kSub: vsubps(d, a, b); break;
    case EwOp::kMul: vmulps(d, a, b); break;
    case EwOp::kDiv: vdivps(d, a, b); break;
    case EwOp::kMax: vmaxps(d, a, b); break;
    case EwOp::kMin: vminps(d, a, b); break;
    case EwOp::kNeg: Xor(d, a, CI(kSignBit)); break;
    case EwOp::kAbs: And(d, a, CI(kAbsMask)); break;
    case EwOp::kSqrt: vsqrtps(d, a); break;
    case EwOp::kExp: Exp(d, a); break;
    case EwOp::kTanh: Tanh(d, a); break;
    case EwOp::kSigmoid: Sigmoid(d, a); break;
    case EwOp::kErf: Erf(d, a); break;
    case EwOp::kErfc: Erfc(d, a); break;
    case EwOp::kFma: Fma(d, a, b, Pool(s.src[2])); break;
    case EwOp::kSelectGtZero:
      if constexpr (kAvx512) {
        vcmpps(k2, a, CI(0), kCmpGtOq);
        vmovaps(d | k2 | T_z, b);
      } else {
        vcmpps(T(0), a, CI(0), kCmpGtOq);
        vandps(d, T(0), b);
      }
      break;
    case EwOp::kStore: break;
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Epilogue() {
  for (int a = 0; a < num_acc_; ++a) {
    const Xbyak::Ymm y1(1);
    const Xbyak::Xmm x0(0), x2(2);
    if constexpr (kAvx512) {
      vextractf64x4(y1, Acc(a), 1);
      vaddps(y1, y1, Xbyak::Ymm(Acc(a).getIdx()));
    } else {
      vmovaps(y1, Acc(a));
    }
    vextractf128(x0, y1, 1);
    vaddps(x0, x0, Xbyak::Xmm(1));
    vmovhlps(x2, x2, x0);
    vaddps(x0, x0, x2);
    vmovshdup(x2, x0);
    vaddss(x0, x0, x2);
    const Reg64 p = PtrReg(OutPtr(plan_.inner_reduction_outputs[a]));
    vaddss(x0, x0, dword[p]);
    vmovss(dword[p], x0);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Exp(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2);
  // Operand order keeps NaN: maxps/minps return the second source on NaN.
  vmovups(t0, C(kExpLo));
  vmaxps(t0, t0, x);
  vmovups(t1, C(kExpHi));
  vminps(t0, t1, t0);
  vmulps(t1, t0, C(kLog2e));
  vcvtps2dq(t1, t1);  // n, round to nearest
  vcvtdq2ps(t2, t1);
  vfnmadd231ps(t0, t2, C(kLn2Hi));  // r = x - n*C1 (exact) - n*C2
  vfnmadd231ps(t0, t2, C(kLn2Lo));
  Horner(t2, t0, kExpPoly, 7);
  // 2^n = 2^(n>>1) * 2^(n-(n>>1)): both halves are normal floats for n in
  // [-150, 128], so overflow and gradual underflow happen in the last multiply.
  vpsrad(t0, t1, 1);
  vpsubd(t1, t1, t0);
  vpaddd(t0, t0, CI(127));
  vpslld(t0, t0, 23);
  vpaddd(t1, t1, CI(127));
  vpslld(t1, t1, 23);
  vmulps(d, t2, t0);
  vmulps(d, d, t1);
}

template <typename Vmm>
void EwGenerator<Vmm>::Sigmoid(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t3 = T(3);
  Xor(t3, x, CI(kSignBit));
  Exp(t3, t3);
  vaddps(t3, t3, C(1.0f));
  vmovups(t0, C(1.0f));
  vdivps(d, t0, t3);
}

template <typename Vmm>
void EwGenerator<Vmm>::Tanh(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2), t3 = T(3), t4 = T(4);
  And(t4, x, CI(kAbsMask));
  // Large |x|: 1 - 2 / (e^{2|x|} + 1).
  vaddps(t3, t4, t4);
  Exp(t3, t3);
  vaddps(t3, t3, C(1.0f));
  vmovups(t0, C(2.0f));
  vdivps(t3, t0, t3);
  vmovups(t0, C(1.0f));
  vsubps(t3, t0, t3);
  // Small |x|: |x| + |x|^3 P(x^2).
  vmulps(t0, t4, t4);
  Horner(t1, t0, kTanhPoly, 6);
  vmulps(t2, t4, t0);
  vfmadd213ps(t1, t2, t4);
  CmpLt(t4, C(kTanhSmall), t0);
  Select(t3, t0, t1, t3);
  And(t0, x, CI(kSignBit));
  Or(d, t3, t0);
}

template <typename Vmm>
void EwGenerator<Vmm>::ErfcTail() {
  const Vmm t0 = T(0), t1 = T(1), t3 = T(3), t4 = T(4), t5 = T(5);
  vmovups(t4, C(kErfcClamp));
  vminps(t4, t4, t5);  // NaN in t5 is kept
  vaddps(t0, t4, C(2.0f));
  vmovups(t1, C(2.0f));
  vdivps(t0, t1, t0);  // t = 2 / (2 + a)
  Horner(t3, t0, kErfcPoly, 10);
  // e^{-a^2} with a^2 = hi + lo exactly: e^{-hi} (1 - lo).
  vmulps(t0, t4, t4);
  vfmsub213ps(t4, t4, t0);
  vfnmadd231ps(t3, t3, t4);
  Xor(t4, t0, CI(kSignBit));
  Exp(t4, t4);
  vmulps(t4, t4, t3);
}

template <typename Vmm>
void EwGenerator<Vmm>::Erf(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t3 = T(3), t4 = T(4), t5 = T(5);
  And(t5, x, CI(kAbsMask));
  ErfcTail();
  vmovups(t3, C(1.0f));
  vsubps(t4, t3, t4);
  And(t3, x, CI(kSignBit));
  Or(t4, t4, t3);
  vmulps(t0, x, x);
  Horner(t1, t0, kErfPoly, 6);
  vmulps(t1, t1, x);
  CmpLt(t5, C(kErfSmall), t0);
  Select(d, t0, t1, t4);
}

template <typename Vmm>
void EwGenerator<Vmm>::Erfc(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2), t3 = T(3), t4 = T(4), t5 = T(5);
  And(t5, x, CI(kAbsMask));
  ErfcTail();
  vmovups(t3, C(2.0f));
  vsubps(t3, t3, t4);
  CmpLt(x, CI(0), t0);
  Select(t4, t0, t3, t4);
  vmulps(t0, x, x);
  Horner(t1, t0, kErfPoly, 6);
  vmulps(t1, t1, x);
  vmovups(t2, C(1.0f));
  vsubps(t1, t2, t1);
  CmpLt(t5, C(kErfSmall), t0);
  Select(d, t0, t1, t4);
}

template <typename Vmm>
void EwGenerator<Vmm>::EmitConstTable() {
  align(64);
  L(l_consts_);
  for (uint32_t bits : consts_) {
    for (int i = 0; i < 16; ++i) dd(bits);
  }
}

}  // namespace

std::unique_ptr<JitKernel> MakeEwGenerator(const std::string& name, const EwKernelPlan& plan, Isa isa) {
  if (isa == Isa::kAvx512) return std::make_unique<EwGenerator<Xbyak::Zmm>>(name, plan);
  return std::make_unique<EwGenerator<Xbyak::Ymm>>(name, plan);
}

}  // namespace compiler
}  // namespace kiln
