// kiln bench --bench_what attention (tools/bench_attention.cc): the JIT's
// fused attention kernels against the unfused oneDNN ops they replace.
#pragma once

namespace kiln::tools {

// Prints one JSON line; the JIT must be configured (ConfigureJitFromFlags).
int BenchAttention();

}  // namespace kiln::tools
