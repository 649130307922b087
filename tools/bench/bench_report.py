"""Reporting for bench_vs_pytorch.py: step-time tables, the SVG chart and the docs/benchmarks.md section.

bench_vs_pytorch.py imports this module and re-exports its names (scaling.py
reaches md_table and replace_section through it); this module imports nothing
from bench_vs_pytorch.py, so the constants the report shows live here.
"""

import datetime
import math
import os

SECTION = "## Step time against PyTorch"
SIDES = ["torch", "torch_bf16", "nojit", "jit", "jit_bf16"]  # jit_bf16: kiln JIT with --amp bf16
SIDE_NAMES = {"torch": "PyTorch eager", "torch_bf16": "PyTorch autocast bf16", "nojit": "kiln JIT off",
              "jit": "kiln JIT on", "jit_bf16": "kiln JIT --amp bf16"}
# Issue 14's targets: kiln-JIT step time / PyTorch (fp32) step time at most this.
TARGETS = {"mlp b1": 0.2, "mlp b64": 0.65, "mlp b256": 0.85, "cnn b64": 0.4, "transformer b8": 0.7}
MATMUL_FRACTION_TARGET = ("mlp b256", 0.8)
# The rest of issue 14's point 6 and points 4-5: (what, model, side, peer, bound, thread counts); a ratio
# target is met at or below its bound, a "matmul" target (peer None: the JIT step's share of the
# oneDNN matmul rate) at or above it.
EXTRA_TARGETS = [
    ("kiln bf16 / PyTorch fp32", "mlp b256", "jit_bf16", "torch", 0.5, None),
    ("kiln bf16 / PyTorch autocast bf16", "mlp b256", "jit_bf16", "torch_bf16", 0.6, None),
    ("kiln bf16 / PyTorch fp32", "transformer b8", "jit_bf16", "torch", 0.5, None),
    ("JIT step, share of the matmul rate", "cnn b64", "jit", None, 0.6, [1]),
    ("JIT step, share of the matmul rate", "transformer b8", "jit", None, 0.8, [2]),
]


def ratio(results, name, threads, a, b):
    ra, rb = results.get((name, threads, a)), results.get((name, threads, b))
    if ra is None or rb is None or rb["median_ms"] <= 0:
        return None
    return ra["median_ms"] / rb["median_ms"]


def fmt(v, spec="%.3f"):
    return "-" if v is None else spec % v


def table_rows(configs, threads_list, results, limits):
    header = ["model", "thr", "PyTorch ms", "PyTorch bf16 ms", "kiln off ms", "kiln JIT ms", "kiln bf16 ms",
              "JIT/PyTorch", "target", "met", "JIT/PyTorch bf16", "bf16/PyTorch", "bf16/PyTorch bf16", "JIT/off",
              "RSS MiB (PyT/off/JIT)", "JIT GFLOP/s", "of matmul"]
    rows = []
    for threads in threads_list:
        for cfg in configs:
            name = cfg[0]
            get = lambda side: results.get((name, threads, side))
            t, tb, off, jit, jb = get("torch"), get("torch_bf16"), get("nojit"), get("jit"), get("jit_bf16")
            r_t = ratio(results, name, threads, "jit", "torch")
            target = TARGETS.get(name)
            met = "-" if r_t is None or target is None else ("yes" if r_t <= target else "NO")
            rss = "/".join(fmt(x["peak_rss_mib"] if x else None, "%.0f") for x in (t, off, jit))
            rows.append([name, str(threads), fmt(t and t["median_ms"]), fmt(tb and tb["median_ms"]),
                         fmt(off and off["median_ms"]), fmt(jit and jit["median_ms"]), fmt(jb and jb["median_ms"]),
                         fmt(r_t, "%.2f"), fmt(target, "%.2f"), met,
                         fmt(ratio(results, name, threads, "jit", "torch_bf16"), "%.2f"),
                         fmt(ratio(results, name, threads, "jit_bf16", "torch"), "%.2f"),
                         fmt(ratio(results, name, threads, "jit_bf16", "torch_bf16"), "%.2f"),
                         fmt(ratio(results, name, threads, "jit", "nojit"), "%.2f"), rss,
                         fmt(jit and jit["gflops"], "%.1f"),
                         fmt(jit and 100 * jit["matmul_fraction"], "%.0f%%")])
    return header, rows


def target_rows(threads_list, results):
    """Issue 14's targets, one row per (target, thread count): the measured figure, the bound, met."""
    header = ["model", "thr", "figure", "measured", "target", "met"]
    rows = []
    checks = [("kiln JIT fp32 / PyTorch fp32", name, "jit", "torch", bound, None) for name, bound in TARGETS.items()]
    for what, name, side, peer, bound, only in checks + EXTRA_TARGETS:
        for t in threads_list:
            if only and t not in only:
                continue
            if peer is None:
                r = results.get((name, t, side))
                v = r and r.get("matmul_fraction")
                met = v is not None and v >= bound
                shown, target = fmt(v and 100 * v, "%.0f%%"), ">= %.0f%%" % (100 * bound)
            else:
                v = ratio(results, name, t, side, peer)
                met = v is not None and v <= bound
                shown, target = fmt(v, "%.2f"), "<= %.2f" % bound
            rows.append([name, str(t), what, shown, target, "-" if v is None else ("yes" if met else "NO")])
    return header, rows


def text_table(header, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def svg_plot(configs, threads_list, results, title):
    """Horizontal bars on a log scale: step time of each side per model and thread count."""
    colors = {"torch": "#d62728", "torch_bf16": "#ff9896", "nojit": "#7f7f7f", "jit": "#1f77b4", "jit_bf16": "#17becf"}
    groups = [(cfg[0], t) for t in threads_list for cfg in configs]
    values = [r["median_ms"] for r in results.values() if r.get("median_ms", 0) > 0]
    lo = 10 ** math.floor(math.log10(min(values))) if values else 0.01
    hi = 10 ** math.ceil(math.log10(max(values))) if values else 100
    if hi <= lo:
        hi = lo * 10
    left, right, top, bar_h, gap = 170, 30, 76, 12, 14
    plot_w = 560
    group_h = bar_h * len(SIDES) + gap
    height = top + group_h * len(groups) + 60
    width = left + plot_w + right

    def x_of(ms):
        return left + plot_w * (math.log10(ms) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
         % (width, height),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="20" font-size="13" font-weight="bold">%s</text>' % (left, title)]
    for i, side in enumerate(SIDES):
        x = left + (i % 3) * 190
        y = 32 + (i // 3) * 16
        s.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (x, y, colors[side]))
        s.append('<text x="%d" y="%d">%s</text>' % (x + 16, y + 10, SIDE_NAMES[side]))
    decade = lo
    while decade <= hi * 1.0001:
        x = x_of(decade)
        s.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, top - 4, x, height - 45))
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (x, height - 30, decade))
        decade *= 10
    s.append('<text x="%d" y="%d" text-anchor="middle">median step time, ms (log scale)</text>'
             % (left + plot_w // 2, height - 12))
    for gi, (name, threads) in enumerate(groups):
        y0 = top + gi * group_h
        s.append('<text x="%d" y="%d" text-anchor="end">%s, %d thr</text>'
                 % (left - 8, y0 + bar_h * len(SIDES) // 2 + 4, name, threads))
        for si, side in enumerate(SIDES):
            r = results.get((name, threads, side))
            if not r or r["median_ms"] <= 0:
                continue
            y = y0 + si * bar_h
            x1 = x_of(r["median_ms"])
            s.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>'
                     % (left, y, max(1.0, x1 - left), bar_h - 2, colors[side]))
            s.append('<text x="%.1f" y="%d" font-size="9">%.3g</text>' % (x1 + 3, y + bar_h - 3, r["median_ms"]))
    s.append("</svg>")
    return "\n".join(s) + "\n"


def replace_section(path, section_text, heading=None):
    """Writes `section_text` (starting with `heading`, SECTION by default) into
    the Markdown file at `path`, replacing only that section (up to the next
    '## ' heading) and keeping every other section as it is on disk now."""
    heading = heading or SECTION
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = "# Benchmarks\n\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, l in enumerate(lines) if l.rstrip("\n") == heading), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + section_text.rstrip("\n") + "\n"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + section_text.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)


def markdown_section(args, configs, threads_list, results, limits, cpu, tinfo, header, rows, svg_name,
                     revision, peer_unset):
    out = [SECTION, ""]
    out.append("`bash tools/bench/run.sh` measures kiln's training step against PyTorch eager on the same machine in "
               "one run and rewrites this section and `benchmarks_step_time.svg` (the raw figures go to "
               "`benchmarks_step_time.json`). It builds `build/tools/kiln` when needed (`KILN_BENCH_BUILD_DIR` "
               "picks another build folder), installs `python3-torch` and `libopenblas0-openmp` from Debian when "
               "missing (as root; otherwise it prints the apt-get line) and runs `tools/bench/bench_vs_pytorch.py` "
               "with Debian's `/usr/bin/python3`. Options: `--threads 1,2`, `--rounds`, `--warmup`, `--steps`, "
               "`--only 'mlp b64'`, `--no_docs`, `--tiny` (tiny models, 2 steps, 1 round, kiln only when PyTorch "
               "is missing: the `bench_smoke` ctest runs it, writing into the build tree; no test asserts a time). "
               "The kiln side is `kiln bench`: `--model ... --batch_size N [--use_jit] --bench_warmup W "
               "--bench_steps N` prints one JSON line (median/mean/min step ms, FLOPs per step, GFLOP/s, peak RSS, "
               "OpenMP threads, parameter count); `--bench_what matmul` times oneDNN's f32 matmul "
               "(`--bench_matmul_size`, default 1024) and `--bench_what copy` memcpy over "
               "`--bench_copy_mib` (default 256) MiB split over the OpenMP threads, reporting bytes copied per "
               "second (memory traffic is at least twice that). The script checks that both sides' models have "
               "the same parameter count.")
    out.append("")
    out += run_paragraphs(args, threads_list, cpu, tinfo, revision, peer_unset)
    out += method_paragraph(args, configs)
    out += result_paragraphs(args, threads_list, results, limits, header, rows, svg_name)
    return "\n".join(out)


def run_paragraphs(args, threads_list, cpu, tinfo, revision, peer_unset):
    """Where, when and against which PyTorch the last run was measured."""
    today = datetime.date.today().isoformat()
    out = []
    out.append("### Last full run")
    out.append("")
    out.append("Run on %s by `bash tools/bench/run.sh` (`tools/bench/bench_vs_pytorch.py`), all in one run on one "
               "machine: %s (family %s model %s, %s, L3 %s, %d logical CPUs, Linux %s), %s thread(s). %s"
               % (today, cpu["model"], cpu["family"], cpu["cpu_model"], cpu["isa"], cpu["l3"], cpu["cpus"],
                  cpu["kernel"], " and ".join(map(str, threads_list)), args.note))
    out.append("")
    out.append("kiln: %s, Release build." % revision)
    out.append("")
    out.append("1-minute load average %.2f when the measurements started and %.2f when they ended (the "
               "benchmark itself adds up to the thread count being measured)." % tuple(args.load))
    out.append("")
    if tinfo:
        blas = [l for l in tinfo["blas_libs"] if "dnnl" not in l]
        dnnl = [l for l in tinfo["blas_libs"] if "dnnl" in l]
        out.append("PyTorch %s eager (Debian `python3-torch`, BLAS_INFO=%s): its matmuls (Linear = addmm) go to the "
                   "BLAS loaded from %s; it also loads %s (its oneDNN, used for convolutions when it picks it). "
                   "Its default thread count here is %d; every measurement sets its own."
                   % (tinfo["version"], tinfo["blas_name"], ", ".join("`%s`" % l for l in blas) or "?",
                      ", ".join("`%s`" % l for l in dnnl) or "no oneDNN library", tinfo["default_threads"]))
        out.append("")
        out.append("The peer at its best: this machine's environment sets %s, which pins OpenBLAS to its AVX2 "
                   "kernels; the PyTorch processes run without them and with `ATEN_CPU_CAPABILITY=avx512` where "
                   "the CPU has AVX-512 (kiln's keep the environment). OpenBLAS core: **%s**; ATen CPU "
                   "capability: **%s**." % (" and ".join("`%s`" % k for k in peer_unset), tinfo["openblas_core"],
                                            tinfo["aten_capability"]))
    else:
        out.append("PyTorch was not installed: its columns are empty.")
    out.append("")
    return out


def method_paragraph(args, configs):
    """What one measured step is and how the step times are taken."""
    out = []
    sizes = ("MLP 784-1024-1024-10 at batch 1, 64 and 256; LeNet CNN on 1x28x28 at batch 64; one post-LN "
             "transformer encoder block at batch 8, seq 128, d_model 256, 4 heads, FFN 1024, GELU erf, mean-pooled, "
             "classifier; a ResNet-18-shaped CNN on 3x32x32 at batch 32 (widths 32-64-128-256, two basic blocks a "
             "stage, bias-free convolutions, batch_norm, global average pool); a 4-layer pre-LN GPT at batch 16 "
             "(d_model 256, 4 heads, causal, seq 128, vocabulary 256, FFN 1024, cross-entropy over every next "
             "token)")
    if args.tiny:
        sizes = "the --tiny smoke-test sizes: " + "; ".join(c[0] + " " + " ".join(c[3]) for c in configs)
    out.append("Each step is forward + backward + the optimizer's update (plain SGD at lr 0.1, no momentum; the "
               "ResNet with momentum 0.9 at lr 0.05, the GPT with Adam at lr 0.001), f32, seeded random data "
               "(" + sizes + "). The PyTorch models in the script "
               "mirror `framework/models/models.cc` layer by layer; neither side computes the input's gradient. "
               "Each measurement is its own process (OMP_NUM_THREADS and torch.set_num_threads set before it "
               "starts); for every (model, threads) the sides run interleaved PyTorch, PyTorch with bf16 autocast "
               "(`torch.autocast('cpu', dtype=torch.bfloat16)` around the forward and the loss; its Linear and "
               "convolution layers then run in bf16, weights and optimizer stay fp32), kiln JIT off, kiln JIT on, kiln JIT with `--amp bf16` (its "
               "matmuls and convolutions in bf16 with f32 accumulation, everything else f32: docs/jit.md), "
               "%d rounds of %d warm-up steps (untimed; they include the JIT's compiles) and %d timed steps, each "
               "process started when no other task was runnable or after waiting %g s. A step time is the lowest "
               "over rounds of each process's median step (other jobs on the machine only make a round slower; "
               "every round's median is in the JSON); RSS is the largest peak "
               "resident set (ru_maxrss) of the side's processes, libraries included. kiln copies the batch "
               "into its scope before each step, outside the timed part; PyTorch reuses its input tensors."
               % (args.rounds, args.warmup, args.steps, args.idle_wait))
    out.append("")
    return out


def result_paragraphs(args, threads_list, results, limits, header, rows, svg_name):
    """The machine limits, the step-time table, the matmul-fraction target and the chart."""
    out = []
    out.append("Machine limits measured in the same run (`kiln bench --bench_what copy|matmul`, once before "
               "each model's rounds and once more per thread count; the best of them):")
    out.append("")
    out.append("| threads | copy GB/s (bytes copied; %d MiB buffers, memcpy) | oneDNN f32 matmul %d^3 GFLOP/s | "
               "oneDNN implementation |" % (args.copy_mib, args.matmul_size))
    out.append("|---|---|---|---|")
    for t in threads_list:
        out.append("| %d | %.1f | %.1f | %s |" % (t, limits[t]["copy"]["copy_gbs"], limits[t]["matmul"]["gflops"],
                                                  limits[t]["matmul"]["impl"]))
    out.append("")
    out.append("Step times (ms, median) and ratios; `target` is issue 14's bound on JIT/PyTorch (fp32); `JIT GFLOP/s` counts "
               "the matmul and convolution FLOPs the step's ops really do (2·M·N·K per matmul, per gradient a "
               "matmul_grad/conv2d_grad writes; the data input's gradient is not computed; elementwise ops, "
               "reductions, softmax, layer_norm, pooling and the SGD update are not counted), and `of matmul` is "
               "that rate over the oneDNN matmul figure at the same thread count.")
    out.append("")
    out.append(md_table(header, rows))
    out.append("")
    name, need = MATMUL_FRACTION_TARGET
    for t in threads_list:
        r = results.get((name, t, "jit"))
        if r:
            out.append("- %s, %d thread(s): the JIT step reaches %.0f%% of the matmul figure (target %.0f%%): %s."
                       % (name, t, 100 * r["matmul_fraction"], 100 * need,
                          "met" if r["matmul_fraction"] >= need else "not met"))
    out.append("")
    out.append("Issue 14's targets from this run (`met` as measured; the reasons for the unmet ones are in "
               "\"Issue 14's targets\" below this section):")
    out.append("")
    out.append(md_table(*target_rows(threads_list, results)))
    out.append("")
    out.append("![step time per model and configuration](%s)" % svg_name)
    out.append("")
    return out
