// The fused attention kernels (attention_kernels.h) as runtime::Kernels of a
// compiled object (the fused_attention lowering step makes them). Their tile
// loops size themselves from AttentionParams::shape at run time, so Resize
// gives a kernel for new batch, heads or sequence lengths at no cost beyond
// a copy of the parameters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/kernels/attention/attention_kernels.h"
#include "runtime/program.h"

namespace kiln::jit {

// "kiln tiled attention forward (causal), 8 heads, 128 queries x 128 keys,
// head dims 64/64", without the ISA (lowering.txt reads the same on any CPU).
std::string DescribeAttention(const AttentionParams& p, bool backward);

// `grads` empty: the forward, arguments Q, K, V -> Out, LSE. Else the
// backward, arguments Q, K, V, Out, LSE, dOut -> those of dQ, dK, dV that
// grads[0..2] want, in that order. Q [..., sq, d], K [..., sk, d], V [...,
// sk, dv], their leading dims the heads. Resize takes new leading dims, sq
// and sk (d and dv stay; sq == sk when causal).
std::shared_ptr<const runtime::Kernel> MakeAttentionKernel(const std::string& name, const AttentionParams& params,
                                                           const std::vector<bool>& grads);

}  // namespace kiln::jit
