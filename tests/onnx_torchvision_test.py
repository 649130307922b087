#!/usr/bin/python3
"""The ONNX importer on torchvision's models, exported by torch.onnx.export
in TrainingMode.TRAINING at 3x32x32: `kiln import` writes the program and a
checkpoint of its initial values, `kiln run --from` runs one forward step
(JIT off, and on), and it matches PyTorch's train-mode forward from the same
values (the checkpoint's .npy files, loaded into the torch module by name):
resnet18's logits and updated BatchNorm running statistics; mobilenet_v2's
features (Clip as relu6, depthwise convolutions), and its training-mode
Dropout keeps each feature scaled by 1/(1-p) or zeroes it. Runs when
Debian's python3-torch and python3-torchvision are installed (skipped
otherwise).

    /usr/bin/python3 tests/onnx_torchvision_test.py --kiln build/tools/kiln
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


def export(name, path, batch):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    x = torch.randn(batch, 3, 32, 32)
    torch.onnx.export(model, x, path, training=torch.onnx.TrainingMode.TRAINING, input_names=["input"],
                      output_names=["logits"], opset_version=14, do_constant_folding=False)
    return model


def load_checkpoint(model, imported, test):
    """The same starting values in PyTorch: every checkpoint var but dropout
    seeds is a parameter or buffer of the module under its own name."""
    state = model.state_dict()
    with open(os.path.join(imported, "manifest.json")) as f:
        manifest = json.load(f)
    for var in manifest["vars"]:
        if var["name"].endswith(".seed"):
            continue
        test.assertIn(var["name"], state)
        state[var["name"]] = torch.from_numpy(np.load(os.path.join(imported, var["file"])))
    model.load_state_dict(state)


@unittest.skipUnless(torch is not None, "python3-torch or python3-torchvision is not installed")
class OnnxTorchvisionTest(unittest.TestCase):
    def test_forward_matches_pytorch(self):
        batch = 4
        with tempfile.TemporaryDirectory() as tmp:
            onnx_path = os.path.join(tmp, "resnet18.onnx")
            model = export("resnet18", onnx_path, batch)
            imported = os.path.join(tmp, "imported")
            out = run(KILN, "import", onnx_path, "--out", imported)
            self.assertIn("62 parameters, 40 state vars; feeds input, fetches logits", out)
            with open(os.path.join(imported, "model.json")) as f:
                info = json.load(f)
            self.assertEqual(info["inputs"][0]["shape"], [batch, 3, 32, 32])

            load_checkpoint(model, imported, self)
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

    def test_mobilenet_v2_features_and_dropout(self):
        # Batch 16: the last BatchNorms normalise 1x1 maps over the batch
        # alone, where rounding differences grow with fewer samples.
        batch = 16
        with tempfile.TemporaryDirectory() as tmp:
            onnx_path = os.path.join(tmp, "mobilenet_v2.onnx")
            model = export("mobilenet_v2", onnx_path, batch)
            imported = os.path.join(tmp, "imported")
            out = run(KILN, "import", onnx_path, "--out", imported)
            self.assertIn("158 parameters, 105 state vars", out)  # 52 BatchNorms' statistics and a dropout seed
            load_checkpoint(model, imported, self)
            x = np.random.RandomState(8).randn(batch, 3, 32, 32).astype(np.float32)
            np.save(os.path.join(tmp, "x.npy"), x)
            features = {}
            model.classifier.register_forward_hook(lambda m, inputs, out: features.setdefault("f", inputs[0].numpy()))
            model.train()
            with torch.no_grad():
                model(torch.from_numpy(x))
            want = features["f"]
            flat, dropped = "Flatten_output_0", "classifier_classifier.0_Dropout_output_0"
            for mode in ([], ["--use_jit"]):
                got_dir = os.path.join(tmp, "out%d" % len(mode))
                run(KILN, "run", "--program", os.path.join(imported, "program.pbtxt"), "--from", imported,
                    "--feed", "input=" + os.path.join(tmp, "x.npy"), "--fetch", flat + "," + dropped,
                    "--out", got_dir, *mode)
                got = np.load(os.path.join(got_dir, flat + ".npy"))
                err = np.abs(got - want).max() / np.abs(want).max()
                print("mobilenet_v2 features %s: max |kiln - torch| / max |torch| = %.2e" % (mode or "JIT off", err))
                self.assertLess(err, TOLERANCE)
                d = np.load(os.path.join(got_dir, dropped + ".npy"))
                kept = d != 0
                np.testing.assert_allclose(d[kept], got[kept] / 0.8, rtol=1e-6)
                dropped_share = 1 - kept[got != 0].mean()  # of the features that are not 0 (relu6)
                self.assertTrue(0.15 < dropped_share < 0.25, dropped_share)  # p = 0.2


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default=KILN)
    a, rest = p.parse_known_args()
    KILN = a.kiln
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
