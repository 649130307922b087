// Command-line flags (gflags). Defined here, read only at the tool edge
// (tools/), which turns them into options structs: passes, kernels and the
// executor never read flags themselves. Every flag can also be set as an
// environment variable FLAGS_<name> (see ApplyFlagsFromEnv).
#pragma once

#include <gflags/gflags.h>

#include "framework/executor.h"

// Kernels and executor.
DECLARE_bool(use_onednn);
DECLARE_bool(check_nan_inf);
DECLARE_bool(deterministic);
DECLARE_string(amp);
DECLARE_bool(free_intermediates);
DECLARE_bool(release_shape_only);
DECLARE_bool(recompute);
DECLARE_string(recompute_ops);

// Memory: the in-place pass, the caching allocator, the memory report.
DECLARE_bool(use_inplace);
DECLARE_bool(cache_allocations);
DECLARE_bool(memory_report);

// JIT clustering (build_jit_pass; turned into BuildJitPassOptions by
// BuildJitPassOptionsFromFlags in tools/pipeline_setup.h).
DECLARE_bool(use_jit);
DECLARE_bool(jit_profile);
DECLARE_string(jit_launch_mode);
DECLARE_int32(jit_cache_capacity);
DECLARE_int32(jit_recompile_limit);
DECLARE_string(jit_dynamic);
DECLARE_string(jit_isa);
DECLARE_bool(jit_fuse_elementwise);
DECLARE_bool(jit_reuse_buffers);
DECLARE_string(jit_allow_ops);
DECLARE_string(jit_deny_ops);
DECLARE_string(jit_deny_clusters);
DECLARE_int32(jit_min_cluster_size);
DECLARE_int32(jit_shadow_every);
DECLARE_double(jit_shadow_rtol);
DECLARE_double(jit_shadow_atol);
DECLARE_bool(fuse_attention);
DECLARE_bool(fuse_decompositions);

// The pass pipeline: the program after each pass (passes/pipeline.h).
DECLARE_string(dump_passes);

// JIT inspection (kiln dump, --jit_dump_dir, --jit_explain, --jit_verbose).
DECLARE_string(jit_dump_dir);
DECLARE_bool(jit_explain);
DECLARE_int32(jit_verbose);
DECLARE_bool(markdown);

// Training.
DECLARE_string(model);
DECLARE_string(dataset);
DECLARE_string(data_dir);
DECLARE_int32(epochs);
DECLARE_int32(batch_size);
DECLARE_int32(eval_batch_size);
DECLARE_int32(num_workers);
DECLARE_double(lr);
DECLARE_string(lr_schedule);
DECLARE_int32(grad_merge_steps);
DECLARE_bool(stop_on_nonfinite);
DECLARE_string(optimizer);
DECLARE_double(grad_clip_norm);
DECLARE_double(weight_decay);
DECLARE_uint64(seed);
DECLARE_string(metrics_out);
DECLARE_string(history);
DECLARE_string(trace);
DECLARE_int32(trace_steps);
DECLARE_int32(trace_warmup);
DECLARE_bool(data_parallel);
DECLARE_double(dp_bucket_mb);
DECLARE_int32(dp_check_every);
DECLARE_double(dp_timeout_s);
DECLARE_string(mlp_hidden);
DECLARE_int32(seq_len);
DECLARE_int32(d_model);
DECLARE_int32(num_heads);
DECLARE_int32(ffn_dim);
DECLARE_int32(synthetic_size);
DECLARE_string(resnet_widths);
DECLARE_int32(resnet_blocks);
DECLARE_int32(gpt_layers);
DECLARE_int32(vocab);
DECLARE_int32(max_steps);
DECLARE_bool(progress);
DECLARE_string(save_dir);
DECLARE_int64(save_every_steps);
DECLARE_int32(keep_checkpoints);
DECLARE_string(resume);
DECLARE_string(from);

// kiln run / kiln program.
DECLARE_string(program);
DECLARE_string(fetch);
DECLARE_string(out);
DECLARE_string(append_backward);
DECLARE_int32(steps);

// kiln bench.
DECLARE_string(bench_what);
DECLARE_int32(bench_churn_sizes);
DECLARE_int32(bench_warmup);
DECLARE_int32(bench_steps);
DECLARE_int32(bench_matmul_size);
DECLARE_int32(bench_copy_mib);

namespace kiln {

// For every defined flag NAME whose environment variable FLAGS_NAME is set,
// sets the flag from it. Call before parsing the command line so that the
// command line wins.
void ApplyFlagsFromEnv();

// --deterministic and --amp as oneDNN settings; allow_slow_impls stays off
// (no flag turns it on). Throws InvalidArgument for an --amp other than ""
// and "bf16"; whether this CPU runs bf16 is checked at start-up
// (tools/jit_setup.cc).
onednn::Settings OneDnnSettingsFromFlags();

// --use_onednn, --check_nan_inf, --free_intermediates, --release_shape_only
// and the oneDNN settings above.
ExecutorOptions ExecutorOptionsFromFlags();

}  // namespace kiln
