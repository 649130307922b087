#!/usr/bin/python3
"""The ONNX importer on torchvision's resnet18, exported by torch.onnx.export
in TrainingMode.TRAINING at 3x32x32: `kiln import` writes the program and a
checkpoint of its initial values, `kiln run --from` runs one forward step
(JIT off, and on), and the logits and the updated BatchNorm running
statistics match PyTorch's train-mode forward from the same values (the
checkpoint's .npy files, loaded into the torch module by name). Runs when
Debian's python3-torch and python3-torchvision are installed (skipped
otherwise).

    /usr/bin/python3 tests/onnx_resnet18_test.py --kiln build/tools/kiln
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.path.join(REPO, "build", "tools", "kiln")

try:
    import torch
    import torchvision
except ImportError:
    torch = None

TOLERANCE = 1e-4  # of the largest |logit|, and of the largest |running stat|


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, FLAGS_progress="false"))
    if r.returncode != 0:
        raise AssertionError("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def export_resnet18(path, batch):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(batch, 3, 32, 32)
    torch.onnx.export(model, x, path, training=torch.onnx.TrainingMode.TRAINING, input_names=["input"],
                      output_names=["logits"], opset_version=14, do_constant_folding=False)
    return model


@unittest.skipUnless(torch is not None, "python3-torch or python3-torchvision is not installed")
class OnnxResnet18Test(unittest.TestCase):
    def test_forward_matches_pytorch(self):
        batch = 4
        with tempfile.TemporaryDirectory() as tmp:
            onnx_path = os.path.join(tmp, "resnet18.onnx")
            model = export_resnet18(onnx_path, batch)
            imported = os.path.join(tmp, "imported")
            out = run(KILN, "import", onnx_path, "--out", imported)
            self.assertIn("62 parameters, 40 state vars; feeds input, fetches logits", out)
            with open(os.path.join(imported, "model.json")) as f:
                info = json.load(f)
            self.assertEqual(info["inputs"][0]["shape"], [batch, 3, 32, 32])

            # The same starting values in PyTorch: every checkpoint var is a
            # parameter or buffer of the module under its own name.
            state = model.state_dict()
            with open(os.path.join(imported, "manifest.json")) as f:
                manifest = json.load(f)
            for var in manifest["vars"]:
                self.assertIn(var["name"], state)
                state[var["name"]] = torch.from_numpy(np.load(os.path.join(imported, var["file"])))
            model.load_state_dict(state)
            x = np.random.RandomState(7).randn(batch, 3, 32, 32).astype(np.float32)
            np.save(os.path.join(tmp, "x.npy"), x)
            model.train()
            with torch.no_grad():
                want = model(torch.from_numpy(x)).numpy()
            stats = ["bn1.running_mean", "layer4.1.bn2.running_var"]
            want_stats = [model.state_dict()[s].numpy() for s in stats]

            for mode in ([], ["--use_jit"]):
                got_dir = os.path.join(tmp, "out%d" % len(mode))
                run(KILN, "run", "--program", os.path.join(imported, "program.pbtxt"), "--from", imported,
                    "--feed", "input=" + os.path.join(tmp, "x.npy"), "--fetch", "logits," + ",".join(stats),
                    "--out", got_dir, *mode)
                got = np.load(os.path.join(got_dir, "logits.npy"))
                err = np.abs(got - want).max() / np.abs(want).max()
                print("resnet18 forward %s: max |kiln - torch| / max |torch| = %.2e" % (mode or "JIT off", err))
                self.assertLess(err, TOLERANCE)
                for name, w in zip(stats, want_stats):
                    g = np.load(os.path.join(got_dir, name + ".npy"))
                    self.assertLess(np.abs(g - w).max() / np.abs(w).max(), TOLERANCE, name)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default=KILN)
    a, rest = p.parse_known_args()
    KILN = a.kiln
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
