"""Issue 32: a causal LM trained over cycling sequence lengths, as bucketed
text batches give them. With the JIT on (--jit_dynamic auto, both launch
modes) its losses are those of the JIT off to 1e-4 relative, and each
cluster compiles at most twice: once for the first length, once for every
length. Run by ctest (python_dynamic_shapes) with PYTHONPATH=build/python."""

import math
import unittest

import numpy as np

import kiln

LENGTHS = [8, 12, 16, 5, 9, 20, 8, 13]
D, H, VOCAB, BATCH = 32, 2, 32, 3


def causal_lm():
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        ids = kiln.data("ids", [-1, -1, 1], dtype="int64")
        pos = kiln.data("pos", [-1, -1, 1], dtype="int64")
        targets = kiln.data("targets", [-1, -1, 1], dtype="int64")
        x = kiln.nn.embedding(ids, size=[VOCAB, D]) + kiln.nn.embedding(pos, size=[32, D])
        h = kiln.nn.layer_norm(x, begin_norm_axis=2)
        q, k, v = (kiln.nn.transpose2(kiln.nn.reshape2(kiln.nn.fc(h, D, num_flatten_dims=2), shape=[0, 0, H, D // H]),
                                      axis=[0, 2, 1, 3]) for _ in range(3))
        att = kiln.nn.fused_softmax_mask_upper_triangle(
            kiln.nn.matmul(q, k, transpose_Y=True, alpha=1 / math.sqrt(D // H)))
        ctx = kiln.nn.reshape2(kiln.nn.transpose2(kiln.nn.matmul(att, v), axis=[0, 2, 1, 3]), shape=[0, 0, D])
        x = x + kiln.nn.fc(ctx, D, num_flatten_dims=2)
        h = kiln.nn.fc(kiln.nn.fc(kiln.nn.layer_norm(x, begin_norm_axis=2), 2 * D, num_flatten_dims=2, act="gelu"),
                       D, num_flatten_dims=2)
        logits = kiln.nn.fc(kiln.nn.layer_norm(x + h, begin_norm_axis=2), VOCAB, num_flatten_dims=2)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, targets))
        kiln.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return main, startup, loss


def batches():
    rng = np.random.default_rng(3)
    for s in LENGTHS:
        tokens = rng.integers(0, VOCAB, size=(BATCH, s + 1, 1)).astype("int64")
        pos = np.broadcast_to(np.arange(s, dtype="int64")[None, :, None], (BATCH, s, 1)).copy()
        yield {"ids": tokens[:, :s].copy(), "pos": pos, "targets": tokens[:, 1:].copy()}


def train(use_jit):
    with kiln.unique_name.guard():
        main, startup, loss = causal_lm()
    scope = kiln.Scope()
    exe = kiln.Executor(use_jit=use_jit)
    exe.run(startup, scope=scope)
    return [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]) for feed in batches()]


class CyclingLengthsTest(unittest.TestCase):
    def setUp(self):
        self.saved = kiln.get_flags(["jit_launch_mode", "jit_dynamic", "seed"])

    def tearDown(self):
        kiln.set_flags(self.saved)

    def check(self, mode):
        kiln.set_flags({"jit_launch_mode": mode, "jit_dynamic": "auto", "seed": 5})
        off = train(False)
        before = kiln.jit_stats()
        on = train(True)
        after = kiln.jit_stats()
        for step, (a, b) in enumerate(zip(on, off)):
            self.assertLess(abs(a - b), 1e-4 * abs(b) + 1e-6, "step %d (S=%d): JIT %r, off %r" % (
                step, LENGTHS[step], a, b))
        compiles = {k: n - before["compiles_per_cluster"].get(k, 0) for k, n in after["compiles_per_cluster"].items()}
        compiles = {k: n for k, n in compiles.items() if n > 0}
        self.assertTrue(compiles, "the JIT compiled nothing")
        self.assertEqual(after["fallback_calls"] - before["fallback_calls"], 0)
        # Once for the first length, once for every length; the other
        # lengths are instances of that object.
        self.assertLessEqual(max(compiles.values()), 2, compiles)
        self.assertGreater(after["instances"] - before["instances"], 0)
        self.assertEqual(after["guard_failures"] - before["guard_failures"], 0)

    def test_runtime_launch_mode(self):
        self.check("runtime")

    def test_executor_launch_mode(self):
        self.check("executor")


if __name__ == "__main__":
    unittest.main()
