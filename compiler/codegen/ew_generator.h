// Internal to the fused elementwise code generator: the Xbyak generator
// class, shared by ew_codegen_x86.cc (loops, loads, stores, the instruction
// selection), ew_codegen_pointers.cc (operand pointers and their steps),
// ew_codegen_math.cc (the inline vector math), ew_codegen_bf16.cc
// and ew_codegen_bool.cc (bf16 and bool operands, the comparisons). Only
// those files include it (Xbyak is heavy to include).
//
// Loop structure (rank r, inner dim n = dims[r-1], W = 16 zmm / 8 ymm lanes):
//   for each row (odometer over dims 0..r-2, dim 0 in [begin, end)):
//     zero inner-reduction accumulators
//     for j in blocks of U*W: body x U      (U = 4/2/1 by body size)
//     for j in blocks of W:   body
//     tail (n % W lanes):     body, masked (k1 / vmaskmovps)
//     add accumulator sums to their outputs
//   A rank-1 layout is one row of end-begin elements.
// No size is baked: the dims and the operands' steps come from EwKernelArgs
// (the prologue puts the loop bounds, the tail mask and dims 1..r-2 in the
// frame), so the code serves every layout of its structure (the rank, the
// operands' element types and which of their strides are 0, the sums).
// Every operand has a row pointer (in a GPR, or a stack slot when more than 12
// are live); rows advance by per-level steps, which the prologue copies
// from the args into the frame (the row level's into GPRs the pointers left
// free, as the inner loop's bounds). r8 is the element
// index in the row: an f32 operand's vector is at row + 4*r8, a bf16 one's at
// row + 2*r8 (bf16 loads widen with vpmovzxwd + a shift; stores round with
// vcvtneps2bf16 or the integer sequence of framework/bf16.h, then narrow), a
// bool one's at row + r8 (loads widen with vpmovzxbd + vcvtdq2ps; stores
// compare with zero and narrow to 0/1 bytes).
//
// Vector registers: T0..T5 scratch (vmm0-5), then one accumulator per
// inner-reduction output, then the allocator's pool.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/codegen/ew_codegen_plan.h"
#include "compiler/codegen/jit_kernel.h"

namespace kiln::jit {
namespace ew_x86 {

using Xbyak::Address;
using Xbyak::Operand;
using Xbyak::Reg64;

constexpr uint32_t kSignBit = 0x80000000u;
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr int kCmpEqOq = 0x00;
constexpr int kCmpNeqUq = 0x04;
constexpr int kCmpLtOq = 0x11;
constexpr int kCmpGtOq = 0x1e;
constexpr int kCmpUnordQ = 0x03;

// Stack frame (bytes from rsp).
constexpr int kFrameIdx = 0;        // outer indices, 8 bytes each
constexpr int kFrameEnd = 32;       // dim-0 end
constexpr int kFrameBoundU = 40;    // rank 1: elements covered by the unrolled loop
constexpr int kFrameBound1 = 48;    // rank 1: elements covered by full vectors
constexpr int kFrameRem = 56;       // rank 1: tail lanes
constexpr int kFrameArgs = 64;      // the EwKernelArgs pointer
constexpr int kFrameSteps = 72;     // EwKernelArgs::steps
constexpr int kFrameDims = 72;      // dims[d] at kFrameDims + 8*d for 1 <= d <= 2 (rank 4: levels 1, 2)
constexpr int kFrameMask = 96;      // AVX2: current tail mask (32 bytes)
constexpr int kFrameMaskTab = 128;  // AVX2 rank 1: 8 x ~0 then 8 x 0
constexpr int kFrameNarrow = 192;   // AVX2: a bf16 or bool tail on its way to or from memory (16 bytes)
constexpr int kFramePtrs = 224;     // row pointers that did not get a GPR

template <typename Vmm>
class EwGenerator : public JitKernel {
 public:
  static constexpr bool kAvx512 = std::is_same<Vmm, Xbyak::Zmm>::value;
  static constexpr int kW = kAvx512 ? 16 : 8;

  EwGenerator(const std::string& name, const EwKernelPlan& plan, Bf16Store bf16_store)
      : JitKernel(name), plan_(plan), layout_(plan.layout), bf16_store_(bf16_store) {}

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
  bool IsPlainConst(EwValue v) const {
    return v >= 0 && plan_.instrs[static_cast<size_t>(v)].op == EwOp::kConst &&
           !std::isnan(plan_.instrs[static_cast<size_t>(v)].imm);
  }
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

  // Walks the inner dim (else one value per row: a broadcast input, or an
  // output stored per row or summed over it).
  bool InnerContiguous(const EwOperand& op) const { return op.strides[layout_.rank - 1] != 0; }
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
  void CopySteps();
  // Operand k's pointer moves when an index at `level` advances: its step
  // there is nonzero at some sizes (a stride from `level` to dim r-2 is not 0).
  bool Moves(size_t k, int level) const {
    const size_t n_in = layout_.inputs.size();
    const EwOperand& op = k < n_in ? layout_.inputs[k] : layout_.outputs[k - n_in];
    bool moves = false;
    for (int e = level; e <= layout_.rank - 2; ++e) moves |= op.strides[e] != 0;
    return moves;
  }
  // The frame slot of operand k's step at `level` (EwKernelArgs::steps).
  int StepSlot(size_t k, int level) const { return step_tab_off_ + static_cast<int>(8 * (kEwMaxRank * k + level)); }
  // Puts the inner dim's loop bounds and tail mask in the frame (k1 on
  // AVX-512), from `n` elements in rax.
  void SetInnerBounds();
  void SetTailMaskRuntime();  // rem in rax (1..W-1)
  void InnerLoop();
  void Body(int off, bool masked);
  void Compute(const EwStep& s, int off, bool masked);
  // The vector of `op` at element offset `off` from r8 in its row.
  Address At(const Reg64& p, const EwOperand& op, int off) const {
    const int bytes = static_cast<int>(EwElemBytes(op.elem));
    return ptr[p + r8 * bytes + off * bytes];
  }
  void LoadInput(const Vmm& d, int input, int off, bool masked);
  void LoadBf16(const Vmm& d, const Reg64& p, const EwOperand& op, int off, bool masked);
  void StoreOutput(const Vmm& s, int output, int off, bool masked);
  // T1 = the bf16 bits of s in the low half of each dword (scratch T0, T2).
  void RoundToBf16Bits(const Vmm& s);
  void StoreBf16(const Vmm& s, const Reg64& p, const EwOperand& op, int off, bool masked);
  // bool operands (ew_codegen_bool.cc): 0/1 bytes widened to 0.0/1.0, and
  // stored as value != 0 (NaN true; scratch T0).
  void LoadBool(const Vmm& d, const Reg64& p, const EwOperand& op, int off, bool masked);
  void StoreBool(const Vmm& s, const Reg64& p, const EwOperand& op, int off, bool masked);
  // AVX2 tails: copies the tail's elements of `bytes` bytes (bf16 2, bool 1)
  // between [rdx] and the frame's narrow slot (rem lanes, from the frame).
  void CopyNarrowTail(bool to_frame, int bytes);
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
  // ErfcTail/Erf/Erfc T0-T5, Log T0-T4.
  void Exp(const Vmm& d, const Vmm& x);
  void Log(const Vmm& d, const Vmm& x);
  void Sigmoid(const Vmm& d, const Vmm& x);
  void Tanh(const Vmm& d, const Vmm& x);
  void ErfcTail();  // T4 = erfc(T5) for T5 = |x|
  void Erf(const Vmm& d, const Vmm& x);
  void Erfc(const Vmm& d, const Vmm& x);
  void Fma(const Vmm& d, const Vmm& a, const Vmm& b, const Vmm& c);
  // kMax / kMin with NaN propagating from either operand (scratch T0, T1).
  // a_const / b_const: that operand is a constant that is not NaN.
  void MaxMin(EwOp op, const Vmm& d, const Vmm& a, const Vmm& b, bool a_const, bool b_const);
  // kSelect: d = c != 0 ? a : b, NaN counting as nonzero (scratch T0); d may
  // alias any operand.
  void SelectNonZero(const Vmm& d, const Vmm& c, const Vmm& a, const Vmm& b);
  // kSelectGtZero: d = a > 0 ? b : 0 (scratch T0).
  void SelectGtZero(const Vmm& d, const Vmm& a, const Vmm& b);
  // kLt ... kNe (ew_codegen_bool.cc): d = 1.0 where `op` holds, else 0.0;
  // d may alias a or b.
  void Compare(EwOp op, const Vmm& d, const Vmm& a, const Vmm& b);

  const EwKernelPlan& plan_;
  const EwLayout& layout_;
  Bf16Store bf16_store_;
  int num_acc_ = 0;
  std::vector<int> acc_of_output_;
  std::vector<PtrLoc> ptrs_;
  // The inner loop's bounds and tail lanes, in GPRs the pointers left free.
  bool bound_in_reg_ = false;
  Reg64 reg_bound_u_ = Reg64(0), reg_bound_1_ = Reg64(0), reg_rem_ = Reg64(0);
  int frame_bytes_ = 0;
  int unroll_ = 1;
  int spill_off_ = 0;
  int step_tab_off_ = 0;
  std::vector<int> step_reg_;  // per operand: the GPR holding its row-level step, or -1
  Xbyak::Label l_consts_;
  std::vector<uint32_t> consts_;
  std::map<uint32_t, int> const_index_;
};


}  // namespace ew_x86
}  // namespace kiln::jit
