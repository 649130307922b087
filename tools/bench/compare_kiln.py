#!/usr/bin/python3
"""Two kiln builds side by side: training-step time with the JIT on, for the
configurations of bench_vs_pytorch.py, the two binaries alternating round by
round (so both see the same machine), each measurement its own process.

    /usr/bin/python3 tools/bench/compare_kiln.py --a OLD/kiln --b build/tools/kiln [--threads 1,2] [--rounds 5]

Prints per (model, threads) the median step of each side and B/A. A ratio
below 1 means B is faster. Times nothing against a bound.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_vs_pytorch as bench  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="the baseline kiln binary")
    p.add_argument("--b", required=True, help="the kiln binary compared with it")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--only", default="", help="configurations, comma-separated (e.g. 'cnn b64')")
    p.add_argument("--side", default="jit", choices=["jit", "nojit"])
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--idle_wait", type=float, default=5.0)
    args = p.parse_args()
    configs = bench.FULL_CONFIGS
    if args.only:
        wanted = {s.strip() for s in args.only.split(",")}
        configs = [c for c in configs if c[0] in wanted]
    threads_list = [int(t) for t in args.threads.split(",") if t]
    rows = []
    for threads in threads_list:
        for cfg in configs:
            times = {"a": [], "b": []}
            for _ in range(args.rounds):
                for side, binary in (("a", args.a), ("b", args.b)):
                    r = bench.run_json(bench.kiln_cmd(binary, cfg, args.side, args), threads, args.timeout,
                                       args.idle_wait)
                    times[side].append(r["median_ms"])
            a, b = bench.median(times["a"]), bench.median(times["b"])
            rows.append((cfg[0], threads, a, b, b / a))
            print("%-15s %d thr: A %.3f ms  B %.3f ms  B/A %.3f" % rows[-1], file=sys.stderr, flush=True)
    print("| model | threads | A ms | B ms | B/A |")
    print("|---|---|---|---|---|")
    for name, threads, a, b, ratio in rows:
        print("| %s | %d | %.3f | %.3f | %.2f |" % (name, threads, a, b, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
