#!/usr/bin/python3
"""concat, split, slice, clip, log_softmax and fused_softmax_mask_upper_triangle
through `kiln run --append_backward` (JIT off, and on in both launch modes)
against PyTorch in float64: a causal-attention program and a CNN-style
channel program, their losses, outputs and input gradients. Runs when
Debian's python3-torch is installed (skipped otherwise).

    /usr/bin/python3 tests/model_ops_torch_test.py --kiln build/tools/kiln
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.path.join(REPO, "build", "tools", "kiln")
MODES = [[], ["--use_jit"], ["--use_jit", "--jit_launch_mode", "executor"]]

try:
    import torch
except ImportError:
    torch = None


def var(name, dims, persistable=False):
    d = " ".join("dims: %d" % n for n in dims)
    return 'vars { name: "%s" dtype: FP32 %s persistable: %s }' % (name, d, "true" if persistable else "false")


def op(type_, inputs, outputs, attrs=()):
    """inputs/outputs: [(slot, [args])]; attrs: pbtxt attr bodies."""
    s = 'ops { type: "%s"' % type_
    for slot, args in inputs:
        s += ' inputs { name: "%s" %s }' % (slot, " ".join('args: "%s"' % a for a in args))
    for slot, args in outputs:
        s += ' outputs { name: "%s" %s }' % (slot, " ".join('args: "%s"' % a for a in args))
    for a in attrs:
        s += " attrs { %s }" % a
    return s + " }"


def ints(name, values):
    return 'name: "%s" type: INTS %s' % (name, " ".join("ints: %d" % v for v in values))


def int_(name, value):
    return 'name: "%s" type: INT i: %d' % (name, value)


def float_(name, value):
    return 'name: "%s" type: FLOAT f: %r' % (name, value)


def program(vars_, ops):
    return "blocks {\n idx: 0 parent_idx: -1\n %s\n %s\n}\n" % ("\n ".join(vars_), "\n ".join(ops))


def slice_attrs(axes, starts, ends, decrease=()):
    return [ints("axes", axes), ints("starts", starts), ints("ends", ends), ints("decrease_axis", decrease)]


# x [2,5,4] @ w [4,9] -> split (sections 3,-1,3) -> a b^T -> causal softmax
# -> concat with c along the last axis -> rows 1.. (negative start) -> clip
# -> log_softmax -> mean.
ATTENTION = program(
    [var("x", [2, 5, 4]), var("w", [4, 9], True), var("h", [2, 5, 9]), var("a", [2, 5, 3]), var("b", [2, 5, 3]),
     var("c", [2, 5, 3]), var("s", [2, 5, 5]), var("p", [2, 5, 5]), var("pc", [2, 5, 8]), var("t", [2, 4, 8]),
     var("e", [2, 4, 8]), var("f", [2, 4, 8]), var("loss", [1])],
    [op("matmul", [("X", ["x"]), ("Y", ["w"])], [("Out", ["h"])]),
     op("split", [("X", ["h"])], [("Out", ["a", "b", "c"])], [int_("axis", -1), ints("sections", [3, -1, 3])]),
     op("matmul", [("X", ["a"]), ("Y", ["b"])], [("Out", ["s"])], ['name: "transpose_Y" type: BOOL b: true']),
     op("fused_softmax_mask_upper_triangle", [("X", ["s"])], [("Out", ["p"])]),
     op("concat", [("X", ["p", "c"])], [("Out", ["pc"])], [int_("axis", -1)]),
     op("slice", [("Input", ["pc"])], [("Out", ["t"])], slice_attrs([1], [-4], [1000])),
     op("clip", [("X", ["t"])], [("Out", ["e"])], [float_("min", -0.75), float_("max", 0.75)]),
     op("log_softmax", [("X", ["e"])], [("Out", ["f"])]),
     op("mean", [("X", ["f"])], [("Out", ["loss"])])])


def attention_torch(x, w):
    h = x @ w
    a, b, c = torch.split(h, [3, 3, 3], dim=-1)
    s = a @ b.transpose(-1, -2)
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
    e = torch.clamp(torch.cat([p, c], -1)[:, -4:], -0.75, 0.75)
    f = torch.log_softmax(e, -1)
    return f, f.mean()


# x [2,3,5,5] (NCHW) -> split channels (1, 2) -> concat (x2, x1, x2) on the
# channels -> a window of rows and columns -> row 2 dropped by decrease_axis
# -> log_softmax over the channels -> mean.
CHANNELS = program(
    [var("x", [2, 3, 5, 5]), var("x1", [2, 1, 5, 5]), var("x2", [2, 2, 5, 5]), var("y", [2, 5, 5, 5]),
     var("z", [2, 5, 3, 4]), var("r", [2, 5, 4]), var("f", [2, 5, 4]), var("loss", [1])],
    [op("split", [("X", ["x"])], [("Out", ["x1", "x2"])], [int_("axis", 1), ints("sections", [1, -1])]),
     op("concat", [("X", ["x2", "x1", "x2"])], [("Out", ["y"])], [int_("axis", 1)]),
     op("slice", [("Input", ["y"])], [("Out", ["z"])], slice_attrs([2, -1], [1, -4], [-1, 100])),
     op("slice", [("Input", ["z"])], [("Out", ["r"])], slice_attrs([2], [1], [2], [2])),
     op("log_softmax", [("X", ["r"])], [("Out", ["f"])], [int_("axis", 1)]),
     op("mean", [("X", ["f"])], [("Out", ["loss"])])])


def channels_torch(x):
    x1, x2 = torch.split(x, [1, 2], dim=1)
    y = torch.cat([x2, x1, x2], 1)
    r = y[:, :, 1:-1, -4:][:, :, 1]
    f = torch.log_softmax(r, 1)
    return f, f.mean()


def run_kiln(tmp, text, feeds, fetch, extra):
    path = os.path.join(tmp, "p.pbtxt")
    with open(path, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "out")
    cmd = [KILN, "run", "--program", path, "--fetch", ",".join(fetch), "--out", out, "--append_backward", "loss"]
    for name, value in feeds.items():
        np.save(os.path.join(tmp, name + ".npy"), value.astype("<f4"))
        cmd += ["--feed", "%s=%s" % (name, os.path.join(tmp, name + ".npy"))]
    r = subprocess.run(cmd + extra, capture_output=True, text=True, env=dict(os.environ, FLAGS_progress="false"))
    if r.returncode != 0:
        raise AssertionError("%s failed:\n%s%s" % (" ".join(cmd + extra), r.stdout, r.stderr))
    return {n: np.load(os.path.join(out, n + ".npy")) for n in fetch}


@unittest.skipUnless(torch is not None, "python3-torch is not installed")
class ModelOpsTorchTest(unittest.TestCase):
    def check(self, text, feeds, torch_fn, grads):
        rng = np.random.RandomState(3)
        values = {n: rng.uniform(-1.5, 1.5, dims).astype(np.float32) for n, dims in feeds.items()}
        tensors = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in values.items()}
        f, loss = torch_fn(**tensors)
        loss.backward()
        want = {"loss": loss.detach().numpy().reshape(1), "f": f.detach().numpy()}
        for n in grads:
            want[n + "@GRAD"] = tensors[n].grad.numpy()
        for extra in MODES:
            with tempfile.TemporaryDirectory() as tmp:
                got = run_kiln(tmp, text, values, list(want), extra)
            for name, w in want.items():
                np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6,
                                           err_msg="%s %s" % (name, " ".join(extra) or "JIT off"))

    def test_attention(self):
        self.check(ATTENTION, {"x": (2, 5, 4), "w": (4, 9)}, attention_torch, ["x", "w"])

    def test_channels(self):
        self.check(CHANNELS, {"x": (2, 3, 5, 5)}, channels_torch, ["x"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", default=KILN)
    args, rest = parser.parse_known_args()
    KILN = os.path.abspath(args.kiln)
    unittest.main(argv=[sys.argv[0]] + rest)
