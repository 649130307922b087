#!/usr/bin/python3
"""An alpha-beta cost model of kiln's data-parallel step: bucketed ring
allreduce of the gradients, overlapped with the backward pass. Prints the
Markdown tables of docs/distributed.md.

    /usr/bin/python3 tools/bench/dp_cost_model.py

Ring allreduce of M bytes over p nodes (Patarasuk & Yuan 2009; Thakur et al.
2005): 2(p-1) steps, each sending M/p bytes,
    T(M, p) = 2(p-1) * alpha + 2 (p-1)/p * M / B
with alpha the per-message latency and B the link bandwidth (the reduction's
arithmetic, M/p floats per step, is far below the link time on a CPU and is
left out). With buckets of b bytes the gradients go as k = ceil(M / b)
allreduces, k * 2(p-1) * alpha of latency in all.

Overlap: the backward pass makes the gradients from the last layer to the
first; bucket i can start once its gradients exist. Modelling the gradients
as made at a constant rate over the backward time T_bwd, bucket i is ready
at (i+1)/k * T_bwd, and the allreduces run one after another on the
communication thread. The step then ends when the last allreduce does:
    finish = max over i of (ready_i + sum of the durations of buckets i..k-1)
and the exposed communication is finish - T_bwd (at least the last bucket's
time: its gradients appear at the very end). Scaling efficiency =
T_compute / (T_compute + exposed).
"""

import math

LINKS = {
    "25 GB/s (HDR InfiniBand class)": (25e9, 2e-6),
    "100 Gb/s (12.5 GB/s Ethernet, RoCE)": (12.5e9, 8e-6),
}

# Compute per step at a per-node batch on one 2-socket CPU node: FLOPs per
# sample (forward + backward = 3x forward) over an assumed 1.5 TFLOP/s of
# sustained fp32 (a 64-core AVX-512 node at about 40% of its peak).
NODE_FLOPS = 1.5e12
MODELS = {
    # name: (parameters, forward FLOPs per sample, samples per node per step)
    "ResNet-50 (25.6 M parameters, 4.1 GFLOP/image, 32 images/node)": (25.6e6, 4.1e9, 32),
    "transformer, BERT-base size (110 M parameters, seq 128: 11 GFLOP/sample, 32 samples/node)": (110e6, 11.2e9, 32),
}
NODES = [8, 16, 32, 64, 128, 256]
BUCKET_MB = [1, 4, 25, 100]


def ring(m_bytes, p, bw, alpha):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * m_bytes / bw


def step(params, flops, batch, p, bw, alpha, bucket_bytes, backward_share=2 / 3):
    """(compute s, exposed communication s, efficiency)."""
    compute = 3 * flops * batch / NODE_FLOPS
    t_bwd = compute * backward_share
    m = params * 4
    k = max(1, math.ceil(m / bucket_bytes))
    sizes = [min(bucket_bytes, m - i * bucket_bytes) for i in range(k)]
    durations = [ring(s, p, bw, alpha) for s in sizes]
    finish = 0.0
    for i in range(k):
        ready = (i + 1) / k * t_bwd
        finish = max(finish, ready) + durations[i]
    exposed = max(durations[-1], finish - t_bwd)
    return compute, exposed, compute / (compute + exposed)


def main():
    for model, (params, flops, batch) in MODELS.items():
        print("\n### %s\n" % model)
        compute = 3 * flops * batch / NODE_FLOPS
        print("Compute per step: %.0f ms; gradients: %.0f MB.\n" % (compute * 1e3, params * 4 / 1e6))
        print("| link | bucket | " + " | ".join("%d nodes" % p for p in NODES) + " |")
        print("|---|---|" + "---|" * len(NODES))
        for link, (bw, alpha) in LINKS.items():
            for mb in BUCKET_MB:
                cells = []
                for p in NODES:
                    _, exposed, eff = step(params, flops, batch, p, bw, alpha, mb * 2**20)
                    cells.append("%.1f%% (%.1f ms)" % (100 * eff, exposed * 1e3))
                print("| %s | %d MiB | %s |" % (link, mb, " | ".join(cells)))
    print("\nBalance point of one bucket (latency term = bandwidth term): b* = p * alpha * B")
    for link, (bw, alpha) in LINKS.items():
        print("- %s: " % link + ", ".join("%d nodes %.1f MiB" % (p, p * alpha * bw / 2**20) for p in NODES))


if __name__ == "__main__":
    main()
