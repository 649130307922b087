#!/usr/bin/python3
"""Step time of a small MLP trained from Python (the docs' digits MLP: 64 ->
128 -> 10, momentum), as a user's script sees it: exe.run per step.

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/python_step.py [--steps 400] [--batch 32]

Prints the median ms per step with the JIT off, with it on, and with it on
after as many feeds that fail shape checks (a batch of x and a batch of
labels that disagree) as --jit_recompile_limit allows signatures, each
followed by a valid batch of a size not seen before: the case where bad
feeds used to use up the recompile budget. Runs on older builds too (for a
side-by-side of two builds). Times nothing against a bound.
"""

import argparse
import time

import numpy as np

import kiln


def model():
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        x = kiln.data("x", [-1, 64])
        label = kiln.data("label", [-1, 1], dtype="int64")
        logits = kiln.nn.fc(kiln.nn.fc(x, 128, act="relu"), 10)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, label))
        kiln.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 64)).astype("float32"), rng.integers(0, 10, (n, 1)).astype("int64")


def median_ms(exe, main, loss, scope, n, steps):
    x, y = batch(n)
    for _ in range(10):
        exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    rows = []
    for jit in (False, True):
        prog, startup, loss = model()
        scope = kiln.Scope()
        exe = kiln.Executor(use_jit=jit)
        exe.run(startup, scope=scope)
        rows.append(("JIT %s" % ("on" if jit else "off"), median_ms(exe, prog, loss, scope, args.batch, args.steps)))
    prog, startup, loss = model()
    scope = kiln.Scope()
    exe = kiln.Executor(use_jit=True)
    exe.run(startup, scope=scope)
    limit = kiln.get_flags(["jit_recompile_limit"])["jit_recompile_limit"]
    bad = 0
    for n in range(2, limit + 3):
        x, _ = batch(n)
        _, y = batch(n + 1)
        try:
            exe.run(prog, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
        except kiln.Error:
            bad += 1
    stats = getattr(kiln, "jit_stats", lambda: None)  # older builds have none
    before = stats()
    ms = median_ms(exe, prog, loss, scope, args.batch + 1, args.steps)
    after = stats()
    rows.append(("JIT on, after %d bad feeds, batch %d" % (bad, args.batch + 1), ms))
    for what, ms in rows:
        print("%-40s %.3f ms/step" % (what, ms))
    if after is not None:
        print("after the bad feeds: %d compiles, %d calls answered by the framework ops"
              % (after["compiles"] - before["compiles"], after["fallback_calls"] - before["fallback_calls"]))


if __name__ == "__main__":
    main()
