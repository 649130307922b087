#!/usr/bin/python3
"""Models exported from PyTorch, trained in kiln, against PyTorch eager training
the same model (issue 28, point 7): torchvision's resnet18 (batch 32,
3x32x32, 10 classes) and an nn.TransformerEncoder language model (batch 16,
seq 128). Run with Debian's /usr/bin/python3 (numpy, python3-torch,
python3-onnx, python3-torchvision) and build/python on PYTHONPATH, or let it
find build/python itself:

    /usr/bin/python3 tools/bench/bench_onnx.py [--threads 1,2] [--rounds 3] [--no_docs]

Each model is exported once (torch.onnx.export, opset 14, training mode) with
its weights; both sides start from them. Every measurement is its own
process with its own thread count (OMP_NUM_THREADS, torch.set_num_threads):
PyTorch eager as the peer at its best (bench_vs_pytorch.peer_env), kiln
(kiln.onnx.load, trainable= the module's parameters, softmax cross-entropy,
SGD) with the JIT off and on. A step is forward, backward and the SGD update;
warm-up steps (the JIT's compiles among them) are not timed; a side's figure
is the lowest over rounds of each process's median step. The sides run
interleaved per round. --tiny (small models, one round, two steps) is the
bench_onnx_smoke ctest; no test asserts a time.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_report import md_table, replace_section  # noqa: E402
from bench_vs_pytorch import (DEBIAN_PYTHON, PEER_UNSET, cpu_has_avx512, cpu_info, ensure_packages,  # noqa: E402
                              kiln_revision, run_json, torch_info)

SECTION = "## Imported ONNX models against PyTorch"
SIDES = ["torch", "nojit", "jit"]
SIDE_NAMES = {"torch": "PyTorch eager", "nojit": "kiln JIT off", "jit": "kiln JIT on"}

# name -> sizes. resnet: batch, image side, classes; lm: batch, seq, vocab, d_model, heads, layers, ffn.
FULL = {"resnet18 b32": {"kind": "resnet18", "batch": 32, "side": 32, "classes": 10},
        "encoder LM b16 s128": {"kind": "lm", "batch": 16, "seq": 128, "vocab": 1000, "d": 256, "heads": 4,
                                "layers": 2, "ffn": 1024}}
TINY = {"resnet18 b2": {"kind": "resnet18", "batch": 2, "side": 32, "classes": 10},
        "encoder LM b2 s8": {"kind": "lm", "batch": 2, "seq": 8, "vocab": 20, "d": 16, "heads": 2, "layers": 1,
                             "ffn": 32}}


def make_model(spec):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    if spec["kind"] == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=spec["classes"])

    class EncoderLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(spec["vocab"], spec["d"])
            layer = nn.TransformerEncoderLayer(spec["d"], spec["heads"], spec["ffn"], dropout=0.0, activation="gelu",
                                               batch_first=True)
            self.enc = nn.TransformerEncoder(layer, spec["layers"])
            self.head = nn.Linear(spec["d"], spec["vocab"])
            t = spec["seq"]
            self.register_buffer("mask", torch.triu(torch.full((t, t), float("-inf")), 1))

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids), mask=self.mask))

    return EncoderLM()


def batch(spec):
    """(input, labels [N]) as numpy: seeded, the same on both sides."""
    import numpy as np
    rng = np.random.default_rng(1)
    if spec["kind"] == "resnet18":
        x = rng.standard_normal((spec["batch"], 3, spec["side"], spec["side"])).astype("float32")
        return x, rng.integers(0, spec["classes"], (spec["batch"],))
    ids = rng.integers(0, spec["vocab"], (spec["batch"], spec["seq"]))
    return ids, ((ids + 1) % spec["vocab"]).reshape(-1)


def export(spec, folder):
    """Writes model.onnx and state.pt (the exported weights) into folder."""
    import torch
    model = make_model(spec)
    x, _ = batch(spec)
    torch.onnx.export(model, (torch.from_numpy(x),), os.path.join(folder, "model.onnx"), opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["out"])
    torch.save(model.state_dict(), os.path.join(folder, "state.pt"))
    with open(os.path.join(folder, "trainable.json"), "w") as f:
        json.dump([n for n, _ in model.named_parameters()], f)


def time_steps(step, warmup, steps):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times


def peak_rss_mib():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def torch_worker(args, spec):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    model = make_model(spec)
    model.load_state_dict(torch.load(os.path.join(args.folder, "state.pt")))
    model.train()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    x, y = (torch.from_numpy(a) for a in batch(spec))

    def step():
        opt.zero_grad()
        out = model(x)
        F.cross_entropy(out.reshape(-1, out.shape[-1]), y).backward()
        opt.step()
    return time_steps(step, args.warmup, args.steps)


def kiln_worker(args, spec):
    import numpy as np
    import kiln
    with open(os.path.join(args.folder, "trainable.json")) as f:
        trainable = json.load(f)
    main, startup, inputs, outputs = kiln.onnx.load(os.path.join(args.folder, "model.onnx"), trainable=trainable)
    x, y = batch(spec)
    classes = spec["classes"] if spec["kind"] == "resnet18" else spec["vocab"]
    with kiln.program_guard(main, startup):
        label = kiln.data("label", [y.shape[0], 1], dtype=np.int64)
        logits = kiln.nn.reshape(outputs[0], [y.shape[0], classes])
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, label))
        kiln.optimizer.SGD(0.01).minimize(loss)
    exe = kiln.Executor(use_jit=args.side == "jit")
    scope = kiln.Scope()
    exe.run(startup, scope=scope)
    feed = {inputs[0].name: x, "label": y.reshape(-1, 1).astype(np.int64)}
    return time_steps(lambda: exe.run(main, feed=feed, scope=scope), args.warmup, args.steps)


def worker(args):
    spec = json.loads(args.spec)
    times = torch_worker(args, spec) if args.side == "torch" else kiln_worker(args, spec)
    print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "rss_mib": peak_rss_mib()}))


def python_path():
    build = os.environ.get("KILN_BENCH_BUILD_DIR", os.path.join(REPO, "build"))
    return os.path.join(build, "python")


def measure(name, spec, folder, threads, side, args):
    cmd = [DEBIAN_PYTHON, os.path.abspath(__file__), "--worker", "--side", side, "--folder", folder,
           "--spec", json.dumps(spec), "--threads", str(threads), "--warmup", str(args.warmup),
           "--steps", str(args.steps)]
    os.environ["PYTHONPATH"] = python_path() + os.pathsep + os.environ.get("PYTHONPATH", "")
    return run_json(cmd, threads, timeout=1800, idle_wait=args.idle_wait, peer=side == "torch")


def run_all(configs, threads_list, args, root):
    results = {}
    for name, spec in configs.items():
        folder = os.path.join(root, name.replace(" ", "_"))
        os.makedirs(folder)
        # In a process of its own: Linux keeps a process's peak RSS across
        # exec, so the workers this one starts would inherit PyTorch's.
        r = subprocess.run([DEBIAN_PYTHON, os.path.abspath(__file__), "--export", "--folder", folder,
                            "--spec", json.dumps(spec)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("bench: exporting %s failed:\n%s" % (name, r.stderr))
        for threads in threads_list:
            for r in range(args.rounds):
                for side in SIDES:
                    got = measure(name, spec, folder, threads, side, args)
                    key = (name, threads, side)
                    best = results.get(key)
                    if best is None or got["median_ms"] < best["median_ms"]:
                        results[key] = dict(got, rounds=(best or {}).get("rounds", []) + [got["median_ms"]])
                    else:
                        best["rounds"].append(got["median_ms"])
                    print("%s, %d thread(s), round %d, %s: %.3f ms" % (name, threads, r + 1, SIDE_NAMES[side],
                                                                        got["median_ms"]), flush=True)
    return results


def table(configs, threads_list, results):
    header = ["model", "thr", "PyTorch ms", "kiln off ms", "kiln JIT ms", "JIT/PyTorch", "off/PyTorch",
              "RSS MiB (PyT/off/JIT)"]
    rows = []
    for threads in threads_list:
        for name in configs:
            r = {s: results[(name, threads, s)] for s in SIDES}
            rows.append([name, str(threads)] + ["%.2f" % r[s]["median_ms"] for s in SIDES] +
                        ["%.2f" % (r["jit"]["median_ms"] / r["torch"]["median_ms"]),
                         "%.2f" % (r["nojit"]["median_ms"] / r["torch"]["median_ms"]),
                         "/".join("%.0f" % r[s]["rss_mib"] for s in SIDES)])
    return header, rows


def section(args, configs, threads_list, results, cpu, tinfo, load):
    header, rows = table(configs, threads_list, results)
    out = [SECTION, "",
           "`/usr/bin/python3 tools/bench/bench_onnx.py` (issue 28, point 7) exports torchvision's resnet18 (batch 32, "
           "3x32x32, 10 classes) and an `nn.TransformerEncoder` language model (batch 16, seq 128, vocabulary 1000, "
           "d_model 256, 4 heads, 2 layers, FFN 1024, GELU, causal mask, batch_first) with `torch.onnx.export` "
           "(opset 14, training mode), trains the export in kiln (`kiln.onnx.load` with `trainable=` the module's "
           "parameters, softmax cross-entropy, SGD) and the same module in PyTorch eager from the same weights, and "
           "rewrites this section. A step is forward, backward and the SGD update; each measurement is its own "
           "process with its own thread count; the sides run interleaved, %d round(s) of %d warm-up steps "
           "(untimed; they include the JIT's compiles) and %d timed steps; a figure is the lowest over rounds of "
           "each process's median step; RSS is the peak resident set of the process (the Python interpreter and "
           "its libraries included, PyTorch's for both sides)." % (args.rounds, args.warmup, args.steps), "",
           "Last run on %s, %s: %s (family %s model %s, %s, %d logical CPUs), kiln %s. 1-minute load average %.2f "
           "at the start and %.2f at the end." % (time.strftime("%Y-%m-%d"), "in one run", cpu["model"],
                                                   cpu["family"], cpu["cpu_model"], cpu["isa"], cpu["cpus"],
                                                   kiln_revision(), load[0], load[1]), ""]
    if tinfo:
        out += ["PyTorch %s eager as the peer at its best: without %s%s (OpenBLAS core **%s**, ATen CPU capability "
                "**%s**; BLAS loaded: %s); kiln keeps the environment. The script installs Debian's libopenblas0-openmp "
                "when missing, as run.sh does: without it PyTorch's Linear layers run on the reference BLAS (the LM "
                "step took 3.6 s instead of 0.13 s here)." %
                (tinfo["version"], ", ".join(PEER_UNSET), " and with ATEN_CPU_CAPABILITY=avx512" if cpu_has_avx512()
                 else "", tinfo["openblas_core"], tinfo["aten_capability"],
                 ", ".join("`%s`" % l for l in tinfo["blas_libs"]) or "none found"), ""]
    out += [md_table(header, rows), ""]
    return "\n".join(out)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--idle_wait", type=float, default=5.0)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--no_docs", action="store_true")
    p.add_argument("--out_dir", default=os.path.join(REPO, "docs"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--export", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    return p.parse_args()


def main():
    args = parse_args()
    if args.export:
        export(json.loads(args.spec), args.folder)
        return 0
    if args.worker:
        args.threads = int(args.threads)
        worker(args)
        return 0
    configs = FULL
    if args.tiny:
        configs, args.threads, args.rounds, args.warmup, args.steps, args.idle_wait = TINY, "1", 1, 1, 2, 0.0
    threads_list = [int(t) for t in args.threads.split(",") if t]
    # python3-torch and libopenblas0-openmp: without the latter Debian's
    # PyTorch runs its Linear layers on the reference BLAS, 25x slower.
    ensure_packages(install=not args.tiny)
    if subprocess.run([DEBIAN_PYTHON, "-c", "import torch, torchvision, onnx"], capture_output=True).returncode != 0:
        print("bench_onnx: %s cannot import torch, torchvision and onnx (Debian's python3-torch, "
              "python3-torchvision, python3-onnx)%s" % (DEBIAN_PYTHON, ": nothing to compare, skipped" if args.tiny
                                                          else ""))
        return 0 if args.tiny else 2
    tinfo = torch_info()
    cpu = cpu_info()
    print("CPU: %s (family %s model %s, %s, %d logical CPUs)" % (cpu["model"], cpu["family"], cpu["cpu_model"],
                                                                  cpu["isa"], cpu["cpus"]))
    if tinfo:
        print("PyTorch %s, BLAS_INFO=%s, BLAS libraries loaded: %s" %
              (tinfo["version"], tinfo["blas_name"], ", ".join(tinfo["blas_libs"]) or "none found"))
        print("PyTorch side runs without %s%s: OpenBLAS core %s, ATen CPU capability %s" %
              (", ".join(PEER_UNSET), " and with ATEN_CPU_CAPABILITY=avx512" if cpu_has_avx512() else "",
               tinfo["openblas_core"], tinfo["aten_capability"]))
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as root:
        results = run_all(configs, threads_list, args, root)
    load.append(os.getloadavg()[0])
    header, rows = table(configs, threads_list, results)
    print(md_table(header, rows))
    if not args.no_docs and not args.tiny:
        replace_section(os.path.join(args.out_dir, "benchmarks.md"),
                        section(args, configs, threads_list, results, cpu, tinfo, load), SECTION)
        print("wrote %s" % os.path.join(args.out_dir, "benchmarks.md"))
    return 0


if __name__ == "__main__":
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON):
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(main())
