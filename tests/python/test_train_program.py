"""kiln train --from DIR: a small PyTorch CNN on [N, 1, 8, 8] (convolution,
training-mode BatchNorm, max-pool, linear) exported to ONNX, imported with
kiln import and trained by the command line on the bundled digits (issue
28, point 4). Its test accuracy is what PyTorch's eval mode computes from
the checkpoint kiln saved (running statistics included), and the JIT off and
on train it alike. Skipped without python3-torch or onnx.

Digits rather than Fashion-MNIST: the bundled digits need nothing installed,
and the built-in cnn reads their 64 values as 1x8x8 the same way.
"""

import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import kiln

try:
    import onnx  # noqa: F401  (torch.onnx.export needs it)
    import torch
except ImportError:  # pragma: no cover
    torch = None

KILN = os.environ.get("KILN_BINARY", "")


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(128, 10))


def kiln_cli(*args):
    r = subprocess.run([KILN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError("kiln %s failed:\n%s" % (" ".join(args), r.stdout))
    return r.stdout


@unittest.skipIf(torch is None, "python3-torch or python3-onnx is missing")
@unittest.skipIf(not KILN, "KILN_BINARY is not set (ctest sets it)")
class TrainImportedCnnTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        torch.manual_seed(0)
        path = os.path.join(cls.dir, "cnn.onnx")
        torch.onnx.export(cnn(), torch.randn(32, 1, 8, 8), path, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["image"], output_names=["logits"],
                          opset_version=14, dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
        cls.imported = os.path.join(cls.dir, "imported")
        out = kiln_cli("import", path, "--out", cls.imported)
        assert "6 parameters, 2 state vars" in out, out

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, name, *flags):
        metrics = os.path.join(self.dir, name + ".json")
        kiln_cli("train", "--from", self.imported, "--dataset", "digits", "--epochs", "3", "--optimizer", "adam",
                 "--lr", "0.01", "--metrics_out", metrics, *flags)
        with open(metrics) as f:
            return json.load(f)

    def test_trains_and_evaluates_as_pytorch_eval_mode(self):
        ckpt = os.path.join(self.dir, "ckpt")
        on = self.train("on", "--use_jit", "--save_dir", ckpt)
        off = self.train("off", "--use_jit=false")
        # 0.958 measured, PyTorch eval mode on the saved values the same; the
        # final losses 2.6e-7 apart (relative). Chance is 0.1.
        self.assertGreater(on["test_accuracy"], 0.9, on)
        self.assertLess(on["final_loss"], 0.3 * on["first_loss"], on)
        self.assertAlmostEqual(on["final_loss"], off["final_loss"], delta=1e-4 * off["final_loss"])
        self.assertLessEqual(abs(on["test_accuracy"] - off["test_accuracy"]), 2 / 360)

        # The checkpoint's values in the PyTorch module: kiln's var names are
        # the initializers', so torch's state_dict keys.
        last = os.path.join(ckpt, sorted(os.listdir(ckpt))[-1])
        model = cnn()
        state = {k: torch.from_numpy(np.load(os.path.join(last, k + ".npy")))
                 for k in model.state_dict() if not k.endswith("num_batches_tracked")}
        before = np.load(os.path.join(self.imported, "1.running_mean.npy"))
        self.assertGreater(np.abs(state["1.running_mean"].numpy() - before).max(), 1e-3, "running stats not updated")
        model.load_state_dict(state, strict=False)
        model.eval()
        _, (x_test, y_test) = kiln.datasets.digits(seed=1)
        with torch.no_grad():
            pred = model(torch.from_numpy(x_test.reshape(-1, 1, 8, 8))).argmax(1).numpy()
        torch_accuracy = float((pred == y_test[:, 0]).mean())
        # kiln evaluated the same values, batch_norm on its running
        # statistics (is_test): the same predictions but for float ties.
        self.assertAlmostEqual(on["test_accuracy"], torch_accuracy, delta=1.5 / len(y_test))


if __name__ == "__main__":
    unittest.main()
