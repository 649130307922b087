"""Weight decay (issue 29): ``weight_decay=`` (L2, Paddle's L2Decay) on SGD,
Momentum and Adam, and AdamW's decoupled decay with apply_decay_param_fun.
A small MLP trained 20 steps in kiln (JIT off and on) and in PyTorch
(torch.optim.SGD/Adam(weight_decay=...), torch.optim.AdamW with param groups
where kiln's apply_decay_param_fun leaves the biases alone) ends with the same
parameters and losses within 1e-5; ``kiln.dump`` (what ``kiln dump`` writes) shows the decay inside the
generated update kernel. Skipped when python3-torch is not installed."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kiln

import torch_mlp
from torch_mlp import torch

ATOL = 1e-5
SEED, DATA = 7, torch_mlp.batches(3)


def not_bias(name):
    return not name.endswith(".b")


def build(make_optimizer):
    return torch_mlp.build(make_optimizer, SEED)


def train_kiln(make_optimizer, use_jit):
    return torch_mlp.train_kiln(make_optimizer, use_jit, SEED, DATA)


def train_torch(init, make_optimizer):
    params, losses, _ = torch_mlp.train_torch(init, make_optimizer, DATA)
    return params, losses


def adamw_groups(model, **kw):
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], **kw)


CASES = [
    ("sgd", lambda: kiln.optimizer.SGD(0.1, weight_decay=0.05),
     lambda m: torch.optim.SGD(m.parameters(), 0.1, weight_decay=0.05)),
    ("sgd L2Decay", lambda: kiln.optimizer.SGD(0.1, weight_decay=kiln.regularizer.L2Decay(0.05)),
     lambda m: torch.optim.SGD(m.parameters(), 0.1, weight_decay=0.05)),
    ("momentum", lambda: kiln.optimizer.Momentum(0.05, 0.9, weight_decay=0.02),
     lambda m: torch.optim.SGD(m.parameters(), 0.05, momentum=0.9, weight_decay=0.02)),
    ("adam", lambda: kiln.optimizer.Adam(0.01, weight_decay=0.03),
     lambda m: torch.optim.Adam(m.parameters(), 0.01, weight_decay=0.03)),
    ("adamw", lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1),
     lambda m: torch.optim.AdamW(m.parameters(), 0.01, weight_decay=0.1)),
    ("adamw without bias decay",
     lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1, apply_decay_param_fun=not_bias),
     lambda m: adamw_groups(m, lr=0.01, weight_decay=0.1)),
]


@unittest.skipIf(torch is None, "python3-torch is missing")
class WeightDecayMatchesPyTorchTest(unittest.TestCase):
    def test_twenty_steps_match_pytorch(self):
        torch.set_num_threads(1)
        for name, make_kiln, make_torch in CASES:
            for jit in (False, True):
                with self.subTest(name, jit=jit):
                    init, got, got_losses = train_kiln(make_kiln, jit)
                    want, want_losses = train_torch(init, make_torch)
                    diff = max(float(np.abs(got[n] - want[n]).max()) for n in want)
                    loss_diff = float(np.abs(np.array(got_losses) - np.array(want_losses)).max())
                    print("%-26s jit=%d  max |param diff| %.2e  max |loss diff| %.2e" % (name, jit, diff, loss_diff))
                    self.assertLess(diff, ATOL)
                    self.assertLess(loss_diff, ATOL)
                    # The decay mattered: without it the parameters end elsewhere.
                    self.assertGreater(float(np.abs(got["fc0.w"] - init["fc0.w"]).max()), 10 * ATOL)

    def test_decay_and_its_exclusion_change_the_result(self):
        _, plain, _ = train_kiln(lambda: kiln.optimizer.Adam(0.01), False)
        init, all_decay, _ = train_kiln(lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1), False)
        _, no_bias, _ = train_kiln(lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1,
                                                                apply_decay_param_fun=not_bias), False)
        # (Which parameters decay is checked exactly against PyTorch's param
        # groups above and on the ops' coeff below.)
        self.assertGreater(float(np.abs(all_decay["fc0.w"] - plain["fc0.w"]).max()), 1e-4)
        self.assertGreater(float(np.abs(no_bias["fc0.b"] - all_decay["fc0.b"]).max()), 1e-5)


class WeightDecayProgramTest(unittest.TestCase):
    def ops_of(self, make_optimizer):
        main, _, _ = build(make_optimizer)
        return [op for op in main.ops if op["type"] in ("sgd", "momentum", "adam", "adamw")]

    def test_update_ops_carry_the_decay(self):
        for make, kind, attr in ((lambda: kiln.optimizer.SGD(0.1, weight_decay=0.5), "sgd", "regularization_coeff"),
                                 (lambda: kiln.optimizer.Momentum(0.1, weight_decay=0.5), "momentum",
                                  "regularization_coeff"),
                                 (lambda: kiln.optimizer.Adam(weight_decay=0.5), "adam", "regularization_coeff"),
                                 (lambda: kiln.optimizer.AdamW(weight_decay=0.5), "adamw", "coeff")):
            ops = self.ops_of(make)
            self.assertEqual([op["type"] for op in ops], [kind] * 4)
            for op in ops:
                self.assertEqual(float(op["attrs"][attr]), 0.5, op)
        # Without decay the programs are as before: no decay attribute at all.
        for op in self.ops_of(lambda: kiln.optimizer.Adam()):
            self.assertNotIn("regularization_coeff", op["attrs"])
        coeffs = {op["inputs"]["Param"][0]: float(op["attrs"]["coeff"])
                  for op in self.ops_of(lambda: kiln.optimizer.AdamW(apply_decay_param_fun=not_bias))}
        self.assertEqual(coeffs, {"fc0.w": 0.01, "fc0.b": 0.0, "fc1.w": 0.01, "fc1.b": 0.0})

    def test_bad_settings_are_refused(self):
        with self.assertRaises(TypeError):
            kiln.optimizer.SGD(0.1, weight_decay="0.1")
        with self.assertRaises(TypeError):
            kiln.optimizer.AdamW(apply_decay_param_fun=3)
        with self.assertRaisesRegex(kiln.Error, "weight_decay must be finite and >= 0, got -1"):
            build(lambda: kiln.optimizer.Adam(weight_decay=-1.0))

    def test_dump_shows_the_decay_inside_the_generated_update_kernel(self):
        main, _, _ = build(lambda: kiln.optimizer.AdamW(0.01, weight_decay=0.1, apply_decay_param_fun=not_bias))
        with tempfile.TemporaryDirectory() as d:
            kiln.dump(main, d, {"x": [8, 12], "y": [8, 1]})
            with open(os.path.join(d, "cluster_c0", "kernels.txt")) as f:
                kernels = f.read()
        # Each adamw is one generated elementwise kernel: no framework kernel,
        # no separate decay pass over the weight.
        listing = [line for line in kernels.splitlines() if line.endswith("fusing adamw")]
        self.assertEqual(len(listing), 4, kernels)
        self.assertTrue(all("generated" in line for line in listing), kernels)
        # The kernels' programs: the weights' hold the decay's constant
        # (p * (1 - lr * 0.1)), the biases' (apply_decay_param_fun said no) not.
        sections = kernels.split("# kernel ")[1:]
        adamw = [k for k in sections if " ops=[adamw] " in k]
        self.assertEqual(len(adamw), 4, kernels)
        decayed = [k for k in adamw if "const 0.100000001\n" in k]
        self.assertEqual(len(decayed), 2, "\n".join(adamw))

    def test_docs_snippet_runs(self):
        root = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(root, "docs", "python.md")) as f:
            text = f.read()
        snippet = re.search(r"<!-- weight-decay-snippet .*? -->\n```python\n(.*?)```", text, re.S).group(1)
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__))))
            r = subprocess.run([sys.executable, "-c", snippet], cwd=d, env=env, capture_output=True, text=True,
                               timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("('adamw', '0.05')", r.stdout.replace("0.0500000007", "0.05"))

if __name__ == "__main__":
    unittest.main()
