#!/usr/bin/python3
"""Variable sequence length: a 2-layer causal LM (d 128, batch 16) whose
sequence length cycles over 12 values (16, 32, ..., 192) as bucketed text
batches do, trained for 60 steps by kiln with the JIT on, kiln with the JIT
off and PyTorch eager, each in its own process at the same thread count.

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/varlen.py [--threads 2,1] [--no_docs]

What is timed: each side first takes --warmup_steps steps at --warmup_length
(not one of the 12 lengths), untimed; then the 60 steps cycle through the
lengths in order, and the total is their wall time, so it includes every
compile a new length causes (as a user sees them) and no data preparation
(batches are drawn before the loop). A length's step time is the median of
its occurrences after its first (the first compiles). Every run is repeated
--rounds times, interleaved; a total is the lowest over rounds, a step time
the lowest of the rounds' medians (load on a shared machine only slows a
run). "Specialised" is kiln
with the JIT on in a process that trains only that length, warm: what a
compile made for that length alone gives. A fourth run, kiln with
--jit_recompile_limit raised to --high_limit, shows what compiling every
length costs in total. Compiles per cluster come from the JIT's
--jit_verbose recompile lines; limit lines say where a cluster stopped
compiling (past --jit_recompile_limit its new lengths run the framework ops).

Rewrites the "Variable sequence length (varlen)" section of
docs/benchmarks.md (--out_dir, --no_docs). Issue 32's targets are printed
against the figures; nothing fails on a timing.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_vs_pytorch as bvp  # noqa: E402 (the environment and process helpers)
from bench_report import md_table, replace_section, text_table  # noqa: E402
import varlen_report  # noqa: E402
from varlen_worker import worker  # noqa: E402

SIDES = ("jit", "nojit", "torch", "jit_all")  # jit_all: JIT on with --high_limit


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true",
                   help="smoke test: a tiny model, 3 lengths, 6 steps, 1 thread; PyTorch skipped when missing")
    p.add_argument("--threads", default="2,1", help="thread counts, comma-separated")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lengths", default=",".join(str(16 * i) for i in range(1, 13)))
    p.add_argument("--warmup_length", type=int, default=8, help="the warm-up's length: not one of --lengths")
    p.add_argument("--warmup_steps", type=int, default=3)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--recompile_limit", type=int, default=0,
                   help="--jit_recompile_limit of the JIT-on side (0: kiln's default)")
    p.add_argument("--high_limit", type=int, default=100, help="--jit_recompile_limit of the every-length run")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every run; a figure is the best round's")
    p.add_argument("--spec_warmup", type=int, default=2, help="untimed steps of a specialised run (compiles)")
    p.add_argument("--spec_steps", type=int, default=8, help="timed steps of a specialised run")
    p.add_argument("--out_dir", default=os.path.join(bvp.REPO, "docs"), help="where benchmarks.md is")
    p.add_argument("--no_docs", action="store_true", help="print the tables only")
    p.add_argument("--json", default="", help="also write every run's raw figures (and JIT log lines) here")
    p.add_argument("--note", default="", help="a paragraph for the docs (what this run is before or after)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per measured process")
    p.add_argument("--idle_wait", type=float, default=5.0,
                   help="before each measurement, wait up to this many seconds for no other runnable task")
    # Worker mode (one measurement in its own process).
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--schedule", help=argparse.SUPPRESS)
    p.add_argument("--warm_schedule", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tiny:
        args.threads, args.steps, args.lengths, args.warmup_length, args.warmup_steps = "1", 6, "4,8,12", 2, 1
        args.d, args.heads, args.layers, args.batch, args.recompile_limit = 16, 2, 1, 2, 2
        args.spec_warmup, args.spec_steps, args.idle_wait, args.rounds = 1, 2, 0.0, 1
    return args


def spec_of(args, lengths):
    return {"d": args.d, "heads": args.heads, "layers": args.layers, "batch": args.batch,
            "max_len": max(lengths + [args.warmup_length])}


def measure(args, threads, side, spec, warm, schedule, limit=0):
    """One worker process: its JSON, with the 1-minute load average after it."""
    cmd = [bvp.DEBIAN_PYTHON, os.path.abspath(__file__), "--worker", "--side", "torch" if side == "torch" else
           ("nojit" if side == "nojit" else "jit"), "--threads", str(threads), "--spec", json.dumps(spec),
           "--warm_schedule", ",".join(map(str, warm)), "--schedule", ",".join(map(str, schedule)),
           "--recompile_limit", str(limit)]
    r = bvp.run_json(cmd, threads, args.timeout, args.idle_wait, peer=side == "torch")
    r["load_after"] = os.getloadavg()[0]
    return r


def run_threads(args, threads, lengths, have_torch):
    """--rounds of the four runs over the cycle and of one specialised run per length."""
    spec = spec_of(args, lengths)
    schedule = [lengths[i % len(lengths)] for i in range(args.steps)]
    warm = [args.warmup_length] * args.warmup_steps
    limits = {"jit": args.recompile_limit, "nojit": 0, "torch": 0, "jit_all": args.high_limit}
    runs = {side: [] for side in SIDES if side != "torch" or have_torch}
    special = {length: [] for length in lengths}
    for rnd in range(args.rounds):  # interleaved, so a burst of load hits one round of each side at most
        for side in runs:
            runs[side].append(measure(args, threads, side, spec, warm, schedule, limits[side]))
            bvp.log("varlen: %d thr, round %d: %-7s total %.2f s (load %.1f)" %
                    (threads, rnd + 1, side, runs[side][-1]["total_s"], runs[side][-1]["load_after"]))
        for length in lengths:
            special[length].append(measure(args, threads, "jit", spec, [length] * args.spec_warmup,
                                           [length] * args.spec_steps))
    counts = {r["params"] for rs in runs.values() for r in rs}
    if len(counts) != 1:
        raise RuntimeError("varlen: kiln and PyTorch models differ in parameter count: %s" % sorted(counts))
    return {"runs": runs, "special": special, "schedule": schedule}


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        args.threads = int(args.threads)
        args.recompile_limit = args.recompile_limit or None
        worker(args)
        return 0
    if os.path.realpath(sys.executable) != os.path.realpath(bvp.DEBIAN_PYTHON) and os.path.exists(bvp.DEBIAN_PYTHON):
        os.execv(bvp.DEBIAN_PYTHON, [bvp.DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    lengths = [int(v) for v in args.lengths.split(",") if v]
    if args.warmup_length in lengths:
        bvp.log("varlen: --warmup_length %d is one of --lengths: its compile would not count" % args.warmup_length)
        return 2
    threads_list = [int(t) for t in args.threads.split(",") if t]
    have_torch = bvp.ensure_packages(install=False)
    tinfo = bvp.torch_info() if have_torch else None
    if not tinfo and not args.tiny:
        bvp.log("varlen: PyTorch is not importable by %s; install %s" % (bvp.DEBIAN_PYTHON, " ".join(bvp.APT_PACKAGES)))
        return 2
    env = varlen_report.environment(args, bvp, tinfo)
    print("\n".join(env["lines"]))
    start, load = time.time(), [os.getloadavg()[0]]
    results = {t: run_threads(args, t, lengths, tinfo is not None) for t in threads_list}
    load.append(os.getloadavg()[0])
    env["seconds"], env["load"] = time.time() - start, load
    tables, problems = [], []
    for t in threads_list:
        summary = varlen_report.summarise(results[t], lengths)
        problems += summary["problems"]
        tables.append((t, summary))
        print("\n%d thread(s)" % t)
        for header, rows in varlen_report.tables(summary, lengths):
            print(text_table(header, rows))
        print("\n".join(varlen_report.target_lines(summary)))
    print("\n(%.0f s; 1-minute load average %.2f at the start, %.2f at the end)" % ((env["seconds"],) + tuple(load)))
    for p in problems:
        bvp.log("varlen: " + p)
    if not args.no_docs:
        os.makedirs(args.out_dir, exist_ok=True)
        section = varlen_report.markdown(args, env, tables, lengths, md_table, bvp.kiln_revision())
        replace_section(os.path.join(args.out_dir, "benchmarks.md"), section, varlen_report.SECTION)
        print("wrote %s" % os.path.join(args.out_dir, "benchmarks.md"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(t): results[t] for t in threads_list}, f, indent=1, sort_keys=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
