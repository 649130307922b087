#include "compiler/kernels/attention/attention_kernels.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "compiler/kernels/attention/attention_internal.h"
#include "framework/error.h"

namespace kiln::jit {

// The tile loops, compiled once per ISA. Everything attention_tiles_impl.h
// defines lands in the namespace it is included in, so neither copy is ever
// called on a CPU without its instructions (see KernelsFor).
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
constexpr int kW = 16;
constexpr int kMR = 6;
constexpr int kNV = 4;
#include "compiler/kernels/attention/attention_tiles_impl.h"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int kW = 8;
constexpr int kMR = 6;
constexpr int kNV = 2;
#include "compiler/kernels/attention/attention_tiles_impl.h"
}  // namespace avx2
#pragma GCC pop_options

namespace {

struct IsaKernels {
  int64_t width;  // floats per vector: panels are padded to it
  void (*forward_rows)(const AttentionParams&, const float*, const float*, int64_t, const float*, float*, float*,
                       int64_t, int64_t, float*, float*, float*, float*);
  void (*backward_head)(const AttentionParams&, const BackwardHeadArgs&);
};

const IsaKernels& KernelsFor(Isa isa) {
  static const IsaKernels k512{16, avx512::ForwardRows, avx512::BackwardHead};
  static const IsaKernels k2{8, avx2::ForwardRows, avx2::BackwardHead};
  if (!IsaSupported(isa)) ThrowInvalidArgument("fused attention kernel: this CPU lacks ", IsaName(isa));
  return isa == Isa::kAvx512 ? k512 : k2;
}

int64_t RoundUpTo(int64_t n, int64_t w) { return (n + w - 1) / w * w; }
int64_t MinOf(int64_t a, int64_t b) { return a < b ? a : b; }

// dst [cols, ldd] = src [rows, cols]^T; columns [rows, ldd) zero. Blocks
// of 16 source rows stay in L1 while their columns are written out.
void PackTransposed(const float* src, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t r1 = MinOf(rows, r0 + 16);
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t r = r0; r < r1; ++r) dst[j * ldd + r] = src[r * cols + j];
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t r = rows; r < ldd; ++r) dst[j * ldd + r] = 0.f;
  }
}

// src [rows, cols] with rows `ldd` apart: src itself when cols == ldd (no
// padding needed), else a copy in dst with columns [cols, ldd) zero.
const float* PaddedRows(const float* src, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  if (cols == ldd) return src;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) dst[r * ldd + j] = src[r * cols + j];
    for (int64_t j = cols; j < ldd; ++j) dst[r * ldd + j] = 0.f;
  }
  return dst;
}

// Slices of the calling thread's scratch, one per size, each starting on a
// cache line. The scratch is kept between calls (OpenMP's threads persist),
// so repeated launches neither allocate nor fault pages in; it grows to the
// largest shape seen (a few panels of [S, D] floats per thread). Nothing
// relies on its contents: every slice is written before it is read.
std::vector<float*> ThreadSlices(const std::vector<int64_t>& sizes) {
  thread_local std::vector<float> buffer;
  size_t total = 0;
  for (int64_t n : sizes) total += static_cast<size_t>(RoundUpTo(n, 16));
  if (buffer.size() < total) buffer.resize(total);
  std::vector<float*> slices;
  float* p = buffer.data();
  for (int64_t n : sizes) {
    slices.push_back(p);
    p += RoundUpTo(n, 16);
  }
  return slices;
}

// The calling thread's scratch of bf16 pairs, as ThreadSlices.
uint32_t* ThreadPairs(int64_t n) {
  thread_local std::vector<uint32_t> buffer;
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// One thread's backward panels and scratch, sized for the shape; `sr` only
// under bf16 compute.
struct BackwardScratch {
  float *kt, *vt, *kp, *qp, *dop, *dsum, *s, *dp, *dqa, *dka, *dva, *sr;
  BackwardScratch(const AttentionShape& sh, int64_t w, bool bf16) {
    const int64_t ldt = TransposedLd(sh.sk, w), dp_ = RoundUpTo(sh.d, w), dvp = RoundUpTo(sh.dv, w);
    const std::vector<float*> t = ThreadSlices({sh.d * ldt, sh.dv * ldt, sh.sk * dp_, sh.sq * dp_, sh.sq * dvp,
                                                sh.sq, kTileRows * kTileCols, kTileRows * kTileCols, sh.sq * dp_,
                                                kTileCols * dp_, kTileCols * dvp, bf16 ? kTileRows * kTileCols : 0});
    kt = t[0], vt = t[1], kp = t[2], qp = t[3], dop = t[4], dsum = t[5];
    s = t[6], dp = t[7], dqa = t[8], dka = t[9], dva = t[10], sr = bf16 ? t[11] : nullptr;
  }
};

// Packs head h's panels and D = rowsum(dOut * Out) into `b`; D reads
// `sum_dout` (dOut before any rounding).
BackwardHeadArgs PackHead(const AttentionShape& sh, int64_t w, const AttentionGradArgs& a, const float* sum_dout,
                          int64_t h, BackwardScratch* b) {
  const int64_t ldt = TransposedLd(sh.sk, w), dp = RoundUpTo(sh.d, w), dvp = RoundUpTo(sh.dv, w);
  const float* q = a.q + h * sh.sq * sh.d;
  const float* k = a.k + h * sh.sk * sh.d;
  const float* v = a.v + h * sh.sk * sh.dv;
  const float* out = a.out + h * sh.sq * sh.dv;
  const float* dout = a.dout + h * sh.sq * sh.dv;
  const float* sdout = sum_dout + h * sh.sq * sh.dv;
  PackTransposed(k, sh.sk, sh.d, b->kt, ldt);
  PackTransposed(v, sh.sk, sh.dv, b->vt, ldt);
  const float* kp = PaddedRows(k, sh.sk, sh.d, b->kp, dp);
  const float* qp = PaddedRows(q, sh.sq, sh.d, b->qp, dp);
  const float* dop = PaddedRows(dout, sh.sq, sh.dv, b->dop, dvp);
  for (int64_t r = 0; r < sh.sq; ++r) {
    float acc = 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) acc += sdout[r * sh.dv + j] * out[r * sh.dv + j];
    b->dsum[r] = acc;
  }
  return {b->kt,
          b->vt,
          kp,
          qp,
          dop,
          dout,
          a.lse + h * sh.sq,
          b->dsum,
          ldt,
          b->s,
          b->dp,
          b->dqa,
          b->dka,
          b->dva,
          b->sr,
          a.dq != nullptr ? a.dq + h * sh.sq * sh.d : nullptr,
          a.dk != nullptr ? a.dk + h * sh.sk * sh.d : nullptr,
          a.dv != nullptr ? a.dv + h * sh.sk * sh.dv : nullptr};
}

// x rounded to the nearest bf16 (ties to even) as an f32; NaN stays NaN.
float RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// A copy of x[0, n) rounded to bf16, for the f32 tile loops under bf16
// compute (empty for a null x).
std::vector<float> RoundedCopy(const float* x, int64_t n) {
  std::vector<float> r;
  if (x == nullptr) return r;
  r.resize(static_cast<size_t>(n));
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) r[i] = RoundToBf16(x[i]);
  return r;
}

void ForwardF32(const AttentionParams& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  const IsaKernels& isa = KernelsFor(p.isa);
  const AttentionShape& sh = p.shape;
  const int64_t ldt = TransposedLd(sh.sk, isa.width), dvp = RoundUpTo(sh.dv, isa.width);
  const int64_t tiles = (sh.sq + kTileRows - 1) / kTileRows;
  const int64_t tasks = sh.heads * tiles;
#pragma omp parallel if (tasks > 1)
  {
    const std::vector<float*> slice = ThreadSlices(
        {sh.d * ldt, sh.sk * dvp, kTileRows * kTileCols, kTileRows * dvp, kTileRows, kTileRows});
    float *kt = slice[0], *vp_buffer = slice[1], *s = slice[2], *acc = slice[3], *m = slice[4], *l = slice[5];
    int64_t packed = -1;  // the head whose K and V the panels hold
    const float* vp = nullptr;
    // Tasks of one head are adjacent and each thread takes one contiguous run
    // of them, so a thread packs each of its heads once (dynamic scheduling
    // dealt a head's tiles round-robin: every thread packed every head, and
    // the 2-thread forward ran 1.63x the 1-thread one at seq 128).
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t h = t / tiles, r0 = (t % tiles) * kTileRows;
      if (h != packed) {
        PackTransposed(k + h * sh.sk * sh.d, sh.sk, sh.d, kt, ldt);
        vp = PaddedRows(v + h * sh.sk * sh.dv, sh.sk, sh.dv, vp_buffer, dvp);
        packed = h;
      }
      isa.forward_rows(p, q + h * sh.sq * sh.d, kt, ldt, vp, out + h * sh.sq * sh.dv, lse + h * sh.sq, r0,
                       MinOf(kTileRows, sh.sq - r0), s, acc, m, l);
    }
  }
}

// A bf16 forward path: its per-head panels and scratch, how it packs a
// head's K and V and computes rows of Out, and what a thread does before and
// after its tasks (AMX configures and releases the tiles).
struct Bf16ForwardPath {
  int64_t (*panel_pairs)(const AttentionShape& sh);
  int64_t (*pair_scratch)(const AttentionShape& sh);
  int64_t (*float_scratch)(const AttentionShape& sh);
  void (*pack)(const AttentionShape& sh, const float* k, const float* v, uint32_t* panels);
  void (*rows)(const AttentionParams& p, const float* q, const uint32_t* panels, float* out, float* lse, int64_t r0,
               int64_t rows, uint32_t* pair_scratch, float* float_scratch);
  void (*begin)();
  void (*end)();
};

// vdpbf16ps: K^T's panel, then V's.
int64_t Vdpbf16psKtPairs(const AttentionShape& sh) { return Pairs(sh.d) * TransposedLd(sh.sk, avx512bf16::kW); }
constexpr Bf16ForwardPath kVdpbf16psForward = {
    [](const AttentionShape& sh) { return Vdpbf16psKtPairs(sh) + Pairs(sh.sk) * avx512bf16::Padded(sh.dv); },
    avx512bf16::ForwardPairScratch,
    avx512bf16::ForwardFloatScratch,
    [](const AttentionShape& sh, const float* k, const float* v, uint32_t* panels) {
      avx512bf16::PackForwardHead(sh, k, v, panels, panels + Vdpbf16psKtPairs(sh));
    },
    [](const AttentionParams& p, const float* q, const uint32_t* panels, float* out, float* lse, int64_t r0,
       int64_t rows, uint32_t* pair_scratch, float* float_scratch) {
      avx512bf16::ForwardRows(p, q, panels, panels + Vdpbf16psKtPairs(p.shape), out, lse, r0, rows, pair_scratch,
                              float_scratch);
    },
    [] {},
    [] {},
};
constexpr Bf16ForwardPath kAmxForward = {
    amx::ForwardPanelPairs, amx::ForwardPairScratch, amx::ForwardFloatScratch, amx::PackForwardHead,
    amx::ForwardRows,       amx::ConfigureTiles,     amx::ReleaseTiles,
};

// The f32 forward's task order on a bf16 path, panels packed per head.
void ForwardBf16(const Bf16ForwardPath& path, const AttentionParams& p, const float* q, const float* k,
                 const float* v, float* out, float* lse) {
  const AttentionShape& sh = p.shape;
  const int64_t panel_pairs = path.panel_pairs(sh);
  const int64_t tiles = (sh.sq + kTileRows - 1) / kTileRows;
  const int64_t tasks = sh.heads * tiles;
#pragma omp parallel if (tasks > 1)
  {
    uint32_t* panels = ThreadPairs(panel_pairs + path.pair_scratch(sh));
    uint32_t* pair_scratch = panels + panel_pairs;
    float* float_scratch = ThreadSlices({path.float_scratch(sh)})[0];
    int64_t packed = -1;
    path.begin();
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t h = t / tiles, r0 = (t % tiles) * kTileRows;
      if (h != packed) {
        path.pack(sh, k + h * sh.sk * sh.d, v + h * sh.sk * sh.dv, panels);
        packed = h;
      }
      path.rows(p, q + h * sh.sq * sh.d, panels, out + h * sh.sq * sh.dv, lse + h * sh.sq, r0,
                MinOf(kTileRows, sh.sq - r0), pair_scratch, float_scratch);
    }
    path.end();
  }
}

void BackwardF32(const AttentionParams& p, const AttentionGradArgs& a, const float* sum_dout) {
  const IsaKernels& isa = KernelsFor(p.isa);
  const AttentionShape& sh = p.shape;
  const bool bf16 = p.compute == ComputeType::kBF16;
#pragma omp parallel if (sh.heads > 1)
  {
    BackwardScratch scratch(sh, isa.width, bf16);
#pragma omp for schedule(dynamic)
    for (int64_t h = 0; h < sh.heads; ++h) isa.backward_head(p, PackHead(sh, isa.width, a, sum_dout, h, &scratch));
  }
}

// One head's pointers into the bf16 kernels' arguments.
avx512bf16::HeadArgs HeadOf(const AttentionShape& sh, const AttentionGradArgs& a, int64_t h) {
  const int64_t qo = h * sh.sq * sh.d, ko = h * sh.sk * sh.d, vo = h * sh.sk * sh.dv, oo = h * sh.sq * sh.dv;
  return {a.q + qo,
          a.k + ko,
          a.v + vo,
          a.out + oo,
          a.dout + oo,
          a.lse + h * sh.sq,
          a.dq != nullptr ? a.dq + qo : nullptr,
          a.dk != nullptr ? a.dk + ko : nullptr,
          a.dv != nullptr ? a.dv + vo : nullptr};
}

void BackwardNativeBf16(const AttentionParams& p, const AttentionGradArgs& a, bool use_amx) {
  const AttentionShape& sh = p.shape;
  const int64_t pair_size = use_amx ? amx::BackwardPairScratch(sh) : avx512bf16::BackwardPairScratch(sh);
  const int64_t float_size = use_amx ? amx::BackwardFloatScratch(sh) : avx512bf16::BackwardFloatScratch(sh);
#pragma omp parallel if (sh.heads > 1)
  {
    uint32_t* pairs = ThreadPairs(pair_size);
    float* floats = ThreadSlices({float_size})[0];
    if (use_amx) amx::ConfigureTiles();
#pragma omp for schedule(dynamic)
    for (int64_t h = 0; h < sh.heads; ++h) {
      if (use_amx) {
        amx::BackwardHead(p, HeadOf(sh, a, h), pairs, floats);
      } else {
        avx512bf16::BackwardHead(p, HeadOf(sh, a, h), pairs, floats);
      }
    }
    if (use_amx) amx::ReleaseTiles();
  }
}

}  // namespace

const char* Bf16ProductsName(Bf16Products p) {
  switch (p) {
    case Bf16Products::kAuto: return "auto";
    case Bf16Products::kAmx: return "amx (tdpbf16ps)";
    case Bf16Products::kVdpbf16ps: return "avx512_bf16 (vdpbf16ps)";
    case Bf16Products::kRoundedF32: return "f32 on bf16-rounded operands";
  }
  return "?";
}

bool Bf16ProductsSupported(Bf16Products p) {
  switch (p) {
    case Bf16Products::kAmx: return AmxUsable();
    case Bf16Products::kVdpbf16ps: return HasAvx512Bf16();
    default: return true;
  }
}

Bf16Products ResolveBf16Products(Bf16Products p, Isa isa) {
  if (p != Bf16Products::kAuto) return p;
  if (isa == Isa::kAvx512 && AmxUsable()) return Bf16Products::kAmx;
  if (isa == Isa::kAvx512 && HasAvx512Bf16()) return Bf16Products::kVdpbf16ps;
  return Bf16Products::kRoundedF32;
}

bool Bf16AttentionPays(Isa isa) { return ResolveBf16Products(Bf16Products::kAuto, isa) == Bf16Products::kAmx; }

namespace {

// The bf16 path of `p`, checked against the CPU and the ISA.
Bf16Products Bf16PathOf(const AttentionParams& p) {
  const Bf16Products path = ResolveBf16Products(p.bf16_products, p.isa);
  if (!Bf16ProductsSupported(path) || (path != Bf16Products::kRoundedF32 && p.isa != Isa::kAvx512)) {
    ThrowInvalidArgument("fused attention kernel: bf16 products on ", Bf16ProductsName(path),
                         " need a CPU and ISA (", IsaName(p.isa), ") that have them");
  }
  return path;
}

}  // namespace

void FusedAttentionForward(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                           float* lse) {
  KernelsFor(p.isa);  // checks the ISA
  if (p.compute == ComputeType::kF32) return ForwardF32(p, q, k, v, out, lse);
  const Bf16Products path = Bf16PathOf(p);
  if (path == Bf16Products::kAmx) return ForwardBf16(kAmxForward, p, q, k, v, out, lse);
  if (path == Bf16Products::kVdpbf16ps) return ForwardBf16(kVdpbf16psForward, p, q, k, v, out, lse);
  // The f32 tile loops on rounded operands (they round the probabilities
  // themselves).
  const AttentionShape& sh = p.shape;
  const std::vector<float> rq = RoundedCopy(q, sh.heads * sh.sq * sh.d);
  const std::vector<float> rk = RoundedCopy(k, sh.heads * sh.sk * sh.d);
  const std::vector<float> rv = RoundedCopy(v, sh.heads * sh.sk * sh.dv);
  ForwardF32(p, rq.data(), k != nullptr ? rk.data() : nullptr, v != nullptr ? rv.data() : nullptr, out, lse);
}

void FusedAttentionBackward(const AttentionParams& p, const AttentionGradArgs& a) {
  KernelsFor(p.isa);
  if (p.compute == ComputeType::kF32) return BackwardF32(p, a, a.dout);
  const Bf16Products path = Bf16PathOf(p);
  if (path != Bf16Products::kRoundedF32) return BackwardNativeBf16(p, a, path == Bf16Products::kAmx);
  const AttentionShape& sh = p.shape;
  const std::vector<float> rq = RoundedCopy(a.q, sh.heads * sh.sq * sh.d);
  const std::vector<float> rk = RoundedCopy(a.k, sh.heads * sh.sk * sh.d);
  const std::vector<float> rv = RoundedCopy(a.v, sh.heads * sh.sk * sh.dv);
  const std::vector<float> rdo = RoundedCopy(a.dout, sh.heads * sh.sq * sh.dv);
  AttentionGradArgs r = a;
  r.q = rq.data(), r.k = rk.data(), r.v = rv.data(), r.dout = rdo.data();
  BackwardF32(p, r, a.dout);
}

}  // namespace kiln::jit
