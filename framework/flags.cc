#include "framework/flags.h"

#include <cstdlib>
#include <vector>

DEFINE_bool(use_onednn, true, "Run ops through oneDNN kernels where they have one; false: reference C++ kernels only");
DEFINE_bool(check_nan_inf, false, "Stop at the first op that writes NaN or Inf and name it and the variable; feeds and parameters are checked at their first read, and JIT clusters after each kernel (with elementwise fusion off, so the op is named)");
DEFINE_bool(free_intermediates, true, "Free non-persistable intermediates after their last use");
DEFINE_bool(recompute, true, "Recompute activations the backward pass reads (those of the --recompute_ops types) from values it keeps anyway, instead of keeping them from the forward pass (recompute_pass)");
DEFINE_string(recompute_ops, "layer_norm", "Op types recompute_pass may copy into the backward pass; e.g. layer_norm,softmax,matmul,gelu also recomputes attention probabilities (matmul only as the scores feeding a recomputed op): less memory, more compute");
DEFINE_bool(release_shape_only, true, "Release an intermediate's buffer once only ops reading its shape remain (reshape2_grad's X, elementwise_add_grad's Y, ...); they keep its dims");
DEFINE_bool(deterministic, false, "Bitwise identical results across runs and thread counts on one machine: oneDNN primitives run single-threaded, and generated kernels sum over rows in chunks fixed by the shape, not by the thread count (see docs/jit.md)");
DEFINE_string(amp, "", "Mixed precision: bf16 runs matmuls and conv2d (forward and both gradients, framework kernels and JIT clusters) in bf16 with f32 accumulation, and the JIT's fused attention where the CPU has AMX tiles; the program's tensors, weights, optimizer state and every other op stay f32, while inside a compiled cluster a weight two bf16 matmuls read and values only bf16 matmuls read are kept in bf16 (empty: all f32; see docs/jit.md)");
DEFINE_bool(use_inplace, true, "Run activations, softmax, elementwise_add and sum in place when their input dies there (inplace_pass)");
DEFINE_bool(cache_allocations, true, "Keep freed tensor buffers on per-size-class free lists and reuse them; false: every buffer comes from and goes back to the system");
DEFINE_bool(memory_report, false, "kiln train: print peak tensor bytes, bytes allocated from the system, what in-place and buffer reuse saved, and the JIT's arena plans");

DEFINE_string(dump_passes, "", "Write the program as protobuf text before the pass pipeline and after each pass that runs: DIR/00_input.pbtxt, DIR/01_<first pass>.pbtxt, ... (kiln train: the training program, the evaluation program in DIR/forward/; kiln run, kiln dump, kiln bench)");

DEFINE_bool(jit_profile, false, "JIT: time every compiled instruction and print a table per kernel at the end of kiln train / kiln bench");
DEFINE_bool(use_jit, false, "JIT: cluster supported ops and run them as compiled code (jit_launch)");
DEFINE_string(jit_launch_mode, "runtime", "JIT: run compiled clusters through the runtime (runtime) or as jit_kernel ops through the executor (executor)");
DEFINE_int32(jit_cache_capacity, 256, "JIT: compiled objects kept in the cache (LRU)");
DEFINE_string(jit_dynamic, "auto", "JIT: off = every shape signature of a cluster compiles on its own; auto = the first compiles specialised, and when input dims change the cluster compiles once more with those dims symbolic, one object for every value of them (a value it cannot serve compiles on its own); on = the dims the program declares -1 are symbolic from the first compile");
DEFINE_int32(jit_recompile_limit, 8, "JIT: shape signatures a cluster may compile for; past them it compiles no more: a new signature runs through the framework ops, the ones still cached stay compiled");
DEFINE_string(jit_isa, "", "JIT: instruction set of generated code, avx512 or avx2 (default: the best this CPU has)");
DEFINE_bool(jit_fuse_elementwise, true, "JIT: compile groups of elementwise ops into one generated kernel");
DEFINE_bool(jit_reuse_buffers, true, "JIT: reuse dead intermediates' memory inside a cluster's arena");
DEFINE_string(jit_allow_ops, "", "JIT: cluster only these op types (comma-separated; default: every type with a JIT lowering)");
DEFINE_string(jit_deny_ops, "", "JIT: never cluster these op types (comma-separated)");
DEFINE_string(jit_deny_clusters, "", "JIT: run these clusters (keys as kiln dump and --jit_explain print them, comma-separated) on framework kernels: the first thing to try when a compiled cluster is suspected");
DEFINE_int32(jit_shadow_every, 0, "JIT: every N-th launch of each cluster (the first included) also runs the cluster's framework ops on copies of its inputs and compares the outputs; a cluster that differs beyond --jit_shadow_rtol/--jit_shadow_atol is reported once and runs on framework kernels from then on (0: off)");
DEFINE_double(jit_shadow_rtol, 1e-3, "JIT shadow checks: relative tolerance (an element fails when |jit - framework| > atol + rtol * |framework|, or when exactly one is NaN, or they are different infinities)");
DEFINE_double(jit_shadow_atol, 1e-5, "JIT shadow checks: absolute tolerance");
DEFINE_int32(jit_min_cluster_size, 2, "JIT: smallest number of ops worth a jit_launch");
DEFINE_bool(fuse_attention, true, "JIT: rewrite scaled dot-product attention (matmul, softmax or its causal variant, matmul) and its grad ops into fused_attention ops, whose tiled kernels never store the probabilities (attention_fusion_pass; only with the JIT on)");
DEFINE_bool(fuse_decompositions, true, "Turn an exporter's decomposed LayerNorm (reduce_mean, sub, pow 2, reduce_mean, add eps, sqrt, div, [mul, add]) and erf GELU back into layer_norm and gelu (decomposition_fusion_pass: kiln import runs it on the imported program before any backward exists, and the pass pipeline first)");
DEFINE_string(jit_dump_dir, "", "JIT: write each cluster's dump (IR, kernels, disassembly, aliases) to DIR/cluster_<id>_<key>_s<n>/ as it compiles (kiln train, kiln run)");
DEFINE_bool(jit_explain, false, "JIT: print at the end of kiln train / kiln run what was compiled and why the other ops were not (the short kiln dump index)");
DEFINE_int32(jit_verbose, 0, "JIT: log level on stderr; >= 1 logs every recompile of a cluster with the inputs whose shape changed");
DEFINE_bool(markdown, false, "kiln flags / kiln ops: print a Markdown table (docs/flags.md, docs/ops.md)");

DEFINE_string(model, "mlp", "Model to build: mlp | cnn | transformer | resnet | gpt");
DEFINE_string(dataset, "", "Dataset: digits | fashion-mnist | synthetic (default: digits, synthetic for the transformer, resnet and gpt; resnet takes all three, 3x32x32 images when synthetic; gpt only synthetic token sequences)");
DEFINE_string(data_dir, "", "Where the dataset files are (default: tools/data for digits, /usr/share/datasets/fashion-mnist)");
DEFINE_int32(epochs, 10, "Training epochs");
DEFINE_int32(batch_size, 32, "Samples per training step");
DEFINE_int32(eval_batch_size, 0, "Samples per evaluation step (0: --batch_size)");
DEFINE_int32(num_workers, 1, "kiln train: threads that make the next mini-batches (gather their rows, or generate synthetic ones) while the step runs, each up to 2 batches ahead (0: each batch is made in the training loop, between steps); the batches and the results are the same for any value");
DEFINE_double(lr, 0.1, "Learning rate (a finite number > 0)");
DEFINE_string(lr_schedule, "", "A learning-rate schedule over --lr, run in the program (with --use_jit, inside the compiled cluster of the updates) and saved in checkpoints: cosine:T_max=N[,eta_min=F] | exponential:gamma=F | piecewise:boundaries=N/N,values=F/F/F | noam:d_model=N,warmup_steps=N, each optionally with ,warmup=N[,start_lr=F] (a linear warmup to --lr first); or warmup:warmup=N[,start_lr=F] (empty: constant --lr)");
DEFINE_int32(grad_merge_steps, 1, "kiln train: gradient accumulation (Paddle's GradientMergeOptimizer): update every N steps with the mean gradient of their N batches, as one step at N times --batch_size would; the partial sums are saved in checkpoints (1: every step)");
DEFINE_bool(stop_on_nonfinite, true, "kiln train: stop with an error naming the step and the last finite loss when the loss becomes NaN or Inf");
DEFINE_double(grad_clip_norm, 0, "Clip the gradients by their global norm (Paddle's ClipGradByGlobalNorm): each step multiplies every gradient by F / max(global norm, F) inside the update kernels, before weight decay (0: no clipping)");
DEFINE_string(optimizer, "sgd", "Optimizer: sgd | momentum | adam | adamw (decoupled weight decay, 0.01 unless --weight_decay)");
DEFINE_double(weight_decay, -1, "Weight decay F (finite, >= 0): L2 for sgd, momentum and adam (grad + F * param, as PyTorch's weight_decay), decoupled for adamw (param *= 1 - lr * F); left out (-1): the optimizer's default, 0.01 for adamw and 0 for the others");
DEFINE_uint64(seed, 1, "Seed of parameter initialisation, shuffling and synthetic data");
DEFINE_string(metrics_out, "", "Write training metrics as JSON to this file");
DEFINE_string(history, "", "kiln train: write one JSON line per step (step, loss, samples/s, step ms) and per epoch (test accuracy) to this file");
DEFINE_string(trace, "", "kiln train / kiln run: write a step trace (Chrome trace event JSON: one span per op, compiled kernel and compile, per thread) that Perfetto and chrome://tracing open");
DEFINE_int32(trace_steps, 5, "kiln train --trace: steps to record");
DEFINE_int32(trace_warmup, 2, "kiln train --trace: steps to run before recording (they include the compiles)");
DEFINE_bool(data_parallel, false, "kiln train under mpirun: each rank trains its shard of every global batch (--batch_size), gradients averaged over the ranks (MPI)");
DEFINE_double(dp_bucket_mb, 25, "--data_parallel: gradients averaged together in buckets of about this many MiB, each started as soon as the backward pass has made it");
DEFINE_int32(dp_check_every, 0, "--data_parallel: every N steps compare a checksum of every parameter across the ranks and fail naming the first that differs (0: never)");
DEFINE_double(dp_timeout_s, 300, "--data_parallel: seconds a rank waits for the others before the job is aborted (a rank died or hangs)");
DEFINE_string(mlp_hidden, "128", "Hidden layer sizes of the MLP, comma-separated");
DEFINE_int32(seq_len, 16, "Transformer and gpt: sequence length (gpt predicts seq_len next tokens; a sample holds seq_len + 1)");
DEFINE_int32(d_model, 32, "Transformer and gpt: model width");
DEFINE_int32(num_heads, 4, "Transformer and gpt: attention heads (must divide --d_model)");
DEFINE_int32(ffn_dim, 64, "Transformer and gpt: feed-forward width");
DEFINE_string(resnet_widths, "32,64,128,256", "Resnet: channels of each stage, comma-separated (one stage per width; each stage after the first halves the image)");
DEFINE_int32(resnet_blocks, 2, "Resnet: basic blocks per stage");
DEFINE_int32(gpt_layers, 4, "Gpt: decoder blocks");
DEFINE_int32(vocab, 256, "Gpt: vocabulary size (token ids 0 .. vocab-1)");
DEFINE_int32(synthetic_size, 2048, "Synthetic dataset: number of sequences (80% train, 20% test)");
DEFINE_int32(max_steps, 0, "Stop training after this many steps (0: no limit)");
DEFINE_bool(progress, true, "On a terminal, show a progress bar with an ETA (kiln train; kiln run and kiln bench when they run over a second)");
DEFINE_string(save_dir, "", "kiln train: write checkpoints (parameters, optimizer state, the loop's position) under DIR/ckpt-<step>/ every --save_every_steps steps and after the last step");
DEFINE_int64(save_every_steps, 0, "kiln train: steps between checkpoints (0: only after the last step)");
DEFINE_int32(keep_checkpoints, 0, "kiln train: keep the newest K checkpoints in --save_dir (0: all)");
DEFINE_string(from, "", "kiln export: the checkpoint to export; kiln run: a checkpoint whose vars set the program's persistable vars once, as --feed would (kiln import's DIR, a ckpt-<step> folder, or a --save_dir: its newest); kiln train: the DIR kiln import wrote, whose classifier (DIR/program.pbtxt unless --program) trains in place of --model");
DEFINE_string(resume, "", "kiln train: continue from this checkpoint (a ckpt-<step> folder, or a --save_dir: its newest); the model flags and --batch_size must be those of the run that wrote it");

DEFINE_string(program, "", "Program file (.pbtxt text, otherwise binary); kiln train: the imported program to train, with --from DIR (default DIR/program.pbtxt)");
DEFINE_string(fetch, "", "Variables to fetch, comma-separated");
DEFINE_string(out, "", "Output directory (kiln run, kiln import, kiln export, kiln predict) or file (kiln program, kiln plot)");
DEFINE_string(append_backward, "", "Insert the backward ops of this loss variable before running");
DEFINE_int32(steps, 1, "Times to run the program");

// kiln bench.
DEFINE_string(bench_what, "model", "kiln bench: what to time: model (training steps of --model), matmul (oneDNN f32 matmul), copy (memcpy bandwidth), churn (a training step of --model for each of --bench_churn_sizes batch sizes, with cache sizes and RSS), attention (the JIT's fused attention kernels against the unfused oneDNN ops, forward and backward, at --batch_size, --num_heads, --seq_len, --d_model), compile (one training step of --model with --use_jit: each cluster's compile time and its phases)");
DEFINE_int32(bench_churn_sizes, 10000, "kiln bench --bench_what churn: batch sizes 1..N, each once in a seeded random order");
DEFINE_int32(bench_warmup, 5, "kiln bench: untimed steps first (they include JIT compiles)");
DEFINE_int32(bench_steps, 20, "kiln bench: timed steps");
DEFINE_int32(bench_matmul_size, 1024, "kiln bench --bench_what matmul: M = N = K");
DEFINE_int32(bench_copy_mib, 256, "kiln bench --bench_what copy: MiB copied per step (more than the last-level cache)");

namespace kiln {

void ApplyFlagsFromEnv() {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  for (const auto& f : flags) {
    const std::string env = "FLAGS_" + f.name;
    if (const char* value = std::getenv(env.c_str())) {
      if (gflags::SetCommandLineOption(f.name.c_str(), value).empty()) {
        ThrowInvalidArgument("environment variable ", env, "='", value, "' is not a valid value for --", f.name);
      }
    }
  }
}

onednn::Settings OneDnnSettingsFromFlags() {
  if (!FLAGS_amp.empty() && FLAGS_amp != "bf16") {
    ThrowInvalidArgument("unknown --amp '", FLAGS_amp, "': expected bf16, or empty for f32 throughout");
  }
  onednn::Settings s;
  s.deterministic = FLAGS_deterministic;
  s.amp_compute = FLAGS_amp.empty() ? ComputeType::kF32 : ComputeType::kBF16;
  return s;
}

ExecutorOptions ExecutorOptionsFromFlags() {
  ExecutorOptions o;
  o.use_onednn = FLAGS_use_onednn;
  o.check_nan_inf = FLAGS_check_nan_inf;
  o.free_intermediates = FLAGS_free_intermediates;
  o.release_shape_only = FLAGS_release_shape_only;
  o.onednn = OneDnnSettingsFromFlags();
  return o;
}

}  // namespace kiln
