#!/usr/bin/python3
"""Scaling curves of kiln against PyTorch, as SVG plots in docs/benchmarks.md.

    /usr/bin/python3 tools/bench/scaling.py [--threads 1] [--rounds 2] [--tiny] [--no_docs] [--compile_only]

Three sweeps, every point its own process, the sides of a point alternating
within each round (a point's figure is the best of its rounds):

- batch (MLP 784-1024-1024-10, batch 1 to 1024): step time and memory;
- sequence length (transformer block, d_model 256, 4 heads, FFN 1024,
  batch 4, seq 128 to 2048): step time and memory;
- compile time against cluster size: a chain of 10 to 1000 elementwise ops
  that the JIT compiles as one cluster (`kiln run --use_jit`), and the
  training clusters of deep MLPs (up to about 1000 ops: matmuls, their
  gradients, the updates), of the resnet and of the gpt, each compile split
  into its phases (`kiln bench --bench_what compile`).

--compile_only runs only the compile sweeps and rewrites only their part of
the section (the step-time and memory part stays as it is in
docs/benchmarks.md, with its own date and machine).

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
COMPILE_HEADING = "### Compile time"
# Where a compile's phases go in the table (CompiledObject::compile_phases).
PHASE_GROUPS = [("shapes", lambda n: n in ("cluster", "pending")),
                ("generated code", lambda n: n == "emit ew_group"),
                ("oneDNN primitives", lambda n: n.startswith("emit onednn") or n == "emit matmul_sgd"),
                ("other kernels", lambda n: n.startswith("emit ")),
                ("plan", lambda n: n in ("var uses", "trace", "plan")),
                ("lowering steps", lambda n: True)]
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
                m = re.search(r"(\d+) compiles \(([0-9.]+) ms, CPU ([0-9.]+) ms\)", r.stdout + r.stderr)
                c = re.search(r"jit explain: (\d+) clusters", r.stdout + r.stderr)
                if r.returncode != 0 or not m:
                    raise RuntimeError("scaling: chain of %d ops: %s%s" % (n, r.stdout, r.stderr))
                clusters = int(c.group(1)) if c else 0
                ms, cpu_ms = float(m.group(2)), float(m.group(3))
                if n not in out:
                    out[n] = {"ms": ms, "cpu_ms": cpu_ms, "compiles": int(m.group(1)), "clusters": clusters}
                out[n]["ms"], out[n]["cpu_ms"] = min(ms, out[n]["ms"]), min(cpu_ms, out[n]["cpu_ms"])
            bvp.log("scaling: chain of %d ops: %.2f ms to compile, CPU %.2f ms (%d compiles, %d clusters)"
                    % (n, out[n]["ms"], out[n]["cpu_ms"], out[n]["compiles"], out[n]["clusters"]))
    return out


def model_compiles(args, configs):
    """{name: [compile]}: `kiln bench --bench_what compile` of each (name, flags), the best of
    args.rounds + 1 processes by each compile's CPU time (its lowest wall time kept apart)."""
    out = {}
    for name, flags in configs:
        best = None
        for _ in range(args.rounds + 1):
            r = subprocess.run([args.kiln, "bench", "--bench_what", "compile", "--use_jit"] + flags,
                               capture_output=True, text=True, timeout=args.timeout,
                               env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
            if r.returncode != 0:
                raise RuntimeError("scaling: compile of %s: %s%s" % (name, r.stdout, r.stderr))
            got = json.loads(r.stdout.strip().splitlines()[-1])["compiles"]
            if best is None:
                best = got
                continue
            for b, g in zip(best, got):
                wall = min(b["compile_ms"], g["compile_ms"])
                if g["compile_cpu_ms"] < b["compile_cpu_ms"]:
                    b.update(g)
                b["compile_ms"] = wall
        out[name] = best
        bvp.log("scaling: compile of %s: " % name + ", ".join(
            "%s %d ops %.2f ms (CPU %.2f ms)" % (c["cluster"], c["ops"], c["compile_ms"], c["compile_cpu_ms"])
            for c in best))
    return out


def phase_groups(compile_):
    """CPU ms of a compile by PHASE_GROUPS (each phase in the first group that takes it)."""
    out = {g: 0.0 for g, _ in PHASE_GROUPS}
    for name, t in compile_["phases"].items():
        group = next(g for g, takes in PHASE_GROUPS if takes(name))
        out[group] += t["cpu_ms"]
    return out


def compile_rows(by_model):
    rows = []
    for name, compiles in by_model.items():
        for c in compiles:
            g = phase_groups(c)
            rows.append([name, c["cluster"], str(c["ops"]), "%.2f" % c["compile_ms"], "%.2f" % c["compile_cpu_ms"]] +
                        ["%.2f" % g[k] for k, _ in PHASE_GROUPS])
    return bvp.md_table(["program", "cluster", "ops", "compile ms (wall)", "CPU ms"] +
                        ["%s CPU ms" % k for k, _ in PHASE_GROUPS], rows)


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
        xy = [(px(x), py(pts[x])) for x in sorted(pts) if pts[x] > 0]
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


def compile_configs(tiny):
    """(name, kiln bench flags): deep MLPs of about 70 to 1000 ops in one training cluster, the resnet and the gpt."""
    if tiny:
        mlps = [2, 4]
        return [("mlp %d layers" % n, ["--model", "mlp", "--dataset", "digits", "--mlp_hidden", ",".join(["16"] * n),
                                        "--batch_size", "4"]) for n in mlps] + [
            ("resnet", ["--model", "resnet", "--resnet_widths", "8,16", "--resnet_blocks", "1", "--batch_size", "2"]),
            ("gpt", ["--model", "gpt", "--gpt_layers", "1", "--d_model", "16", "--num_heads", "2", "--seq_len", "8",
                     "--vocab", "16", "--batch_size", "2"])]
    return [("mlp %d layers" % n, ["--model", "mlp", "--dataset", "digits", "--mlp_hidden", ",".join(["64"] * n),
                                    "--batch_size", "64"]) for n in (8, 31, 62, 125)] + [
        ("resnet batch 32", ["--model", "resnet", "--batch_size", "32"]),
        ("gpt 4 layers", ["--model", "gpt", "--gpt_layers", "4", "--d_model", "256", "--num_heads", "4", "--seq_len",
                          "128", "--vocab", "256", "--batch_size", "16"])]


def compile_part(args, compile_ms, by_model, chains):
    """The compile-time part of the section, with its own date and machine."""
    cpu = bvp.cpu_info()
    mlp_names = [n for n in by_model if n.startswith("mlp")]
    # "--mlp_hidden 64,64,64" shown as "--mlp_hidden 64,...(3 entries)".
    short = lambda m: "%s,...(%d entries)" % (m.group(1), m.group(0).count(",") + 1)  # noqa: E731
    flags = {n: re.sub(r"\b(\d+)(?:,\1\b){2,}", short, " ".join(f)) for n, f in compile_configs(args.tiny)}
    return [COMPILE_HEADING, "",
            "Measured on %s by `/usr/bin/python3 tools/bench/scaling.py --threads %d --rounds %d%s` on %s (%d logical "
            "CPUs), %d thread(s), kiln %s. Wall times depend on what else the machine runs; the CPU time of the "
            "compiling thread does not (it is what a compile costs on an idle core).%s"
            % (datetime.date.today().isoformat(), args.threads, args.rounds, " --compile_only" if args.compile_only
               else "", cpu["model"], cpu["cpus"], args.threads, bvp.kiln_revision(),
               " " + args.note if args.note else ""), "",
            "One cluster made of a chain of N elementwise ops on [64, 256] (scale, tanh, add, sigmoid, mul, relu, "
            "repeated; `kiln run --use_jit --jit_explain`, the compile time it reports, wall and CPU, each the "
            "best of %d runs):" % (args.rounds + 1), "", "![compile time against cluster size](scaling_compile.svg)",
            "", bvp.md_table(["ops", "compile ms (wall)", "CPU ms", "clusters", "compiles"],
                             [[str(n), "%.2f" % compile_ms[n]["ms"], "%.2f" % compile_ms[n]["cpu_ms"],
                               str(compile_ms[n]["clusters"]), str(compile_ms[n]["compiles"])] for n in chains]), "",
            "Training clusters (forward, backward and SGD updates) of deep MLPs (N hidden layers: matmuls with "
            "bias and relu epilogues, their gradients, weight gradients folded into the updates), of "
            "the resnet and of the gpt, each compile split into its phases (`kiln bench --bench_what compile "
            "--use_jit` with the flags below, one training step in a fresh process; best of %d processes by CPU "
            "time, the wall column the lowest wall time). Phases: shapes (the cluster's shape inference and a unit "
            "per op), lowering steps (compiler/lower.cc), generated code (the Xbyak elementwise kernels), oneDNN "
            "primitives (creating them: matmuls, convolutions, the folded weight-gradient updates), other kernels, "
            "plan (the buffer plan and the instruction list)." % (args.rounds + 1), "",
            compile_rows(by_model), "",
            "Flags: " + "; ".join("%s: `%s`" % (n, flags[n]) for n in by_model) + ".", "",
            "The deep MLPs' clusters grow with the layers: " + ", ".join(
                "%d ops %.2f ms CPU" % (by_model[n][0]["ops"], by_model[n][0]["compile_cpu_ms"]) for n in mlp_names) +
            ".", ""]


def kept_sweeps(path):
    """The step-time and memory part of the section as docs/benchmarks.md has it now."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = lines.index(SECTION)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    part = lines[start:end]
    cut = next((i for i, l in enumerate(part) if l == COMPILE_HEADING or l.startswith("Compile time of one cluster")),
               len(part))
    return "\n".join(part[:cut]).rstrip("\n") + "\n"


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
    p.add_argument("--note", default="", help="a sentence about the machine for the compile part (its load)")
    p.add_argument("--compile_only", action="store_true",
                   help="only the compile sweeps; the step-time and memory part of the section stays as it is")
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
    if not args.compile_only:
        by_batch, by_seq = sweep(args, sides, mlp), sweep(args, sides, tf)
    compile_ms = compile_times(args, chains)
    by_model = model_compiles(args, compile_configs(args.tiny))
    if args.no_docs:
        return 0
    mlp_series = {c[0]["ops"]: c[0]["compile_cpu_ms"] for n, c in by_model.items() if n.startswith("mlp")}
    compile_svg = svg_lines("Compile time (CPU) against cluster size", "ops in the cluster", "CPU ms",
                            [("elementwise chain", COLORS["jit"], {n: c["cpu_ms"] for n, c in compile_ms.items()},
                              False),
                             ("deep MLP training", COLORS["jit_bf16"], mlp_series, False)], chains)
    json_path = os.path.join(args.out_dir, "scaling.json")
    if args.compile_only:
        with open(os.path.join(args.out_dir, "scaling_compile.svg"), "w") as f:
            f.write(compile_svg)
        md = os.path.join(args.out_dir, "benchmarks.md")
        bvp.replace_section(md, kept_sweeps(md) + "\n" + "\n".join(compile_part(args, compile_ms, by_model, chains)),
                            SECTION)
        with open(json_path) as f:
            data = json.load(f)
        data.update({"compile": compile_ms, "compile_models": by_model})
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)
        print("wrote %s" % md)
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
        "scaling_compile.svg": compile_svg,
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
           "sequence length](scaling_seq_memory.svg)", "", md_rows(by_seq, sides, seqs, "seq"), ""] + compile_part(args, compile_ms, by_model, chains)
    bvp.replace_section(os.path.join(args.out_dir, "benchmarks.md"), "\n".join(out), SECTION)
    with open(json_path, "w") as f:
        json.dump({"batch": {"%d|%s" % k: v for k, v in by_batch.items()},
                   "seq": {"%d|%s" % k: v for k, v in by_seq.items()}, "compile": compile_ms,
                   "compile_models": by_model}, f, indent=1)
    print("wrote %s" % os.path.join(args.out_dir, "benchmarks.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
