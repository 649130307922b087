#include "framework/flags.h"

#include <cstdlib>
#include <vector>

DEFINE_bool(use_onednn, true, "Run ops through oneDNN kernels where they have one; false: reference C++ kernels only");
DEFINE_bool(check_nan_inf, false, "Stop at the first op that writes NaN or Inf and name it and the variable");
DEFINE_bool(free_intermediates, true, "Free non-persistable intermediates after their last use");

DEFINE_bool(use_jit, false, "JIT: cluster supported ops and run them as compiled code (jit_launch)");
DEFINE_string(jit_launch_mode, "runtime", "JIT: run compiled clusters through the runtime (runtime) or as jit_kernel ops through the executor (executor)");
DEFINE_int32(jit_cache_capacity, 256, "JIT: compiled objects kept in the cache (LRU)");
DEFINE_int32(jit_recompile_limit, 8, "JIT: shape signatures a cluster may compile for before it runs through the framework ops");
DEFINE_string(jit_isa, "", "JIT: instruction set of generated code, avx512 or avx2 (default: the best this CPU has)");
DEFINE_bool(jit_fuse_elementwise, true, "JIT: compile groups of elementwise ops into one generated kernel");
DEFINE_bool(jit_reuse_buffers, true, "JIT: reuse dead intermediates' memory inside a cluster's arena");
DEFINE_string(jit_allow_ops, "", "JIT: cluster only these op types (comma-separated; default: every type with a JIT lowering)");
DEFINE_string(jit_deny_ops, "", "JIT: never cluster these op types (comma-separated)");
DEFINE_int32(jit_min_cluster_size, 2, "JIT: smallest number of ops worth a jit_launch");

DEFINE_string(model, "mlp", "Model to build: mlp | cnn | transformer");
DEFINE_string(dataset, "", "Dataset: digits | fashion-mnist | synthetic (default: digits, synthetic for the transformer)");
DEFINE_string(data_dir, "", "Where the dataset files are (default: tools/data for digits, /usr/share/datasets/fashion-mnist)");
DEFINE_int32(epochs, 10, "Training epochs");
DEFINE_int32(batch_size, 32, "Samples per training step");
DEFINE_double(lr, 0.1, "Learning rate");
DEFINE_string(optimizer, "sgd", "Optimizer: sgd | momentum | adam");
DEFINE_uint64(seed, 1, "Seed of parameter initialisation, shuffling and synthetic data");
DEFINE_string(metrics_out, "", "Write training metrics as JSON to this file");
DEFINE_string(mlp_hidden, "128", "Hidden layer sizes of the MLP, comma-separated");
DEFINE_int32(seq_len, 16, "Transformer: sequence length");
DEFINE_int32(d_model, 32, "Transformer: model width");
DEFINE_int32(num_heads, 4, "Transformer: attention heads");
DEFINE_int32(ffn_dim, 64, "Transformer: feed-forward width");
DEFINE_int32(synthetic_size, 2048, "Synthetic dataset: number of sequences (80% train, 20% test)");
DEFINE_int32(max_steps, 0, "Stop training after this many steps (0: no limit)");
DEFINE_bool(progress, true, "Show a progress bar while training");

DEFINE_string(program, "", "Program file (.pbtxt text, otherwise binary)");
DEFINE_string(fetch, "", "Variables to fetch, comma-separated");
DEFINE_string(out, "", "Output directory (kiln run) or file (kiln program)");
DEFINE_string(append_backward, "", "Insert the backward ops of this loss variable before running");
DEFINE_int32(steps, 1, "Times to run the program");

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

ExecutorOptions ExecutorOptionsFromFlags() {
  ExecutorOptions o;
  o.use_onednn = FLAGS_use_onednn;
  o.check_nan_inf = FLAGS_check_nan_inf;
  o.free_intermediates = FLAGS_free_intermediates;
  return o;
}

}  // namespace kiln
