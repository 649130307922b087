"""kiln.optimizer.GradientMergeOptimizer (issue 29, gradient accumulation):
k runs at batch size B update like one run at batch size k*B, within 1e-5,
for SGD (with L2 decay), Momentum (nesterov), Adam and AdamW, with the JIT
off and on, over three updates (3k runs); the parameters and the optimizer
state stay bit for bit as they were on the runs that do not update;
avg=False merges the sum; a learning-rate schedule advances once per
update; a run saved mid-cycle and resumed from kiln.load in a fresh scope
ends bit for bit where an uninterrupted one does; kiln.dump shows each
accumulation fused into its parameter's generated update kernel; bad
arguments are refused; docs/python.md's snippet runs."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kiln
import kiln.optimizer.lr as lr

K = 3
B = 4
UPDATES = 3
ATOL = 1e-5
UPDATE_OPS = ("sgd", "momentum", "adam", "adamw")


def build(make_optimizer, merge=None, avg=True, prefix="gm_"):
    """An MLP (12 -> 16 relu -> 4, mean softmax cross-entropy) with its
    optimizer; merge=k wraps it in GradientMergeOptimizer(k)."""
    main, startup = kiln.Program(), kiln.Program()
    startup.random_seed = 7
    with kiln.program_guard(main, startup), kiln.unique_name.guard(prefix):
        x = kiln.data("x", [-1, 12])
        y = kiln.data("y", [-1, 1], dtype="int64")
        h = kiln.nn.fc(x, 16, act="relu", name="fc0")
        logits = kiln.nn.fc(h, 4, name="fc1")
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, y))
        opt = make_optimizer()
        if merge is not None:
            opt = kiln.optimizer.GradientMergeOptimizer(opt, k_steps=merge, avg=avg)
        opt.minimize(loss)
    return main, startup, loss, opt


def big_batches(n=UPDATES):
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((K * B, 12)).astype(np.float32), rng.integers(0, 4, (K * B, 1)).astype(np.int64))
            for _ in range(n)]


def state_names(main):
    """Parameters and the persistable optimizer state they carry (moments,
    velocity, beta powers), without the merge's own vars."""
    names = []
    for v in main.list_vars():
        if v.persistable and "grad_merge" not in v.name and not v.name.startswith("learning_rate"):
            names.append(v.name)
    return sorted(names)


def snapshot(scope, names):
    return {n: np.array(scope.get(n)) for n in names}


def max_diff(a, b):
    return max(float(np.abs(a[n] - b[n]).max()) for n in a)


CASES = [
    ("sgd+L2", lambda: kiln.optimizer.SGD(0.2, weight_decay=0.05)),
    ("momentum nesterov", lambda: kiln.optimizer.Momentum(0.1, 0.9, use_nesterov=True)),
    ("adam", lambda: kiln.optimizer.Adam(0.01)),
    ("adamw", lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1)),
]


class GradientMergeEqualsTheLargeBatchTest(unittest.TestCase):
    def run_pair(self, make_optimizer, jit, avg=True, make_plain=None):
        """Trains the merged program on micro-batches and the plain one on
        the whole batches; checks every run; returns the largest difference."""
        main, startup, _, opt = build(make_optimizer, merge=K, avg=avg)
        pmain, pstartup, _, _ = build(make_plain or make_optimizer)
        names = state_names(main)
        self.assertEqual(names, state_names(pmain))
        exe = kiln.Executor(use_jit=jit)
        scope, pscope = kiln.Scope(), kiln.Scope()
        exe.run(startup, scope=scope)
        exe.run(pstartup, scope=pscope)
        self.assertEqual(max_diff(snapshot(scope, names), snapshot(pscope, names)), 0.0)
        worst = 0.0
        for u, (xs, ys) in enumerate(big_batches()):
            before = snapshot(scope, names)
            for j in range(K):
                exe.run(main, feed={"x": xs[j * B:(j + 1) * B], "y": ys[j * B:(j + 1) * B]}, scope=scope)
                step = float(np.array(scope.get(opt.step_var.name))[0])
                self.assertEqual(step, (j + 1) % K)
                if j < K - 1:
                    # Not an update: nothing moved, bit for bit.
                    self.assertEqual(max_diff(snapshot(scope, names), before), 0.0, "update %d run %d" % (u, j))
            exe.run(pmain, feed={"x": xs, "y": ys}, scope=pscope)
            got, want = snapshot(scope, names), snapshot(pscope, names)
            self.assertGreater(max_diff(got, before), 100 * ATOL)  # the update did move them
            worst = max(worst, max_diff(got, want))
            self.assertLess(max_diff(got, want), ATOL, "update %d" % u)
            # The accumulators are empty after an update.
            for p in main.all_parameters():
                self.assertEqual(float(np.abs(np.array(scope.get(p.name + ".grad_merge"))).max()), 0.0)
        return worst

    def test_each_optimizer_jit_off_and_on(self):
        for name, make in CASES:
            for jit in (False, True):
                with self.subTest(name, jit=jit):
                    worst = self.run_pair(make, jit)
                    print("%-18s jit=%d  k=%d  %d updates: max |param/state diff| %.2e" % (name, jit, K, UPDATES,
                                                                                        worst))

    def test_avg_false_merges_the_sum(self):
        # The sum of K mean gradients at lr is the mean at K * lr.
        for jit in (False, True):
            with self.subTest(jit=jit):
                worst = self.run_pair(lambda: kiln.optimizer.SGD(0.05), jit, avg=False,
                                      make_plain=lambda: kiln.optimizer.SGD(0.05 * K))
                print("sgd avg=False      jit=%d  max |param diff| %.2e" % (jit, worst))

    def test_a_schedule_advances_once_per_update(self):
        for jit in (False, True):
            with self.subTest(jit=jit):
                sched = lambda: kiln.optimizer.Adam(lr.ExponentialDecay(0.02, gamma=0.5))  # noqa: E731
                worst = self.run_pair(sched, jit)
                main, startup, loss, opt = build(sched, merge=K)
                exe, scope = kiln.Executor(use_jit=jit), kiln.Scope()
                exe.run(startup, scope=scope)
                xs, ys = big_batches(1)[0]
                rates = [float(np.asarray(exe.run(main, feed={"x": xs[:B], "y": ys[:B]}, scope=scope,
                                                  fetch_list=[opt.learning_rate_var])[0]).reshape(-1)[0])
                         for _ in range(2 * K)]
                np.testing.assert_allclose(rates, [0.02] * K + [0.01] * K, rtol=1e-6)
                self.assertEqual(float(np.array(scope.get(opt.lr_step_var.name))[0]), 2.0)
                print("adam+schedule      jit=%d  max |param diff| %.2e" % (jit, worst))


class GradientMergeCheckpointTest(unittest.TestCase):
    def train(self, jit, runs, resume_at=None):
        main, startup, _, opt = build(lambda: kiln.optimizer.Adam(0.01), merge=K)
        names = state_names(main)
        exe, scope = kiln.Executor(use_jit=jit), kiln.Scope()
        exe.run(startup, scope=scope)
        micro = [(xs[j * B:(j + 1) * B], ys[j * B:(j + 1) * B]) for xs, ys in big_batches() for j in range(K)]
        with tempfile.TemporaryDirectory() as d:
            for i, (xs, ys) in enumerate(micro[:runs]):
                if i == resume_at:
                    kiln.save(exe, main, os.path.join(d, "ck"), step=i, scope=scope)
                    scope, exe = kiln.Scope(), kiln.Executor(use_jit=jit)
                    exe.run(startup, scope=scope)
                    self.assertEqual(kiln.load(exe, main, os.path.join(d, "ck"), scope=scope), i)
                    # The counter and the accumulators came back mid-cycle.
                    self.assertEqual(float(np.array(scope.get(opt.step_var.name))[0]), i % K)
                    self.assertGreater(float(np.abs(np.array(scope.get("fc0.w.grad_merge"))).max()), 0.0)
                exe.run(main, feed={"x": xs, "y": ys}, scope=scope)
        return snapshot(scope, names)

    def test_resume_mid_cycle_is_exact(self):
        for jit in (False, True):
            with self.subTest(jit=jit):
                whole = self.train(jit, K * UPDATES)
                resumed = self.train(jit, K * UPDATES, resume_at=K + 1)
                self.assertEqual(max_diff(whole, resumed), 0.0)


class GradientMergeProgramTest(unittest.TestCase):
    def test_program_holds_the_counter_accumulators_and_flags(self):
        main, _, _, opt = build(lambda: kiln.optimizer.Momentum(0.1), merge=4, avg=False)
        ops = main.ops
        types = [op["type"] for op in ops]
        self.assertEqual(types.count("grad_merge_step"), 1)
        self.assertEqual(types.count("grad_merge"), 4)
        self.assertLess(types.index("grad_merge_step"), types.index("grad_merge"))
        flag = [op for op in ops if op["type"] == "grad_merge_step"][0]["outputs"]["Apply"][0]
        for op in ops:
            if op["type"] == "grad_merge":
                self.assertEqual(int(op["attrs"]["k_steps"]), 4)
                self.assertIn(op["attrs"]["avg"], (False, "false"))
            if op["type"] == "momentum":
                self.assertEqual(op["inputs"]["Apply"], [flag])
                self.assertTrue(op["inputs"]["Grad"][0].endswith("@MERGED"), op)
        persistable = {v.name for v in main.list_vars() if v.persistable}
        self.assertIn(opt.step_var.name, persistable)
        for p in main.all_parameters():
            self.assertIn(p.name + ".grad_merge", persistable)
        # clone(for_test=True) drops the whole merge with the updates.
        test_types = [op["type"] for op in main.clone(for_test=True).ops]
        self.assertFalse({"grad_merge_step", "grad_merge", "momentum"} & set(test_types))

    def test_k_steps_one_is_the_inner_optimizer(self):
        merged, _, _, opt = build(lambda: kiln.optimizer.Adam(0.01), merge=1)
        plain, _, _, _ = build(lambda: kiln.optimizer.Adam(0.01))
        self.assertEqual([op["type"] for op in merged.ops], [op["type"] for op in plain.ops])
        self.assertIsNone(opt.step_var)

    def test_bad_arguments_are_refused(self):
        sgd = kiln.optimizer.SGD(0.1)
        for k in (0, -2, 1.5, "2", True):
            with self.assertRaisesRegex(ValueError, "k_steps must be an int >= 1"):
                kiln.optimizer.GradientMergeOptimizer(sgd, k_steps=k)
        for inner in ("sgd", None, kiln.optimizer.GradientMergeOptimizer(sgd, 2)):
            with self.assertRaisesRegex(TypeError, "inner_optimizer must be a kiln.optimizer optimizer"):
                kiln.optimizer.GradientMergeOptimizer(inner, 2)
        with self.assertRaisesRegex(TypeError, "avg must be a bool"):
            kiln.optimizer.GradientMergeOptimizer(sgd, 2, avg=1)

    def test_dump_shows_each_accumulation_inside_its_update_kernel(self):
        main, _, _, _ = build(lambda: kiln.optimizer.Adam(0.01), merge=K)
        with tempfile.TemporaryDirectory() as d:
            kiln.dump(main, d, {"x": [B, 12], "y": [B, 1]})
            with open(os.path.join(d, "cluster_c0", "kernels.txt")) as f:
                kernels = f.read()
        sections = kernels.split("# kernel ")[1:]
        fused = [k for k in sections if " ops=[grad_merge,adam] " in k]
        # One generated kernel per parameter reads the gradient and writes
        # the accumulator, the parameter and its moments: no separate pass.
        self.assertEqual(len(fused), 4, kernels)
        self.assertFalse([k for k in sections if " ops=[grad_merge] " in k], kernels)

    def test_docs_snippet_runs(self):
        root = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(root, "docs", "python.md")) as f:
            text = f.read()
        snippet = re.search(r"<!-- gradient-merge-snippet .*? -->\n```python\n(.*?)```", text, re.S).group(1)
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__))))
            r = subprocess.run([sys.executable, "-c", snippet], cwd=d, env=env, capture_output=True, text=True,
                               timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("unchanged between updates: True", r.stdout)


if __name__ == "__main__":
    unittest.main()
