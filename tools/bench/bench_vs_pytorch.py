#!/usr/bin/python3
"""kiln against PyTorch eager: training-step time of the same five models.

Run with Debian's /usr/bin/python3 (it has numpy and python3-torch); the
script re-executes itself with it when started by another interpreter.
`bash tools/bench/run.sh` builds kiln and runs this; docs/benchmarks.md says
what is measured and holds the last full run.

Every measurement runs in its own process, so each has a clean thread setting
(OMP_NUM_THREADS, and torch.set_num_threads for PyTorch) and its own peak RSS.
For each thread count and each (model, batch) of bench_configs.py, the
sides run interleaved, PyTorch (fp32 and bf16 autocast), kiln without JIT,
kiln with JIT and kiln with JIT and --amp bf16, for --rounds rounds;
a side's step time is the median over rounds of each process's median step
(warm-up steps, which include JIT compiles, are not timed).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

# The PyTorch peer (its models stay importable from here: tests/convert_checkpoint_test.py).
from torch_peer import torch_models, torch_worker  # noqa: F401
# The measured configurations (compare_kiln.py reads FULL_CONFIGS from here).
from bench_configs import FULL_CONFIGS, TINY_CONFIGS  # noqa: F401
# The reporting half; its names stay importable from here (scaling.py uses md_table and replace_section).
from bench_report import (  # noqa: F401
    MATMUL_FRACTION_TARGET, SECTION, SIDE_NAMES, SIDES, TARGETS, fmt, markdown_section, md_table, ratio,
    replace_section, svg_plot, table_rows, text_table)

DEBIAN_PYTHON = "/usr/bin/python3"
APT_PACKAGES = ["python3-torch", "libopenblas0-openmp"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TORCH_SIDES = ("torch", "torch_bf16")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- environment

def ensure_packages(install):
    """Returns (torch available, notes). Installs the Debian packages when root."""
    missing = []
    for pkg in APT_PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            missing.append(pkg)
    if missing:
        line = "apt-get install -y " + " ".join(missing)
        if install and os.geteuid() == 0 and shutil.which("apt-get"):
            log("bench: installing " + " ".join(missing))
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            r = subprocess.run(["apt-get", "install", "-y"] + missing, env=env)
            if r.returncode != 0:
                subprocess.run(["apt-get", "update"], env=env)
                subprocess.run(["apt-get", "install", "-y"] + missing, env=env)
        else:
            log("bench: missing Debian packages; run as root: " + line)
    r = subprocess.run([DEBIAN_PYTHON, "-c", "import torch"], capture_output=True)
    return r.returncode == 0


# The environment of this machine pins OpenBLAS (and so PyTorch's Linear
# layers) to its AVX2 kernels at about half speed (OPENBLAS_CORETYPE=Haswell,
# OPENBLAS_L2_SIZE), and Debian's PyTorch dispatches its own kernels at AVX2
# unless told. The PyTorch side runs as the peer at its best: without those
# two variables and with ATen's AVX-512 dispatch where the CPU has AVX-512.
# kiln's side keeps the environment as it is.
PEER_UNSET = ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"]


def cpu_has_avx512():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return "avx512f" in line.split()
    except OSError:
        pass
    return False


def peer_env(base):
    env = dict(base)
    for k in PEER_UNSET:
        env.pop(k, None)
    if cpu_has_avx512():
        env["ATEN_CPU_CAPABILITY"] = "avx512"
    return env


def torch_info():
    """PyTorch's version, build, BLAS library actually loaded, the OpenBLAS core
    it runs and ATen's CPU capability (in the peer's environment), and the
    default threads."""
    code = r"""
import ctypes, json, os, torch
a = torch.randn(64, 64)
(a @ a).sum().item()
libs = sorted({os.path.realpath(l.split()[-1]) for l in open('/proc/self/maps')
               if ('blas' in l or 'mkl' in l or 'dnnl' in l) and '/' in l})
core = "?"
for l in libs:
    try:
        f = ctypes.CDLL(l).openblas_get_corename
        f.restype = ctypes.c_char_p
        core = f().decode()
        break
    except (OSError, AttributeError):
        pass
cfg = torch.__config__.show()
cap = [l.split(":", 1)[1].strip() for l in cfg.splitlines() if "CPU capability usage" in l]
print(json.dumps({"version": torch.__version__, "default_threads": torch.get_num_threads(),
                  "mkldnn": torch.backends.mkldnn.is_available(), "blas_libs": libs,
                  "openblas_core": core, "aten_capability": cap[0] if cap else "?",
                  "blas_info": [l.strip() for l in cfg.splitlines() if 'BLAS_INFO' in l or 'MKL-DNN' in l
                                or 'CPU capability' in l or 'OpenMP' in l],
                  "parallel": torch.__config__.parallel_info()}))
"""
    r = subprocess.run([DEBIAN_PYTHON, "-c", code], capture_output=True, text=True, env=peer_env(os.environ))
    if r.returncode != 0:
        return None
    info = json.loads(r.stdout)
    m = re.search(r"BLAS_INFO=([^,]+)", " ".join(info["blas_info"]))
    info["blas_name"] = m.group(1) if m else "?"
    return info


def kiln_revision():
    r = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return "revision unknown (not a git checkout)"
    rev = r.stdout.strip()
    if rev.endswith("-dirty"):
        return "commit `%s` with uncommitted changes in the working tree" % rev[:-len("-dirty")]
    return "commit `%s`" % rev


def cpu_info():
    model, flags, family, cpu_model = "?", "", "?", "?"
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "model name" and model == "?":
                model = v
            elif k == "cpu family" and family == "?":
                family = v
            elif k == "model" and cpu_model == "?":
                cpu_model = v
            elif k == "flags" and not flags:
                flags = v
    except OSError:
        pass
    isa = "avx512f" if "avx512f" in flags.split() else ("avx2" if "avx2" in flags.split() else "?")
    llc = "?"
    r = subprocess.run(["lscpu"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("L3 cache"):
            llc = line.split(":", 1)[1].strip()
    return {"model": model, "family": family, "cpu_model": cpu_model, "isa": isa, "l3": llc,
            "cpus": os.cpu_count(), "kernel": platform.release()}


# ---------------------------------------------------------------- runs

def runnable_others():
    """Runnable tasks on the machine besides this one (/proc/loadavg's 4th field)."""
    try:
        with open("/proc/loadavg") as f:
            return max(0, int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return 0


def wait_idle(max_seconds):
    """Waits up to max_seconds until no other task is runnable (three samples in
    a row); returns the seconds waited. On a shared machine, a measurement that
    starts while another job runs is slower, at 2 threads by far."""
    t0 = time.time()
    quiet = 0
    while time.time() - t0 < max_seconds and quiet < 3:
        quiet = quiet + 1 if runnable_others() == 0 else 0
        time.sleep(0.05)
    return time.time() - t0


def run_json(cmd, env_threads, timeout, idle_wait=0.0, peer=False):
    if idle_wait > 0:
        wait_idle(idle_wait)
    env = dict(peer_env(os.environ) if peer else os.environ, OMP_NUM_THREADS=str(env_threads))
    env.pop("FLAGS_use_jit", None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("bench: %s failed (exit %d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("bench: %s printed no JSON line:\n%s" % (" ".join(cmd), r.stdout))
    return json.loads(lines[-1])


def kiln_cmd(kiln, cfg, side, args):
    name, model, batch, flags, spec = cfg
    optimizer, lr = spec.get("optimizer", "sgd"), spec.get("lr", 0.1)
    return [kiln, "bench", "--model", model, "--batch_size", str(batch), "--optimizer", optimizer, "--lr", str(lr),
            "--seed", "1", "--bench_warmup", str(args.warmup), "--bench_steps", str(args.steps),
            "--use_jit=" + ("false" if side == "nojit" else "true")] + flags + \
        (["--amp", "bf16"] if side == "jit_bf16" else [])


def torch_cmd(cfg, threads, args, side):
    name, model, batch, _, spec = cfg
    return [DEBIAN_PYTHON, os.path.abspath(__file__), "--worker", "--model", model, "--batch", str(batch),
            "--threads", str(threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
            "--torch_spec", json.dumps(spec)] + (["--autocast"] if side == "torch_bf16" else [])


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def measure_limits(kiln, threads, args, runs):
    """One copy and one matmul measurement, appended to runs[what]."""
    for what, extra in (("copy", ["--bench_copy_mib", str(args.copy_mib)]),
                        ("matmul", ["--bench_matmul_size", str(args.matmul_size)])):
        runs.setdefault(what, []).append(
            run_json([kiln, "bench", "--bench_what", what, "--bench_warmup", "3", "--bench_steps",
                      str(args.limit_steps)] + extra, threads, args.timeout, args.idle_wait))


def best_limits(runs):
    """The machine's limit is the best of the measurements (contention only lowers them)."""
    out = {}
    for what, key in (("copy", "copy_gbs"), ("matmul", "gflops")):
        best = dict(max(runs[what], key=lambda r: r[key]))
        best[key + "_runs"] = [r[key] for r in runs[what]]
        out[what] = best
    return out


def kiln_bf16_problem(kiln):
    """None when `kiln --amp bf16` runs here, else why not (no such flag, or a
    CPU without fast bf16 matmuls: kiln refuses then)."""
    r = subprocess.run([kiln, "bench", "--model", "mlp", "--dataset", "digits", "--mlp_hidden", "8", "--batch_size",
                        "2", "--bench_warmup", "0", "--bench_steps", "1", "--use_jit", "--amp", "bf16",
                        "--progress=false"], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]


def run_all(kiln, configs, threads_list, args, have_torch):
    results = {}  # (name, threads, side) -> summary
    limits = {}
    bf16_problem = kiln_bf16_problem(kiln)
    if bf16_problem:
        log("bench: no kiln --amp bf16 column: " + bf16_problem)
    for threads in threads_list:
        limit_runs = {}
        measure_limits(kiln, threads, args, limit_runs)
        for cfg in configs:
            measure_limits(kiln, threads, args, limit_runs)
            per_side = {s: [] for s in SIDES}
            for rnd in range(args.rounds):
                for side in SIDES:
                    if side == "jit_bf16" and bf16_problem:
                        continue
                    if side in TORCH_SIDES:
                        if not have_torch:
                            continue
                        r = run_json(torch_cmd(cfg, threads, args, side), threads, args.timeout, args.idle_wait, peer=True)
                    else:
                        r = run_json(kiln_cmd(kiln, cfg, side, args), threads, args.timeout, args.idle_wait)
                    r["others_runnable_after"] = runnable_others()
                    per_side[side].append(r)
            counts = {r["params"] for runs in per_side.values() for r in runs}
            if len(counts) != 1:
                raise RuntimeError("bench: %s: kiln and PyTorch models differ in parameter count: %s"
                                   % (cfg[0], sorted(counts)))
            for side, runs in per_side.items():
                if not runs:
                    continue
                s = dict(runs[-1])
                s["round_medians"] = [r["median_ms"] for r in runs]
                s["median_of_rounds_ms"] = median(s["round_medians"])
                s["median_ms"] = min(s["round_medians"])
                s["min_ms"] = min(r["min_ms"] for r in runs)
                s["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
                if side == "jit":
                    s["gflops"] = s["flops_per_step"] / (s["median_ms"] * 1e6)
                results[(cfg[0], threads, side)] = s
            line = "bench: %-15s %d thr: " % (cfg[0], threads) + "  ".join(
                "%s %.3f ms" % (side, results[(cfg[0], threads, side)]["median_ms"])
                for side in SIDES if (cfg[0], threads, side) in results)
            log(line)
        limits[threads] = best_limits(limit_runs)
        log("bench: %d thread(s): copy %.1f GB/s, oneDNN matmul %d^3 %.1f GFLOP/s (best of %d)" %
            (threads, limits[threads]["copy"]["copy_gbs"], args.matmul_size, limits[threads]["matmul"]["gflops"],
             len(limit_runs["matmul"])))
        for cfg in configs:
            r = results.get((cfg[0], threads, "jit"))
            if r:
                r["matmul_fraction"] = r["gflops"] / limits[threads]["matmul"]["gflops"]
    return results, limits


# ---------------------------------------------------------------- main

def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=os.path.join(REPO, "build", "tools", "kiln"), help="the kiln binary")
    p.add_argument("--tiny", action="store_true",
                   help="smoke test: tiny models, 2 steps, 1 round, 1 thread; PyTorch skipped when missing")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--limit_steps", type=int, default=10, help="timed steps of the copy and matmul measurements")
    p.add_argument("--matmul_size", type=int, default=1024)
    p.add_argument("--copy_mib", type=int, default=256)
    p.add_argument("--only", default="", help="run only these configurations (comma-separated names, e.g. 'mlp b64')")
    p.add_argument("--out_dir", default=os.path.join(REPO, "docs"),
                   help="where benchmarks.md (its '%s' section) and benchmarks_step_time.svg go" % SECTION)
    p.add_argument("--no_docs", action="store_true", help="print the table only")
    p.add_argument("--no_install", action="store_true", help="never run apt-get")
    p.add_argument("--note", default="", help="a sentence about the machine for the docs")
    p.add_argument("--timeout", type=int, default=600, help="seconds per measured process")
    p.add_argument("--idle_wait", type=float, default=5.0,
                   help="before each measurement, wait up to this many seconds for no other runnable task")
    # Worker mode (a PyTorch measurement in its own process).
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--torch_spec", help=argparse.SUPPRESS)
    p.add_argument("--autocast", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def write_docs(args, configs, threads_list, results, limits, cpu, tinfo, header, rows):
    """Rewrites benchmarks.md's section and writes the SVG chart and the raw JSON into args.out_dir."""
    os.makedirs(args.out_dir, exist_ok=True)
    svg_name = "benchmarks_step_time.svg"
    title = "Training step time, %s, %s" % (cpu["model"], datetime.date.today().isoformat())
    with open(os.path.join(args.out_dir, svg_name), "w") as f:
        f.write(svg_plot(configs, threads_list, results, title))
    section = markdown_section(args, configs, threads_list, results, limits, cpu, tinfo, header, rows, svg_name,
                               kiln_revision(), PEER_UNSET)
    replace_section(os.path.join(args.out_dir, "benchmarks.md"), section)
    with open(os.path.join(args.out_dir, "benchmarks_step_time.json"), "w") as f:
        json.dump({"%s|%d|%s" % k: v for k, v in results.items()}, f, indent=1, sort_keys=True)
    print("wrote %s and %s" % (os.path.join(args.out_dir, "benchmarks.md"), os.path.join(args.out_dir, svg_name)))


def main():
    args = parse_args()

    if args.worker:
        args.threads = int(args.threads)
        torch_worker(args)
        return 0

    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON):
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])

    configs = FULL_CONFIGS
    if args.tiny:
        configs = TINY_CONFIGS
        args.threads, args.rounds, args.warmup, args.steps = "1", 1, 1, 2
        args.limit_steps, args.matmul_size, args.copy_mib, args.idle_wait = 2, 64, 8, 0.0
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        configs = [c for c in configs if c[0] in wanted]
        if not configs:
            log("bench: --only matched no configuration")
            return 2
    threads_list = [int(t) for t in args.threads.split(",") if t]
    if not os.access(args.kiln, os.X_OK):
        log("bench: no kiln binary at %s (build it, or pass --kiln)" % args.kiln)
        return 2

    have_torch = ensure_packages(install=not (args.tiny or args.no_install))
    tinfo = torch_info() if have_torch else None
    if tinfo:
        print("PyTorch %s, BLAS_INFO=%s, BLAS libraries loaded: %s" %
              (tinfo["version"], tinfo["blas_name"], ", ".join(tinfo["blas_libs"]) or "none found"))
        print("torch.get_num_threads() by default: %d (each measurement sets its own)" % tinfo["default_threads"])
        print("PyTorch side runs without %s%s: OpenBLAS core %s, ATen CPU capability %s" %
              (", ".join(PEER_UNSET), " and with ATEN_CPU_CAPABILITY=avx512" if cpu_has_avx512() else "",
               tinfo["openblas_core"], tinfo["aten_capability"]))
        for l in tinfo["blas_info"]:
            print("  " + l)
    elif args.tiny:
        print("PyTorch is not installed: --tiny runs kiln only")
    else:
        log("bench: PyTorch is not importable by %s; install %s" % (DEBIAN_PYTHON, " ".join(APT_PACKAGES)))
        return 2
    cpu = cpu_info()
    print("CPU: %s (family %s model %s, %s, L3 %s, %d logical CPUs)" %
          (cpu["model"], cpu["family"], cpu["cpu_model"], cpu["isa"], cpu["l3"], cpu["cpus"]))

    t0 = time.time()
    args.load = [os.getloadavg()[0]]
    results, limits = run_all(args.kiln, configs, threads_list, args, have_torch)
    for t in threads_list:
        print("%d thread(s): copy %.1f GB/s (bytes copied, %d MiB), oneDNN f32 matmul %d^3 %.1f GFLOP/s (%s)" %
              (t, limits[t]["copy"]["copy_gbs"], args.copy_mib, args.matmul_size, limits[t]["matmul"]["gflops"],
               limits[t]["matmul"]["impl"]))
    header, rows = table_rows(configs, threads_list, results, limits)
    print(text_table(header, rows))
    args.load.append(os.getloadavg()[0])
    print("(%.0f s; 1-minute load average %.2f at the start, %.2f at the end)" % ((time.time() - t0,) + tuple(args.load)))
    for (name, threads, side), r in results.items():
        if side not in TORCH_SIDES and r["flops_per_step"] <= 0:
            log("bench: %s counted no FLOPs" % name)
            return 1

    if not args.no_docs:
        write_docs(args, configs, threads_list, results, limits, cpu, tinfo, header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
