"""docs/python.md's and docs/onnx.md's training scripts, run as they stand
from the pages, in a fresh directory: the scripts users copy keep working.
The marker line above a code block gives the check (`test accuracy >= 0.9`)."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def doc_scripts(path):
    text = open(path).read()
    pattern = r"<!-- python-doc-test: (.*?) -->\n```python\n(.*?)```"
    return re.findall(pattern, text, re.S)


class DocsTest(unittest.TestCase):
    def test_python_md_training_script(self):
        scripts = doc_scripts(os.path.join(ROOT, "docs", "python.md"))
        self.assertEqual(len(scripts), 2)
        self.run_script(*scripts[0])

    def test_python_md_training_recipe(self):
        """The recipe: warm-up + cosine, AdamW, global-norm clipping and the
        loader, on Fashion-MNIST (skipped without Debian's dataset)."""
        if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
            self.skipTest("dataset-fashion-mnist is not installed")
        scripts = doc_scripts(os.path.join(ROOT, "docs", "python.md"))
        self.assertEqual(len(scripts), 2)
        check, code = scripts[1]
        for part in ("LinearWarmup", "CosineAnnealingDecay", "AdamW", "ClipGradByGlobalNorm", "kiln.io.DataLoader"):
            self.assertIn(part, code)
        self.assertLessEqual(len(code.splitlines()), 45)
        self.run_script(check, code, made=())

    def test_onnx_md_training_script(self):
        try:
            import torchvision  # noqa: F401
        except ImportError:
            self.skipTest("python3-torchvision is not installed")
        scripts = doc_scripts(os.path.join(ROOT, "docs", "onnx.md"))
        self.assertEqual(len(scripts), 1)
        self.run_script(*scripts[0], made=())

    def run_script(self, check, code, made=("checkpoint/manifest.json", "model/model.pbtxt", "dump/index.md")):
        self.assertGreater(len(code.splitlines()), 20)
        key, op, bound = re.match(r"(.+?) (>=|<=) ([0-9.]+)", check).groups()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "train.py")
            with open(path, "w") as f:
                f.write(code)
            r = subprocess.run([sys.executable, path], cwd=d, capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            values = [float(v) for v in re.findall(re.escape(key) + r" ([0-9.]+)", r.stdout)]
            self.assertTrue(values, r.stdout)
            if op == ">=":
                self.assertGreaterEqual(values[-1], float(bound), r.stdout)
            else:
                self.assertLessEqual(values[-1], float(bound), r.stdout)
            for path in made:
                self.assertTrue(os.path.exists(os.path.join(d, path)), path)


if __name__ == "__main__":
    unittest.main()
