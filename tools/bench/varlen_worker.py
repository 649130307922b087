"""The measuring half of tools/bench/varlen.py: one process trains the causal LM
(kiln with the JIT on or off, or its PyTorch twin) over a schedule of sequence
lengths and prints one JSON line: each timed step's length and milliseconds,
and for kiln the JIT's counts and its per-cluster compile lines.

The LM is examples/char_lm.py's without dropout: byte embedding plus a learned
position table of --max_len rows, --layers pre-LN decoder blocks (4 heads,
causal softmax, GELU feed-forward of 4 d), a final layer norm and a 256-way
head, Adam (lr 1e-3). kiln looks the positions up from fed position ids, so
one program takes every length ([-1, -1, 1] data vars); PyTorch slices the
same kind of table (torch_peer.py's Gpt, rows 0..L-1).

Batches are windows of the bytes of /usr/share/common-licenses (random
tokens where that folder is missing), drawn with a fixed seed before the
timed loop, so data preparation is outside every measured time.
"""

import json
import math
import os
import resource
import sys
import tempfile
import time

import numpy as np

TEXT_DIR = "/usr/share/common-licenses"


def corpus():
    """(bytes as int64, where they came from)."""
    if os.path.isdir(TEXT_DIR):
        files = sorted(f for f in os.listdir(TEXT_DIR) if not os.path.islink(os.path.join(TEXT_DIR, f)))
        data = b"".join(open(os.path.join(TEXT_DIR, f), "rb").read() for f in files)
        if len(data) > 4096:
            return np.frombuffer(data, np.uint8).astype("int64"), "bytes of " + TEXT_DIR
    return np.random.default_rng(0).integers(0, 256, 1 << 20).astype("int64"), "random bytes"


def make_batches(schedule, batch, seed=1):
    """One (ids [B, L], targets [B, L]) per step of the schedule, int64."""
    text, _ = corpus()
    rng = np.random.default_rng(seed)
    out = []
    for length in schedule:
        starts = rng.integers(0, len(text) - length - 1, batch)
        rows = np.stack([text[s:s + length + 1] for s in starts])
        out.append((rows[:, :length].copy(), rows[:, 1:].copy()))
    return out


# ---------------------------------------------------------------- kiln

def kiln_lm(kiln, spec):
    """(main, startup, loss): the LM for any length up to spec['max_len']."""
    d, heads = spec["d"], spec["heads"]
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        ids = kiln.data("ids", [-1, -1, 1], dtype="int64")
        pos = kiln.data("pos", [-1, -1, 1], dtype="int64")
        targets = kiln.data("targets", [-1, -1, 1], dtype="int64")
        x = kiln.nn.embedding(ids, size=[256, d]) + kiln.nn.embedding(pos, size=[spec["max_len"], d])
        for _ in range(spec["layers"]):
            h = kiln.nn.layer_norm(x, begin_norm_axis=2)
            q, k, v = (kiln.nn.transpose2(kiln.nn.reshape2(kiln.nn.fc(h, d, num_flatten_dims=2),
                                                           shape=[0, 0, heads, d // heads]), axis=[0, 2, 1, 3])
                       for _ in range(3))
            att = kiln.nn.fused_softmax_mask_upper_triangle(
                kiln.nn.matmul(q, k, transpose_Y=True, alpha=1 / math.sqrt(d // heads)))
            ctx = kiln.nn.reshape2(kiln.nn.transpose2(kiln.nn.matmul(att, v), axis=[0, 2, 1, 3]), shape=[0, 0, d])
            x = x + kiln.nn.fc(ctx, d, num_flatten_dims=2)
            h = kiln.nn.layer_norm(x, begin_norm_axis=2)
            x = x + kiln.nn.fc(kiln.nn.fc(h, 4 * d, num_flatten_dims=2, act="gelu"), d, num_flatten_dims=2)
        logits = kiln.nn.fc(kiln.nn.layer_norm(x, begin_norm_axis=2), 256, num_flatten_dims=2)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, targets))
        kiln.optimizer.Adam(learning_rate=1e-3).minimize(loss)
    return main, startup, loss


class CapturedStderr:
    """fd 2 into a temporary file while open: the JIT's C++ log lines land
    there too. `lines` holds them after close; they are echoed to stderr."""

    def __enter__(self):
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        sys.stderr.write(text)
        self.lines = text.splitlines()
        return False


def kiln_worker(args, spec, warm, timed):
    import kiln
    jit = args.side == "jit"
    if jit:
        kiln.set_flags({"jit_verbose": 1})
        if args.recompile_limit:
            kiln.set_flags({"jit_recompile_limit": args.recompile_limit})
    main, startup, loss = kiln_lm(kiln, spec)
    kiln.Executor(use_jit=False).run(startup)
    exe = kiln.Executor(use_jit=jit)

    def feed(ids, targets):
        pos = np.broadcast_to(np.arange(ids.shape[1], dtype="int64"), ids.shape)
        return {"ids": ids[:, :, None], "pos": pos[:, :, None].copy(), "targets": targets[:, :, None]}

    warm = [feed(*b) for b in warm]
    timed = [feed(*b) for b in timed]
    for f in warm:
        exe.run(main, feed=f, fetch_list=[loss])
    after_warmup = kiln.jit_stats()
    times, value = [], 0.0
    with CapturedStderr() as err:
        start = time.perf_counter()
        for f in timed:
            t0 = time.perf_counter()
            value = float(exe.run(main, feed=f, fetch_list=[loss])[0][0])
            times.append(1e3 * (time.perf_counter() - t0))
        total = time.perf_counter() - start
    after_run = kiln.jit_stats()
    params = sum(int(np.prod(p.shape)) for p in main.all_parameters())
    return {"times_ms": times, "total_s": total, "final_loss": value, "params": params,
            "recompile_limit": kiln.get_flags(["jit_recompile_limit"])["jit_recompile_limit"],
            "jit_after_warmup": after_warmup, "jit_after_run": after_run,
            "jit_lines": [l for l in err.lines if l.startswith("kiln jit:")]}


# ---------------------------------------------------------------- PyTorch

def torch_worker(args, spec, warm, timed):
    import torch  # after OMP_NUM_THREADS is set by the parent
    from torch_peer import torch_models
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = torch_models(torch)["gpt"](layers=spec["layers"], seq_len=spec["max_len"], d_model=spec["d"],
                                       num_heads=spec["heads"], ffn_dim=4 * spec["d"], vocab=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(ids, targets):
        length = ids.shape[1]
        x = model.tok(ids) + model.pos[:length]
        for block in model.blocks:
            x = block(x, model.mask[:length, :length])
        logits = model.head(model.ln_f(x))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    warm = [(torch.from_numpy(i), torch.from_numpy(t)) for i, t in warm]
    timed = [(torch.from_numpy(i), torch.from_numpy(t)) for i, t in timed]
    for b in warm:
        step(*b)
    times, value = [], 0.0
    start = time.perf_counter()
    for b in timed:
        t0 = time.perf_counter()
        value = step(*b)
        times.append(1e3 * (time.perf_counter() - t0))
    total = time.perf_counter() - start
    return {"times_ms": times, "total_s": total, "final_loss": value, "threads": torch.get_num_threads(),
            "params": sum(p.numel() for p in model.parameters())}


def worker(args):
    """Prints the JSON line of one measurement (args: side, spec, warm-up and timed schedules)."""
    spec = json.loads(args.spec)
    warm_schedule = [int(v) for v in args.warm_schedule.split(",") if v]
    schedule = [int(v) for v in args.schedule.split(",") if v]
    batches = make_batches(warm_schedule + schedule, spec["batch"])
    warm, timed = batches[:len(warm_schedule)], batches[len(warm_schedule):]
    run = torch_worker if args.side == "torch" else kiln_worker
    out = run(args, spec, warm, timed)
    out.update({"side": args.side, "schedule": schedule, "warm_schedule": warm_schedule, "data": corpus()[1],
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0})
    print(json.dumps(out))
