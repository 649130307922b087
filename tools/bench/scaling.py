#!/usr/bin/python3
"""Scaling curves of kiln against PyTorch, as SVG plots in docs/benchmarks.md.

    /usr/bin/python3 tools/bench/scaling.py [--threads 1] [--rounds 2] [--tiny] [--no_docs]

Three sweeps, every point its own process, the sides of a point alternating
within each round (a point's figure is the best of its rounds):

- batch (MLP 784-1024-1024-10, batch 1 to 1024): step time and memory;
- sequence length (transformer block, d_model 256, 4 heads, FFN 1024,
  batch 4, seq 128 to 2048): step time and memory;
- compile time against cluster size: a chain of 10 to 1000 elementwise ops
  that the JIT compiles as one cluster (`kiln run --use_jit`).

The sides are kiln with the JIT on and off, PyTorch eager fp32 and PyTorch
with bf16 autocast (`tools/bench/bench_vs_pytorch.py`'s worker, run as the
peer at its best), and kiln with `--amp bf16` where this CPU runs it. Memory
is kiln's peak tensor bytes during the steps (`kiln bench`'s
`peak_tensor_bytes`) and each side's peak RSS. --tiny runs small sizes for a
smoke test (written only into an explicit --out_dir). The section "## Scaling" of
docs/benchmarks.md and its SVGs are rewritten unless --no_docs."""

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_vs_pytorch as bvp  # noqa: E402

SECTION = "## Scaling"
MLP_FLAGS = ["--dataset", "fashion-mnist", "--mlp_hidden", "1024,1024"]
MLP_SPEC = {"input": 784, "hidden": [1024, 1024]}
COLORS = {"jit": "#1f77b4", "nojit": "#7f7f7f", "jit_bf16": "#17becf", "torch": "#d62728",
          "torch_bf16": "#ff9896"}
NAMES = {"jit": "kiln JIT", "nojit": "kiln JIT off", "jit_bf16": "kiln JIT bf16", "torch": "PyTorch",
         "torch_bf16": "PyTorch autocast bf16"}


def sides_of(kiln, have_torch):
    problem = bvp.kiln_bf16_problem(kiln)
    if problem:
        bvp.log("scaling: no kiln --amp bf16 curve: " + problem)
    sides = ["jit", "nojit"] + ([] if problem else ["jit_bf16"])
    return sides + (["torch", "torch_bf16"] if have_torch else [])


def measure(args, side, cfg):
    """One process: cfg = (name, model, batch, kiln flags, torch spec)."""
    if side.startswith("torch"):
        return bvp.run_json(bvp.torch_cmd(cfg, args.threads, args, side), args.threads, args.timeout,
                            args.idle_wait, peer=True)
    return bvp.run_json(bvp.kiln_cmd(args.kiln, cfg, side, args), args.threads, args.timeout, args.idle_wait)


def sweep(args, sides, configs):
    """{(x, side): best result} over args.rounds rounds, sides alternating."""
    best = {}
    for x, cfg in configs:
        for _ in range(args.rounds):
            for side in sides:
                r = measure(args, side, cfg)
                if (x, side) not in best or r["median_ms"] < best[(x, side)]["median_ms"]:
                    best[(x, side)] = r
        bvp.log("scaling: %s: " % cfg[0] + "  ".join(
            "%s %.3f ms" % (s, best[(x, s)]["median_ms"]) for s in sides))
    return best


def chain_program(n):
    """A program of n elementwise ops on x [64, 256] (and y), one cluster."""
    cycle = [("scale", None), ("tanh", None), ("elementwise_add", "y"), ("sigmoid", None),
             ("elementwise_mul", "y"), ("relu", None)]
    lines = ["version: 1", "blocks {", "  idx: 0", "  parent_idx: -1",
             '  vars { name: "x" dtype: FP32 dims: 64 dims: 256 }',
             '  vars { name: "y" dtype: FP32 dims: 64 dims: 256 }']
    for i in range(n):
        lines.append('  vars { name: "v%d" dtype: FP32 dims: 64 dims: 256 }' % i)
    prev = "x"
    for i in range(n):
        op, second = cycle[i % len(cycle)]
        ins = 'inputs { name: "X" args: "%s" }' % prev
        if second:
            ins += ' inputs { name: "Y" args: "%s" }' % second
        attrs = ' attrs { name: "scale" type: FLOAT f: 0.99 }' if op == "scale" else ""
        lines.append('  ops { type: "%s" %s outputs { name: "Out" args: "v%d" }%s }' % (op, ins, i, attrs))
        prev = "v%d" % i
    lines.append("}")
    return "\n".join(lines) + "\n", prev


def compile_times(args, sizes):
    """{n: best compile ms} of a chain of n ops (one compile each run)."""
    import numpy as np
    out = {}
    with tempfile.TemporaryDirectory(prefix="kiln-scaling-") as tmp:
        rng = np.random.default_rng(1)
        for name in ("x", "y"):
            np.save(os.path.join(tmp, name + ".npy"), rng.random((64, 256), dtype=np.float32))
        for n in sizes:
            text, last = chain_program(n)
            path = os.path.join(tmp, "chain%d.pbtxt" % n)
            with open(path, "w") as f:
                f.write(text)
            for _ in range(args.rounds + 1):
                r = subprocess.run([args.kiln, "run", "--program", path, "--feed", "x=" + tmp + "/x.npy",
                                    "--feed", "y=" + tmp + "/y.npy", "--fetch", last, "--out", tmp + "/out",
                                    "--use_jit", "--jit_explain"], capture_output=True, text=True,
                                   env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)), timeout=args.timeout)
                m = re.search(r"(\d+) compiles \(([0-9.]+) ms\)", r.stdout + r.stderr)
                c = re.search(r"jit explain: (\d+) clusters", r.stdout + r.stderr)
                if r.returncode != 0 or not m:
                    raise RuntimeError("scaling: chain of %d ops: %s%s" % (n, r.stdout, r.stderr))
                clusters = int(c.group(1)) if c else 0
                ms = float(m.group(2))
                if n not in out or ms < out[n]["ms"]:
                    out[n] = {"ms": ms, "compiles": int(m.group(1)), "clusters": clusters}
            bvp.log("scaling: chain of %d ops: %.2f ms to compile (%d compiles, %d clusters)"
                    % (n, out[n]["ms"], out[n]["compiles"], out[n]["clusters"]))
    return out


def svg_lines(title, xlabel, ylabel, series, xs):
    """Log-log line chart: series = [(label, color, {x: y}, dashed)]."""
    left, right, top, bottom, w, h = 70, 190, 40, 50, 460, 280
    ys = [v for _, _, pts, _ in series for v in pts.values() if v > 0]
    lo, hi = 10 ** math.floor(math.log10(min(ys))), 10 ** math.ceil(math.log10(max(ys)))
    hi = hi if hi > lo else lo * 10
    xl, xh = math.log10(min(xs)), math.log10(max(xs))

    def px(x):
        return left + w * (math.log10(x) - xl) / max(xh - xl, 1e-9)

    def py(y):
        return top + h - h * (math.log10(y) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="11">' % (left + w + right, top + h + bottom),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="20" font-size="13" font-weight="bold">%s</text>' % (left, title)]
    d = lo
    while d <= hi * 1.0001:
        s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (left, py(d), left + w, py(d)))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left - 4, py(d) + 4, d))
        d *= 10
    for x in xs:
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (px(x), top + h + 15, x))
    s.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (left + w // 2, top + h + 35, xlabel))
    s.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>'
             % (top + h // 2, top + h // 2, ylabel))
    for i, (label, color, pts, dashed) in enumerate(series):
        xy = [(px(x), py(pts[x])) for x in xs if pts.get(x, 0) > 0]
        if xy:
            s.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>'
                     % (color, ' stroke-dasharray="4 3"' if dashed else "", " ".join("%.1f,%.1f" % p for p in xy)))
            s += ['<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (x, y, color) for x, y in xy]
        ly = top + 10 + 16 * i
        s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                 % (left + w + 8, ly - 4, left + w + 24, ly - 4, color, ' stroke-dasharray="4 3"' if dashed else ""))
        s.append('<text x="%d" y="%d">%s</text>' % (left + w + 28, ly, label))
    return "\n".join(s + ["</svg>"]) + "\n"


def time_series(best, sides):
    return [(NAMES[s], COLORS[s], {x: r["median_ms"] for (x, side), r in best.items() if side == s}, False)
            for s in sides]


def memory_series(best, sides):
    out = []
    for s in sides:
        if not s.startswith("torch"):
            out.append(("%s tensors" % NAMES[s], COLORS[s],
                        {x: r["peak_tensor_bytes"] / 2**20 for (x, side), r in best.items() if side == s}, False))
    for s in sides:
        out.append(("%s RSS" % NAMES[s], COLORS[s],
                    {x: r["peak_rss_mib"] for (x, side), r in best.items() if side == s}, True))
    return out


def md_rows(best, sides, xs, xname):
    head = [xname] + ["%s ms" % NAMES[s] for s in sides] + \
           ["%s tensors MiB" % NAMES[s] for s in sides if not s.startswith("torch")] + \
           ["%s RSS MiB" % NAMES[s] for s in sides]
    rows = []
    for x in xs:
        row = [str(x)] + ["%.3f" % best[(x, s)]["median_ms"] for s in sides]
        row += ["%.2f" % (best[(x, s)]["peak_tensor_bytes"] / 2**20) for s in sides if not s.startswith("torch")]
        row += ["%.0f" % best[(x, s)]["peak_rss_mib"] for s in sides]
        rows.append(row)
    return bvp.md_table(head, rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=os.path.join(bvp.REPO, "build", "tools", "kiln"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--idle_wait", type=float, default=5.0)
    p.add_argument("--tiny", action="store_true",
                   help="smoke test: small sizes, one round; writes only into an explicit --out_dir")
    p.add_argument("--no_docs", action="store_true")
    p.add_argument("--out_dir", default=None, help="where benchmarks.md and the SVGs go (default docs/)")
    args = p.parse_args()
    batches, seqs, chains = [1, 4, 16, 64, 256, 1024], [128, 256, 512, 1024, 2048], [10, 30, 100, 300, 1000]
    if args.tiny:
        batches, seqs, chains = [1, 8], [8, 16], [10, 20]
        args.rounds, args.warmup, args.steps, args.idle_wait = 1, 1, 2, 0.0
        args.no_docs = args.no_docs or args.out_dir is None
    args.out_dir = args.out_dir or os.path.join(bvp.REPO, "docs")
    os.makedirs(args.out_dir, exist_ok=True)
    have_torch = bvp.ensure_packages(install=False)
    sides = sides_of(args.kiln, have_torch)
    mlp_flags, mlp_spec = (["--dataset", "digits", "--mlp_hidden", "32"], {"input": 64, "hidden": [32]}) \
        if args.tiny else (MLP_FLAGS, MLP_SPEC)
    mlp = [(b, ("mlp b%d" % b, "mlp", b, mlp_flags, mlp_spec)) for b in batches]
    d, heads, ffn = (16, 2, 32) if args.tiny else (256, 4, 1024)
    tf = [(s, ("transformer seq %d" % s, "transformer", 4,
               ["--dataset", "synthetic", "--seq_len", str(s), "--d_model", str(d), "--num_heads", str(heads),
                "--ffn_dim", str(ffn)], {"seq_len": s, "d_model": d, "num_heads": heads, "ffn_dim": ffn}))
          for s in seqs]
    by_batch, by_seq = sweep(args, sides, mlp), sweep(args, sides, tf)
    compile_ms = compile_times(args, chains)
    if args.no_docs:
        return 0
    plots = {
        "scaling_batch_time.svg": svg_lines("MLP step time against batch", "batch", "ms per step",
                                            time_series(by_batch, sides), batches),
        "scaling_batch_memory.svg": svg_lines("MLP memory against batch", "batch", "MiB",
                                              memory_series(by_batch, sides), batches),
        "scaling_seq_time.svg": svg_lines("Transformer step time against sequence length", "sequence length",
                                          "ms per step", time_series(by_seq, sides), seqs),
        "scaling_seq_memory.svg": svg_lines("Transformer memory against sequence length", "sequence length",
                                            "MiB", memory_series(by_seq, sides), seqs),
        "scaling_compile.svg": svg_lines("Compile time against cluster size", "elementwise ops in the cluster",
                                         "ms", [("kiln JIT", COLORS["jit"],
                                                 {n: c["ms"] for n, c in compile_ms.items()}, False)], chains),
    }
    for name, svg in plots.items():
        with open(os.path.join(args.out_dir, name), "w") as f:
            f.write(svg)
    cpu = bvp.cpu_info()
    out = [SECTION, "",
           "Measured on %s by `/usr/bin/python3 tools/bench/scaling.py --threads %d --rounds %d` on %s (%d logical "
           "CPUs), %d thread(s), kiln %s; PyTorch runs as the peer at its best, as above. Each point is the best "
           "of %d rounds of one process per side (%d warm-up and %d timed steps, median step), the sides "
           "alternating. Memory: kiln's peak tensor bytes during the steps (solid) and every side's peak RSS, "
           "libraries and data included (dashed)."
           % (datetime.date.today().isoformat(), args.threads, args.rounds, cpu["model"], cpu["cpus"],
              args.threads, bvp.kiln_revision(), args.rounds, args.warmup, args.steps), "",
           "![MLP step time against batch](scaling_batch_time.svg) ![MLP memory against batch]"
           "(scaling_batch_memory.svg)", "", md_rows(by_batch, sides, batches, "batch"), "",
           "![transformer step time against sequence length](scaling_seq_time.svg) ![transformer memory against "
           "sequence length](scaling_seq_memory.svg)", "", md_rows(by_seq, sides, seqs, "seq"), "",
           "Compile time of one cluster made of a chain of N elementwise ops on [64, 256] (scale, tanh, add, "
           "sigmoid, mul, relu, repeated; `kiln run --use_jit --jit_explain`, the compile time it reports, best of %d runs):"
           % (args.rounds + 1), "", "![compile time against cluster size](scaling_compile.svg)", "",
           bvp.md_table(["ops", "compile ms", "clusters", "compiles"],
                        [[str(n), "%.2f" % compile_ms[n]["ms"], str(compile_ms[n]["clusters"]),
                          str(compile_ms[n]["compiles"])] for n in chains]),
           ""]
    bvp.replace_section(os.path.join(args.out_dir, "benchmarks.md"), "\n".join(out), SECTION)
    with open(os.path.join(args.out_dir, "scaling.json"), "w") as f:
        json.dump({"batch": {"%d|%s" % k: v for k, v in by_batch.items()},
                   "seq": {"%d|%s" % k: v for k, v in by_seq.items()}, "compile": compile_ms}, f, indent=1)
    print("wrote %s" % os.path.join(args.out_dir, "benchmarks.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
