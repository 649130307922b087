"""kiln export --onnx on an imported torchvision resnet18 (issue 28, point 6):
torch.onnx.export -> kiln import -> kiln export --onnx -> onnx.checker ->
kiln import again, and the re-imported model computes what the first import
computes (1e-5 of the largest logit) and what PyTorch's eval() forward
computes (1e-4). Debian's onnx 1.12 has no reference evaluator
(onnx.reference), so the ONNX file is run through kiln's importer.

An ONNX export is an inference model: a resnet18 exported in training mode
(BatchNormalization training_mode=1, imported as batch_norm updating its
running statistics) is exported with BatchNormalization in inference form,
normalising with the running statistics, and matches PyTorch's eval().
Skipped without python3-torch, torchvision or onnx.
"""

import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

REPO = os.environ.get("KILN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KILN = os.environ.get("KILN_BINARY", os.path.join(REPO, "build", "tools", "kiln"))

try:
    import onnx
    import torch
    import torchvision
except ImportError:  # pragma: no cover
    torch = None

ROUND_TRIP = 1e-5  # of the largest |logit|: kiln's import against the import of kiln's export
VS_TORCH = 1e-4  # of the largest |logit|: against PyTorch


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, FLAGS_progress="false"))
    if r.returncode != 0:
        raise AssertionError("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@unittest.skipIf(torch is None, "python3-torch, python3-torchvision or python3-onnx is missing")
class OnnxExportResNetTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = torchvision.models.resnet18(num_classes=10)
        # Running statistics that are not BatchNorm's initial 0 and 1.
        self.model.train()
        with torch.no_grad():
            for _ in range(2):
                self.model(torch.randn(8, 3, 32, 32) * 2 + 0.5)
        self.tmp = tempfile.TemporaryDirectory()
        self.x = np.random.RandomState(3).randn(5, 3, 32, 32).astype(np.float32)
        self.x_path = self.path("x.npy")
        np.save(self.x_path, self.x)

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def logits(self, imported):
        out = self.path(os.path.basename(imported) + "_out")
        run(KILN, "run", "--program", os.path.join(imported, "program.pbtxt"), "--from", imported,
            "--feed", "input=" + self.x_path, "--fetch", "logits", "--out", out)
        return np.load(os.path.join(out, "logits.npy"))

    def torch_eval(self, imported=None):
        """PyTorch's eval() logits, from the checkpoint's values when given."""
        if imported is not None:
            state = self.model.state_dict()
            with open(os.path.join(imported, "manifest.json")) as f:
                for var in json.load(f)["vars"]:
                    state[var["name"]] = torch.from_numpy(np.load(os.path.join(imported, var["file"])))
            self.model.load_state_dict(state)
        self.model.eval()
        with torch.no_grad():
            return self.model(torch.from_numpy(self.x)).numpy()

    def export_and_reimport(self, imported):
        exported = self.path("kiln_export.onnx")
        out = run(KILN, "export", "--from", imported, "--out", exported, "--onnx")
        self.assertIn("(ONNX opset 17, ", out)
        model = onnx.load(exported)
        onnx.checker.check_model(model, full_check=True)  # with strict shape inference
        self.assertEqual(model.graph.input[0].type.tensor_type.shape.dim[0].dim_param, "batch")
        for node in model.graph.node:
            if node.op_type == "BatchNormalization":
                self.assertEqual([a.name for a in node.attribute if a.name == "training_mode"], [])
                self.assertEqual(len(node.output), 1)
        again = self.path("reimported")
        run(KILN, "import", exported, "--out", again)
        return model, again

    def test_eval_mode_export_round_trips(self):
        source = self.path("resnet18_eval.onnx")
        torch.onnx.export(self.model.eval(), torch.from_numpy(self.x), source, input_names=["input"],
                          output_names=["logits"], opset_version=14,
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
        imported = self.path("imported")
        run(KILN, "import", source, "--out", imported)
        first = self.logits(imported)
        model, again = self.export_and_reimport(imported)
        self.assertIn("Conv", {n.op_type for n in model.graph.node})
        second = self.logits(again)
        want = self.torch_eval()
        print("resnet18 (eval export): round trip %.2e, vs PyTorch %.2e" %
              (relative(second, first), relative(second, want)))
        self.assertLessEqual(relative(second, first), ROUND_TRIP)
        self.assertLess(relative(second, want), VS_TORCH)

    def test_training_mode_export_is_exported_for_inference(self):
        source = self.path("resnet18_train.onnx")
        torch.onnx.export(self.model, torch.from_numpy(self.x), source, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"], output_names=["logits"],
                          opset_version=14, dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
        imported = self.path("imported")
        run(KILN, "import", source, "--out", imported)
        model, again = self.export_and_reimport(imported)
        self.assertEqual(sum(n.op_type == "BatchNormalization" for n in model.graph.node), 20)
        second = self.logits(again)
        want = self.torch_eval(imported)
        print("resnet18 (training export, exported for inference): vs PyTorch eval() %.2e" % relative(second, want))
        self.assertLess(relative(second, want), VS_TORCH)
        # Exported once more, it computes the same.
        _, third = self.export_and_reimport(again)
        self.assertLessEqual(relative(self.logits(third), second), ROUND_TRIP)


if __name__ == "__main__":
    unittest.main()
