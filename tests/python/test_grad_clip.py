"""Gradient clipping (issue 29): ``grad_clip=kiln.nn.ClipGradByGlobalNorm``
and ``ClipGradByValue`` on SGD, Momentum, Adam and AdamW. A small MLP
trained 20 steps in kiln (JIT off and on) and in PyTorch
(``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` before
torch.optim.SGD/Adam/AdamW's step, whose weight decay then acts on the
clipped gradient, Paddle's order) ends with the same parameters and losses
within 1e-5, with clipping active in most steps and, for a large clip_norm,
in none. The programs: one clip_by_global_norm op whose Scale each update
reads, value bounds as update-op attributes; ``kiln.dump`` shows the scale
inside the generated update kernels. Skipped when python3-torch is not
installed."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kiln

import torch_mlp
from torch_mlp import STEPS, torch

ATOL = 1e-5
UPDATES = ("sgd", "momentum", "adam", "adamw")
# Inputs of scale 3: the gradients' global norm is around 1 to 3.
SEED, DATA = 11, torch_mlp.batches(5, scale=3.0)


def build(make_optimizer):
    return torch_mlp.build(make_optimizer, SEED)


def train_kiln(make_optimizer, use_jit):
    return torch_mlp.train_kiln(make_optimizer, use_jit, SEED, DATA)


def train_torch(init, make_optimizer, clip):
    """`clip(params)` clips the gradients in place before each step and
    returns whether it changed them."""
    return torch_mlp.train_torch(init, make_optimizer, DATA, before_step=clip)


def by_norm(clip_norm):
    def clip(params):
        return float(torch.nn.utils.clip_grad_norm_(params, clip_norm)) > clip_norm
    return clip


def by_value(hi, lo=None):
    lo = -hi if lo is None else lo

    def clip(params):
        changed = any(bool(((p.grad < lo) | (p.grad > hi)).any()) for p in params)
        if lo == -hi:
            torch.nn.utils.clip_grad_value_(params, hi)
        else:
            for p in params:
                p.grad.clamp_(lo, hi)
        return changed
    return clip


GlobalNorm = kiln.nn.ClipGradByGlobalNorm
Value = kiln.nn.ClipGradByValue

# name, kiln optimizer, torch optimizer, torch clip, steps clipped (at least; "none": 0).
CASES = [
    ("sgd global norm", lambda: kiln.optimizer.SGD(0.1, grad_clip=GlobalNorm(0.5)),
     lambda m: torch.optim.SGD(m.parameters(), 0.1), by_norm(0.5), 15),
    ("sgd global norm, not active", lambda: kiln.optimizer.SGD(0.1, grad_clip=GlobalNorm(100.0)),
     lambda m: torch.optim.SGD(m.parameters(), 0.1), by_norm(100.0), "none"),
    ("momentum value + L2", lambda: kiln.optimizer.Momentum(0.05, 0.9, weight_decay=0.02, grad_clip=Value(0.05)),
     lambda m: torch.optim.SGD(m.parameters(), 0.05, momentum=0.9, weight_decay=0.02), by_value(0.05), 15),
    ("sgd value [min, max]", lambda: kiln.optimizer.SGD(0.1, grad_clip=Value(0.02, min=-0.01)),
     lambda m: torch.optim.SGD(m.parameters(), 0.1), by_value(0.02, -0.01), 15),
    ("adam global norm + L2", lambda: kiln.optimizer.Adam(0.01, weight_decay=0.03, grad_clip=GlobalNorm(0.2)),
     lambda m: torch.optim.Adam(m.parameters(), 0.01, weight_decay=0.03), by_norm(0.2), 15),
    ("adam global norm, not active", lambda: kiln.optimizer.Adam(0.01, grad_clip=GlobalNorm(1e3)),
     lambda m: torch.optim.Adam(m.parameters(), 0.01), by_norm(1e3), "none"),
    ("adamw global norm", lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1, grad_clip=GlobalNorm(0.3)),
     lambda m: torch.optim.AdamW(m.parameters(), 0.01, weight_decay=0.1), by_norm(0.3), 15),
    ("adamw value", lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1, grad_clip=Value(0.02)),
     lambda m: torch.optim.AdamW(m.parameters(), 0.01, weight_decay=0.1), by_value(0.02), 15),
]


@unittest.skipIf(torch is None, "python3-torch is missing")
class GradClipMatchesPyTorchTest(unittest.TestCase):
    def test_twenty_steps_match_pytorch(self):
        torch.set_num_threads(1)
        for name, make_kiln, make_torch, clip, clipped_steps in CASES:
            for jit in (False, True):
                with self.subTest(name, jit=jit):
                    init, got, got_losses = train_kiln(make_kiln, jit)
                    want, want_losses, clipped = train_torch(init, make_torch, clip)
                    diff = max(float(np.abs(got[n] - want[n]).max()) for n in want)
                    loss_diff = float(np.abs(np.array(got_losses) - np.array(want_losses)).max())
                    print("%-30s jit=%d  clipped %2d/%d steps  max |param diff| %.2e  max |loss diff| %.2e"
                          % (name, jit, clipped, STEPS, diff, loss_diff))
                    if clipped_steps == "none":
                        self.assertEqual(clipped, 0)
                    else:
                        self.assertGreaterEqual(clipped, clipped_steps)
                    self.assertLess(diff, ATOL)
                    self.assertLess(loss_diff, ATOL)

    def test_clipping_changes_the_result(self):
        _, plain, _ = train_kiln(lambda: kiln.optimizer.SGD(0.1), False)
        _, loose, _ = train_kiln(lambda: kiln.optimizer.SGD(0.1, grad_clip=GlobalNorm(100.0)), False)
        _, tight, _ = train_kiln(lambda: kiln.optimizer.SGD(0.1, grad_clip=GlobalNorm(0.5)), False)
        for n in plain:
            np.testing.assert_array_equal(loose[n], plain[n])
        self.assertGreater(max(float(np.abs(tight[n] - plain[n]).max()) for n in plain), 1e-3)


class GradClipProgramTest(unittest.TestCase):
    def ops_of(self, make_optimizer):
        main, _, _ = build(make_optimizer)
        return main.ops

    def test_global_norm_is_one_op_whose_scale_every_update_reads(self):
        for kind, make in (("sgd", lambda: kiln.optimizer.SGD(0.1, grad_clip=GlobalNorm(1.0))),
                           ("momentum", lambda: kiln.optimizer.Momentum(0.1, grad_clip=GlobalNorm(1.0))),
                           ("adam", lambda: kiln.optimizer.Adam(grad_clip=GlobalNorm(1.0))),
                           ("adamw", lambda: kiln.optimizer.AdamW(grad_clip=GlobalNorm(1.0)))):
            ops = self.ops_of(make)
            clips = [op for op in ops if op["type"] == "clip_by_global_norm"]
            self.assertEqual(len(clips), 1, kind)
            self.assertEqual(len(clips[0]["inputs"]["X"]), 4)
            self.assertEqual(float(clips[0]["attrs"]["clip_norm"]), 1.0)
            scale = clips[0]["outputs"]["Scale"]
            updates = [op for op in ops if op["type"] in UPDATES]
            self.assertEqual([op["type"] for op in updates], [kind] * 4)
            self.assertEqual(sorted(clips[0]["inputs"]["X"]), sorted(op["inputs"]["Grad"][0] for op in updates))
            for op in updates:
                self.assertEqual(op["inputs"]["GradScale"], scale)
            self.assertLess(ops.index(clips[0]), ops.index(updates[0]))

    def test_value_clip_is_two_attributes_and_no_op(self):
        ops = self.ops_of(lambda: kiln.optimizer.Adam(grad_clip=Value(0.5, min=-0.25)))
        self.assertFalse([op for op in ops if op["type"] == "clip_by_global_norm"])
        updates = [op for op in ops if op["type"] in UPDATES]
        self.assertEqual(len(updates), 4)
        for op in updates:
            self.assertEqual(float(op["attrs"]["grad_clip_min"]), -0.25)
            self.assertEqual(float(op["attrs"]["grad_clip_max"]), 0.5)
            self.assertNotIn("GradScale", op["inputs"])
        # Without grad_clip the programs are as before.
        for op in self.ops_of(lambda: kiln.optimizer.Adam()):
            self.assertNotIn("grad_clip_min", op["attrs"])
            self.assertNotIn("GradScale", op["inputs"])

    def test_bad_settings_are_refused(self):
        for bad in (0, -1.0, float("inf"), float("nan")):
            with self.assertRaisesRegex(kiln.Error, "ClipGradByGlobalNorm: clip_norm must be"):
                GlobalNorm(bad)
        with self.assertRaisesRegex(TypeError, "ClipGradByGlobalNorm: clip_norm must be a float"):
            GlobalNorm("1.0")
        with self.assertRaisesRegex(TypeError, "clip_norm must be a float"):
            GlobalNorm(True)
        with self.assertRaisesRegex(kiln.Error, "ClipGradByValue: min must be below max"):
            Value(1.0, min=2.0)
        with self.assertRaisesRegex(kiln.Error, "ClipGradByValue: min must be below max"):
            Value(-1.0)
        with self.assertRaisesRegex(TypeError, "ClipGradByValue: max must be a float"):
            Value(None)
        for make in (lambda: kiln.optimizer.SGD(0.1, grad_clip=1.0),
                     lambda: kiln.optimizer.AdamW(grad_clip="norm"),
                     lambda: kiln.optimizer.Momentum(0.1, grad_clip=kiln.regularizer.L2Decay(0.1))):
            with self.assertRaisesRegex(TypeError, "grad_clip must be kiln.nn.ClipGradByGlobalNorm"):
                make()

    def test_dump_shows_the_scale_inside_the_generated_update_kernels(self):
        main, _, _ = build(lambda: kiln.optimizer.Adam(0.01, grad_clip=GlobalNorm(1.0)))
        scale = [op for op in main.ops if op["type"] == "clip_by_global_norm"][0]["outputs"]["Scale"][0]
        with tempfile.TemporaryDirectory() as d:
            kiln.dump(main, d, {"x": [8, 12], "y": [8, 1]})
            with open(os.path.join(d, "cluster_c0", "kernels.txt")) as f:
                kernels = f.read()
        # The norm: one framework kernel; each adam one generated kernel that
        # reads the scale as its last input (no separate pass scaling the
        # gradients) ...
        listing = kernels.split("# kernel ")[0]
        self.assertEqual(len([ln for ln in listing.splitlines() if ln.endswith("clip_by_global_norm")]), 1, kernels)
        adam = [ln for ln in listing.splitlines() if ln.endswith("fusing adam")]
        self.assertEqual(len(adam), 4, kernels)
        for ln in adam:
            self.assertIn("generated", ln)
            self.assertRegex(ln, r":%s -> " % re.escape(scale))
        # ... and multiplies the gradient (in1) by it (in7, read at every point)
        # before anything else uses the gradient.
        sections = [k for k in kernels.split("# kernel ")[1:] if " ops=[adam] " in k]
        self.assertEqual(len(sections), 4, kernels)
        for k in sections:
            self.assertIn(" in7=[0] ", k)
            self.assertRegex(k, r"%8 = mul %1, %7\n")
            self.assertEqual(len(re.findall(r" %1\b", k)), 1, k)

    def test_docs_snippet_runs(self):
        root = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(root, "docs", "python.md")) as f:
            text = f.read()
        snippet = re.search(r"<!-- grad-clip-snippet .*? -->\n```python\n(.*?)```", text, re.S).group(1)
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__))))
            r = subprocess.run([sys.executable, "-c", snippet], cwd=d, env=env, capture_output=True, text=True,
                               timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("clip_by_global_norm", r.stdout)


if __name__ == "__main__":
    unittest.main()
