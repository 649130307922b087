// kiln bench --bench_what attention: the JIT's fused attention kernels
// (compiler/kernels/attention/attention_kernels.h) against the unfused path they replace,
// matmul(Q, K^T) * scale, softmax, matmul(P, V) and the three grad ops on the
// framework's oneDNN kernels (what a cluster runs with --fuse_attention=false),
// forward and backward of one [--batch_size, --num_heads, --seq_len,
// --d_model / --num_heads] problem. Steps alternate fused, unfused, fused, ...
// so that other load on the machine hits both sides alike. One JSON line:
// both sides' median and best step, their ratio, the fused kernels' GFLOP/s
// (7 products of 2*S*S*Dh per head: 2 forward, 5 backward with the
// recomputed scores) and each side's peak tensor bytes (the unfused side's
// [batch, heads, S, S] scores, probabilities and their gradients).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "compiler/kernels/attention/attention_kernels.h"
#include "launch_op/default_jit.h"
#include "framework/allocator.h"
#include "framework/executor.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "tools/bench_attention.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The six unfused ops on q, k, v and the output gradient do.
proto::ProgramDesc UnfusedProgram(const Dims& qkv, float scale) {
  proto::ProgramDesc p;
  proto::BlockDesc* b = p.add_blocks();
  b->set_idx(0);
  b->set_parent_idx(-1);
  Dims scores = qkv;
  scores.back() = qkv[2];
  const std::vector<std::pair<std::string, Dims>> vars = {
      {"q", qkv},      {"k", qkv},       {"v", qkv},       {"do", qkv},      {"o", qkv},  {"s", scores},
      {"p", scores},   {"dp", scores},   {"ds", scores},   {"dq", qkv},      {"dk", qkv}, {"dv", qkv}};
  for (const auto& [name, dims] : vars) {
    proto::VarDesc* v = b->add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    for (int64_t d : dims) v->add_dims(d);
  }
  *b->add_ops() = OpBuilder("matmul").In("X", {"q"}).In("Y", {"k"}).Out("Out", {"s"}).Attr("transpose_Y", true)
                      .Attr("alpha", scale).Build();
  *b->add_ops() = OpBuilder("softmax").In("X", {"s"}).Out("Out", {"p"}).Build();
  *b->add_ops() = OpBuilder("matmul").In("X", {"p"}).In("Y", {"v"}).Out("Out", {"o"}).Build();
  *b->add_ops() = OpBuilder("matmul_grad").In("X", {"p"}).In("Y", {"v"}).In("Out@GRAD", {"do"})
                      .Out("X@GRAD", {"dp"}).Out("Y@GRAD", {"dv"}).Build();
  *b->add_ops() = OpBuilder("softmax_grad").In("Out", {"p"}).In("Out@GRAD", {"dp"}).Out("X@GRAD", {"ds"}).Build();
  *b->add_ops() = OpBuilder("matmul_grad").In("X", {"q"}).In("Y", {"k"}).In("Out@GRAD", {"ds"})
                      .Out("X@GRAD", {"dq"}).Out("Y@GRAD", {"dk"}).Attr("transpose_Y", true).Attr("alpha", scale)
                      .Build();
  return p;
}

// Peak tensor bytes of `fn` above what was live before it.
template <typename Fn>
size_t PeakBytes(Fn&& fn) {
  CachingAllocator& a = CachingAllocator::Global();
  const size_t base = a.stats().in_use_bytes;
  a.ResetPeak();
  fn();
  return a.stats().peak_in_use_bytes - base;
}

}  // namespace

int BenchAttention() {
  const int64_t b = FLAGS_batch_size, h = FLAGS_num_heads, s = FLAGS_seq_len, d = FLAGS_d_model;
  if (b < 1 || h < 1 || s < 1 || d < 1 || d % h != 0) {
    ThrowInvalidArgument("kiln bench --bench_what attention: needs positive --batch_size, --seq_len, --num_heads and "
                         "--d_model, with --d_model a multiple of --num_heads; got ", b, ", ", s, ", ", h, ", ", d);
  }
  if (FLAGS_bench_steps < 1) ThrowInvalidArgument("--bench_steps must be at least 1, got ", FLAGS_bench_steps);
  const int64_t dh = d / h;
  const Dims qkv = {b, h, s, dh};
  jit::AttentionParams params;
  params.shape = {b * h, s, s, dh, dh};
  params.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  params.isa = jit::DefaultJit().options().compile.isa;

  Scope scope;
  std::mt19937 rng(static_cast<uint32_t>(FLAGS_seed));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const char* name : {"q", "k", "v", "do"}) {
    Tensor* t = scope.Var(name)->GetMutable();
    t->Resize(qkv);
    float* x = t->mutable_data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) x[i] = u(rng);
  }
  const float* q = scope.GetVar("q")->Get().data<float>();
  const float* k = scope.GetVar("k")->Get().data<float>();
  const float* v = scope.GetVar("v")->Get().data<float>();
  const float* dout = scope.GetVar("do")->Get().data<float>();
  auto fused = [&] {
    Tensor out(DataType::kFP32, qkv), lse(DataType::kFP32, {b, h, s}), dq(DataType::kFP32, qkv),
        dk(DataType::kFP32, qkv), dv(DataType::kFP32, qkv);
    jit::FusedAttentionForward(params, q, k, v, out.mutable_data<float>(), lse.mutable_data<float>());
    jit::AttentionGradArgs g;
    g.q = q, g.k = k, g.v = v, g.out = out.data<float>(), g.lse = lse.data<float>(), g.dout = dout;
    g.dq = dq.mutable_data<float>(), g.dk = dk.mutable_data<float>(), g.dv = dv.mutable_data<float>();
    jit::FusedAttentionBackward(params, g);
  };
  const Executor executor(ExecutorOptionsFromFlags());
  const auto plan = executor.Prepare(UnfusedProgram(qkv, params.scale), 0, {"q", "k", "v", "do", "dq", "dk", "dv"});
  auto unfused = [&] { executor.Run(*plan, scope); };

  std::vector<double> fused_ms, unfused_ms;
  size_t fused_bytes = 0, unfused_bytes = 0;
  for (int step = 0; step < FLAGS_bench_warmup + FLAGS_bench_steps; ++step) {
    auto t0 = Clock::now();
    fused_bytes = std::max(fused_bytes, PeakBytes(fused));
    const double f = MsSince(t0);
    t0 = Clock::now();
    unfused_bytes = std::max(unfused_bytes, PeakBytes(unfused));
    const double n = MsSince(t0);
    if (step < FLAGS_bench_warmup) continue;
    fused_ms.push_back(f);
    unfused_ms.push_back(n);
  }
  const double flops = 14.0 * static_cast<double>(b * h) * static_cast<double>(s * s) * static_cast<double>(dh);
  const double fm = Median(fused_ms), um = Median(unfused_ms);
  const double fb = *std::min_element(fused_ms.begin(), fused_ms.end());
  const double ub = *std::min_element(unfused_ms.begin(), unfused_ms.end());
  std::printf(
      "{\"what\": \"attention\", \"batch\": %lld, \"heads\": %lld, \"seq_len\": %lld, \"head_dim\": %lld, "
      "\"isa\": \"%s\", \"threads\": %d, \"steps\": %d, \"fused_median_ms\": %.4f, \"unfused_median_ms\": %.4f, "
      "\"fused_min_ms\": %.4f, \"unfused_min_ms\": %.4f, \"fused_over_unfused\": %.3f, \"fused_gflops\": %.1f, "
      "\"fused_peak_bytes\": %zu, \"unfused_peak_bytes\": %zu}\n",
      static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(s), static_cast<long long>(dh),
      IsaName(params.isa), omp_get_max_threads(), FLAGS_bench_steps, fm, um, fb, ub, fm / um, flops / (fm * 1e6),
      fused_bytes, unfused_bytes);
  return 0;
}

}  // namespace kiln::tools
