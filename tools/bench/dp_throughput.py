#!/usr/bin/python3
"""Data-parallel throughput on this machine: kiln train at 1 rank against 2
ranks under mpirun (one OpenMP thread each), JIT on, the runs alternating.

    /usr/bin/python3 tools/bench/dp_throughput.py [--kiln build/tools/kiln] [--rounds 3] [--steps 60]

For each model (MLP 784-1024-1024-10 on Fashion-MNIST, batch 128; LeNet CNN
on Fashion-MNIST, batch 64; transformer block seq 128, d_model 256, 4 heads,
FFN 1024 on synthetic data, batch 16; momentum) it runs one process, and
2 ranks with --dp_bucket_mb 25 (the default) and 1, and prints a Markdown
table: the best over rounds of each run's median step, the global batch's
samples per second, the speed-up over one process, and the communication
per step and the share of it hidden behind the backward pass (the mean over
the steps, from the `data parallel:` line rank 0 prints; the round with the
best step). Both ranks share this machine's cores with their communication
threads."""

import argparse
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = [
    ("mlp", 128, ["--model", "mlp", "--dataset", "fashion-mnist", "--mlp_hidden", "1024,1024"]),
    ("cnn", 64, ["--model", "cnn", "--dataset", "fashion-mnist"]),
    ("transformer", 16, ["--model", "transformer", "--dataset", "synthetic", "--seq_len", "128", "--d_model", "256",
                         "--num_heads", "4", "--ffn_dim", "1024"]),
]
STEP = re.compile(r"median step: ([0-9.]+) ms")
DP = re.compile(r"data parallel: \d+ ranks; ([0-9.]+) gradient averages of ([0-9.]+) KiB a step, ([0-9.]+) ms of "
                r"communication a step, ([0-9.]+) ms of it waited for: (\d+)% hidden")


def run(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    out = r.stdout + r.stderr
    m = STEP.search(out)
    if r.returncode != 0 or not m:
        raise SystemExit("dp_throughput: %s failed:\n%s" % (" ".join(cmd), out))
    d = DP.search(out)
    return {"ms": float(m.group(1)), "dp": d.groups() if d else None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=os.path.join(REPO, "build", "tools", "kiln"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    mpirun = ["mpirun", "-np", "2", "--oversubscribe", "-x", "OMP_NUM_THREADS=1"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    sides = [("1 process", [], None), ("2 ranks, 25 MiB buckets", mpirun, 25), ("2 ranks, 1 MiB buckets", mpirun, 1)]
    print("| model | batch | run | step ms | samples/s | speed-up | averages a step | KiB a step | "
          "communication ms a step | hidden |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, batch, flags in MODELS:
        common = flags + ["--batch_size", str(batch), "--optimizer", "momentum", "--lr", "0.01", "--max_steps",
                          str(args.steps), "--use_jit", "--seed", "1", "--progress=false"]
        best = {}
        for _ in range(args.rounds):
            for label, prefix, bucket in sides:
                extra = ["--data_parallel", "--dp_bucket_mb", str(bucket)] if bucket else []
                r = run(prefix + [args.kiln, "train"] + common + extra, env)
                if label not in best or r["ms"] < best[label]["ms"]:
                    best[label] = r
            print("dp_throughput: %s: " % name + ", ".join("%s %.3f ms" % (l, best[l]["ms"]) for l, _, _ in sides),
                  file=sys.stderr)
        one = best["1 process"]["ms"]
        for label, _, _ in sides:
            r = best[label]
            dp = r["dp"]
            cols = ["%s" % dp[0], "%s" % dp[1], "%s" % dp[2], "%s%%" % dp[4]] if dp else ["-"] * 4
            print("| %s | %d | %s | %.2f | %.0f | %.2fx | %s |" % (name, batch, label, r["ms"], batch / r["ms"] * 1e3,
                                                                   one / r["ms"], " | ".join(cols)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
