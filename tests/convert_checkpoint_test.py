#!/usr/bin/python3
"""tools/convert_checkpoint.py: a trained kiln MLP and CNN, converted to a
PyTorch state_dict, give PyTorch the same probabilities as `kiln predict`;
a changed state_dict converted back gives kiln PyTorch's probabilities.
Runs when Debian's python3-torch is installed (skipped otherwise).

    /usr/bin/python3 tests/convert_checkpoint_test.py --kiln build/tools/kiln
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
sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
KILN = os.path.join(REPO, "build", "tools", "kiln")

try:
    import torch
except ImportError:
    torch = None


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, FLAGS_progress="false"))
    if r.returncode != 0:
        raise AssertionError("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))


@unittest.skipUnless(torch is not None, "python3-torch is not installed")
class ConvertCheckpointTest(unittest.TestCase):
    def predict_kiln(self, tmp, ckpt, x, tag):
        run(KILN, "export", "--from", ckpt, "--out", os.path.join(tmp, "model_" + tag))
        np.save(os.path.join(tmp, "x.npy"), x)
        run(KILN, "predict", "--model", os.path.join(tmp, "model_" + tag), "--feed", "features=" + os.path.join(tmp, "x.npy"),
            "--out", os.path.join(tmp, "pred_" + tag))
        return np.load(os.path.join(tmp, "pred_" + tag, "softmax_with_cross_entropy_0.Softmax.npy"))

    def torch_model(self, ckpt):
        import bench_vs_pytorch
        with open(os.path.join(ckpt, "model.json")) as f:
            info = json.load(f)
        classes = bench_vs_pytorch.torch_models(torch)
        if info["model"] == "mlp":
            hidden = [np.load(os.path.join(ckpt, "fc%d.w.npy" % i)).shape[1] for i in range(len(info["params"]) // 2 - 1)]
            return classes["mlp"](input=info["sample_dims"][0], hidden=hidden)
        return classes["cnn"](side=info["sample_dims"][-1])

    def check(self, model, shape):
        with tempfile.TemporaryDirectory() as tmp:
            save = os.path.join(tmp, "ckpt")
            run(KILN, "train", "--model", model, "--dataset", "digits", "--epochs", "2", "--save_dir", save)
            ckpt = os.path.join(save, sorted(os.listdir(save))[-1])
            x = np.random.RandomState(3).rand(*shape).astype(np.float32)
            kiln_probs = self.predict_kiln(tmp, ckpt, x, "a")
            pt = os.path.join(tmp, "w.pt")
            run(sys.executable, os.path.join(REPO, "tools", "convert_checkpoint.py"), "to-torch", ckpt, pt)
            net = self.torch_model(ckpt)
            net.load_state_dict(torch.load(pt))
            with torch.no_grad():
                torch_probs = torch.softmax(net(torch.from_numpy(x)), dim=-1).numpy()
            np.testing.assert_allclose(torch_probs, kiln_probs, atol=1e-5, rtol=1e-4)
            # Back: PyTorch's weights, changed, into a kiln checkpoint.
            state = {k: v * 0.5 for k, v in torch.load(pt).items()}
            torch.save(state, pt)
            back = os.path.join(tmp, "back")
            run(sys.executable, os.path.join(REPO, "tools", "convert_checkpoint.py"), "to-kiln", pt, "--like", ckpt,
                "--out", back)
            net.load_state_dict(state)
            with torch.no_grad():
                torch_probs = torch.softmax(net(torch.from_numpy(x)), dim=-1).numpy()
            np.testing.assert_allclose(self.predict_kiln(tmp, back, x, "b"), torch_probs, atol=1e-5, rtol=1e-4)

    def test_mlp(self):
        self.check("mlp", (7, 64))

    def test_cnn(self):
        self.check("cnn", (7, 1, 8, 8))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default=KILN)
    args, rest = p.parse_known_args()
    KILN = os.path.abspath(args.kiln)
    unittest.main(argv=[sys.argv[0]] + rest)
