#include "compiler/attention_kernels.h"

#include <cstdint>
#include <vector>

#include "framework/error.h"

namespace kiln::jit {

constexpr int64_t kTileRows = 64;   // queries per tile
constexpr int64_t kTileCols = 128;  // keys per tile: a multiple of every ISA's vector width

// One head's backward: its packed panels, its slices of the inputs and
// outputs, and per-thread scratch (see attention_tiles_impl.h).
struct BackwardHeadArgs {
  const float *kt, *vt, *kp, *qp, *dop, *dout, *lse, *dsum;
  int64_t ldt;  // row stride of kt and vt
  float *s, *dp, *dqa, *dka, *dva;
  float *dq, *dk, *dv;
};

// The tile loops, compiled once per ISA. Everything attention_tiles_impl.h
// defines lands in the namespace it is included in, so neither copy is ever
// called on a CPU without its instructions (see KernelsFor).
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
constexpr int kW = 16;
constexpr int kMR = 6;
constexpr int kNV = 4;
#include "compiler/attention_tiles_impl.h"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int kW = 8;
constexpr int kMR = 6;
constexpr int kNV = 2;
#include "compiler/attention_tiles_impl.h"
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
// Row stride of the transposed panels (see attention_tiles_impl.h).
int64_t TransposedLd(int64_t sk, int64_t w) { return RoundUpTo(sk, w) + w; }

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

// One thread's backward panels and scratch, sized for the shape.
struct BackwardScratch {
  float *kt, *vt, *kp, *qp, *dop, *dsum, *s, *dp, *dqa, *dka, *dva;
  BackwardScratch(const AttentionShape& sh, int64_t w) {
    const int64_t ldt = TransposedLd(sh.sk, w), dp_ = RoundUpTo(sh.d, w), dvp = RoundUpTo(sh.dv, w);
    const std::vector<float*> t = ThreadSlices({sh.d * ldt, sh.dv * ldt, sh.sk * dp_, sh.sq * dp_, sh.sq * dvp,
                                                sh.sq, kTileRows * kTileCols, kTileRows * kTileCols, sh.sq * dp_,
                                                kTileCols * dp_, kTileCols * dvp});
    kt = t[0], vt = t[1], kp = t[2], qp = t[3], dop = t[4], dsum = t[5];
    s = t[6], dp = t[7], dqa = t[8], dka = t[9], dva = t[10];
  }
};

// Packs head h's panels and D = rowsum(dOut * Out) into `b`.
BackwardHeadArgs PackHead(const AttentionShape& sh, int64_t w, const AttentionGradArgs& a, int64_t h,
                          BackwardScratch* b) {
  const int64_t ldt = TransposedLd(sh.sk, w), dp = RoundUpTo(sh.d, w), dvp = RoundUpTo(sh.dv, w);
  const float* q = a.q + h * sh.sq * sh.d;
  const float* k = a.k + h * sh.sk * sh.d;
  const float* v = a.v + h * sh.sk * sh.dv;
  const float* out = a.out + h * sh.sq * sh.dv;
  const float* dout = a.dout + h * sh.sq * sh.dv;
  PackTransposed(k, sh.sk, sh.d, b->kt, ldt);
  PackTransposed(v, sh.sk, sh.dv, b->vt, ldt);
  const float* kp = PaddedRows(k, sh.sk, sh.d, b->kp, dp);
  const float* qp = PaddedRows(q, sh.sq, sh.d, b->qp, dp);
  const float* dop = PaddedRows(dout, sh.sq, sh.dv, b->dop, dvp);
  for (int64_t r = 0; r < sh.sq; ++r) {
    float acc = 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) acc += dout[r * sh.dv + j] * out[r * sh.dv + j];
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
          a.dq != nullptr ? a.dq + h * sh.sq * sh.d : nullptr,
          a.dk != nullptr ? a.dk + h * sh.sk * sh.d : nullptr,
          a.dv != nullptr ? a.dv + h * sh.sk * sh.dv : nullptr};
}

}  // namespace

void FusedAttentionForward(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                           float* lse) {
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

void FusedAttentionBackward(const AttentionParams& p, const AttentionGradArgs& a) {
  const IsaKernels& isa = KernelsFor(p.isa);
  const AttentionShape& sh = p.shape;
#pragma omp parallel if (sh.heads > 1)
  {
    BackwardScratch scratch(sh, isa.width);
#pragma omp for schedule(dynamic)
    for (int64_t h = 0; h < sh.heads; ++h) isa.backward_head(p, PackHead(sh, isa.width, a, h, &scratch));
  }
}

}  // namespace kiln::jit
