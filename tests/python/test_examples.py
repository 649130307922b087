"""The examples under examples/, each run shortened (the full runs' figures
are in docs/python.md): they train real data with the JIT on, and what they
print shows it learned."""

import os
import re
import subprocess
import sys
import unittest

ROOT = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def run_example(name, *args):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name)] + list(args),
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise AssertionError("%s failed:\n%s%s" % (name, r.stdout, r.stderr))
    return r.stdout


def figures(output, key):
    return [float(v) for v in re.findall(key + r" ([0-9.]+)", output)]


class ExamplesTest(unittest.TestCase):
    def test_mnist_cnn(self):
        out = run_example("mnist_cnn.py", "--epochs", "1", "--max_steps", "60")
        self.assertGreater(figures(out, "test accuracy")[-1], 0.6, out)
        self.assertIn("jit: on", out)

    def test_resnet_small(self):
        out = run_example("resnet_small.py", "--epochs", "1", "--max_steps", "100")
        self.assertGreater(figures(out, "test accuracy")[-1], 0.5, out)
        self.assertIn("jit: on", out)

    def test_char_lm(self):
        out = run_example("char_lm.py", "--steps", "120", "--minutes", "2")
        # Uniform over 256 bytes is 8 bits; 120 steps learn the letter frequencies.
        self.assertLess(figures(out, "held-out bits per character")[-1], 4.5, out)


if __name__ == "__main__":
    unittest.main()
