"""kiln.optimizer.lr schedules against PyTorch's schedulers: the learning
rate of each step and the losses of a small model trained with SGD and
Momentum within 1e-6, with the JIT off and on; a run saved with kiln.save and
resumed with kiln.load in a fresh scope continues the schedule exactly; with
the JIT on, the schedule op is in the compiled cluster (kiln.dump), first,
as its framework kernel; clone(for_test=True) has no schedule op; docs/python.md's schedule snippet
runs. Skipped without python3-torch."""

import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kiln
import kiln.optimizer.lr as lr

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

STEPS = 12
RNG = np.random.default_rng(3)
XS = RNG.standard_normal((8, 4)).astype("float32")
TS = RNG.standard_normal((8, 3)).astype("float32")
W0 = 0.1


def build(schedule, momentum):
    """loss = mean((x @ w - t)^2), w [4, 3] all W0."""
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup), kiln.unique_name.guard("lrs_"):
        x = kiln.data("x", [-1, 4])
        t = kiln.data("t", [-1, 3])
        w = kiln.create_parameter("lrs_w", [4, 3], init="constant", value=W0)
        d = kiln.nn.matmul(x, w) - t
        loss = kiln.nn.mean(d * d)
        opt = kiln.optimizer.Momentum(schedule, momentum=0.9) if momentum else kiln.optimizer.SGD(schedule)
        opt.minimize(loss)
    return main, startup, loss, opt


def run_kiln(schedule, momentum, jit, steps=STEPS, resume_at=None):
    """[(loss, lr)] of `steps` steps; with resume_at, saves after that many
    steps and goes on in a fresh scope from the checkpoint."""
    main, startup, loss, opt = build(schedule, momentum)
    exe = kiln.Executor(use_jit=jit)
    scope = kiln.Scope()
    exe.run(startup, scope=scope)
    out = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(steps):
            if i == resume_at:
                kiln.save(exe, main, os.path.join(d, "ck"), step=i, scope=scope)
                scope = kiln.Scope()
                exe = kiln.Executor(use_jit=jit)
                exe.run(startup, scope=scope)
                assert kiln.load(exe, main, os.path.join(d, "ck"), scope=scope) == i
            l, r = exe.run(main, feed={"x": XS, "t": TS}, fetch_list=[loss, opt.learning_rate_var], scope=scope)
            out.append((float(np.asarray(l).reshape(-1)[0]), float(np.asarray(r).reshape(-1)[0])))
    return out


def run_torch(make_scheduler, momentum, steps=STEPS):
    w = torch.full((4, 3), W0, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0, momentum=0.9 if momentum else 0.0)
    sched = make_scheduler(opt)
    x, t = torch.tensor(XS), torch.tensor(TS)
    out = []
    for _ in range(steps):
        lr_now = opt.param_groups[0]["lr"]
        opt.zero_grad()
        d = x @ w - t
        loss = (d * d).mean()
        loss.backward()
        opt.step()
        sched.step()
        out.append((loss.item(), lr_now))
    return out


def set_lr(opt, base):
    for g in opt.param_groups:
        g["lr"] = base
        g["initial_lr"] = base


def noam(d_model, warmup, base):
    def f(step):
        a = 1.0 if step == 0 else step ** -0.5
        return base * d_model ** -0.5 * min(a, warmup ** -1.5 * step)
    return f


def warmup_cosine(warmup, start, end, base, t_max):
    def f(step):
        if step < warmup:
            return start + (end - start) * step / warmup
        return base * (1 + math.cos(math.pi * (step - warmup) / t_max)) / 2
    return f


def lambda_lr(fn):
    def make(opt):
        set_lr(opt, 1.0)
        return torch.optim.lr_scheduler.LambdaLR(opt, fn)
    return make


def with_base(base, make):
    def wrapped(opt):
        set_lr(opt, base)
        return make(opt)
    return wrapped


# (name, kiln schedule, torch scheduler factory)
CASES = [
    ("cosine", lambda: lr.CosineAnnealingDecay(0.05, T_max=5, eta_min=0.001),
     with_base(0.05, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.001))),
    ("exponential", lambda: lr.ExponentialDecay(0.05, gamma=0.8),
     with_base(0.05, lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.8))),
    ("piecewise", lambda: lr.PiecewiseDecay([3, 7], [0.05, 0.02, 0.008]),
     with_base(0.05, lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[3, 7], gamma=0.4))),
    ("noam", lambda: lr.NoamDecay(d_model=16, warmup_steps=4, learning_rate=0.2),
     lambda_lr(noam(16, 4, 0.2))),
    ("warmup_cosine", lambda: lr.LinearWarmup(lr.CosineAnnealingDecay(0.05, T_max=6), 4, 0.0, 0.05),
     lambda_lr(warmup_cosine(4, 0.0, 0.05, 0.05, 6))),
    ("warmup_constant", lambda: lr.LinearWarmup(0.04, 3, 0.01, 0.04),
     lambda_lr(lambda s: 0.01 + 0.01 * s if s < 3 else 0.04)),
]


@unittest.skipIf(torch is None, "python3-torch is not installed")
class LrScheduleTest(unittest.TestCase):
    def test_lr_and_losses_match_pytorch(self):
        for name, schedule, make in CASES:
            for momentum in (False, True):
                want = run_torch(make, momentum)
                for jit in (False, True):
                    with self.subTest(schedule=name, momentum=momentum, jit=jit):
                        got = run_kiln(schedule(), momentum, jit)
                        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=0, atol=1e-6,
                                                   err_msg="learning rate")
                        np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], rtol=0, atol=1e-6,
                                                   err_msg="loss")

    def test_resume_continues_the_schedule_exactly(self):
        for name, schedule, _ in CASES:
            for jit in (False, True):
                with self.subTest(schedule=name, jit=jit):
                    straight = run_kiln(schedule(), True, jit)
                    resumed = run_kiln(schedule(), True, jit, resume_at=5)
                    self.assertEqual(straight, resumed)  # bit for bit

    def test_the_step_counter_is_persistable_and_a_test_clone_drops_the_schedule(self):
        main, _, _, opt = build(lr.ExponentialDecay(0.1, 0.5), False)
        self.assertEqual(opt.lr_step_var.name, opt.learning_rate_var.name + ".step")
        types = [op["type"] for op in main.global_block().ops]
        self.assertEqual(types.count("lr_schedule"), 1)
        self.assertEqual(types.index("lr_schedule"), 0)  # first: it reads only its counter
        test_types = [op["type"] for op in main.clone(for_test=True).global_block().ops]
        self.assertNotIn("lr_schedule", test_types)
        self.assertNotIn("sgd", test_types)

    def test_the_schedule_runs_first_inside_the_compiled_cluster(self):
        main, _, loss, _ = build(lr.CosineAnnealingDecay(0.1, T_max=5), True)
        with tempfile.TemporaryDirectory() as d:
            explain = kiln.dump(main, d, {"x": [8, 4], "t": [8, 3]}, fetch_list=[loss])
            with open(os.path.join(d, "cluster_c0", "kernels.txt")) as f:
                kernels = f.read()
        self.assertIn("1 clusters, 0 ops left out", explain)
        self.assertIn("12 ops (lr_schedule, matmul,", explain)
        self.assertIn("\n0: lr_schedule (", kernels)
        self.assertIn("# framework kernel (reference) lr_schedule", kernels)

    def test_bad_schedules_are_refused(self):
        with self.assertRaises(ValueError):
            lr.PiecewiseDecay([1, 2], [0.1])
        with self.assertRaises(ValueError):
            lr.LinearWarmup(lr.LinearWarmup(0.1, 2, 0, 0.1), 2, 0, 0.1)
        with self.assertRaises(kiln.Error) as e:
            build(lr.PiecewiseDecay([5, 2], [0.1, 0.2, 0.3]), False)
        self.assertIn("boundaries must increase", str(e.exception))

    def test_the_docs_snippet_runs_and_prints_its_lr_column(self):
        root = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(root, "docs", "python.md")) as f:
            text = f.read()
        section = text.split("## Learning-rate schedules", 1)[1].split("\n## ", 1)[0]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(os.path.exists(os.path.join(d, "checkpoint", "manifest.json")))
        lrs = re.findall(r"lr ([0-9.]+)", r.stdout)
        self.assertEqual(lrs, ["0.0000", "0.0200", "0.0400", "0.0600", "0.0800", "0.1000", "0.0994", "0.0976"])


if __name__ == "__main__":
    unittest.main()
