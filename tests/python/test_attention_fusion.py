"""Attention built from the Python layers fuses with the JIT: the causal
block of examples/char_lm.py (matmul, fused_softmax_mask_upper_triangle,
matmul between reshape2/transpose2) becomes fused_attention and its grad in
kiln.dump's program, and training it with the JIT on (fused) and off
(unfused ops) gives the same losses within 1e-4."""

import math
import os
import tempfile
import unittest

import numpy as np

import kiln

S, D, H, V = 24, 32, 4, 40


def char_lm_block():
    """Two causal layers as examples/char_lm.py builds them, smaller."""
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        ids = kiln.data("ids", [-1, S, 1], dtype="int64")
        targets = kiln.data("targets", [-1, S, 1], dtype="int64")
        x = kiln.nn.embedding(ids, size=[V, D]) + kiln.create_parameter("pos", [S, D], "uniform", limit=0.02)
        for _ in range(2):
            h = kiln.nn.layer_norm(x, begin_norm_axis=2)
            q, k, v = (kiln.nn.transpose2(kiln.nn.reshape2(kiln.nn.fc(h, D, num_flatten_dims=2),
                                                           shape=[0, 0, H, D // H]), axis=[0, 2, 1, 3])
                       for _ in range(3))
            att = kiln.nn.fused_softmax_mask_upper_triangle(kiln.nn.matmul(q, k, transpose_Y=True,
                                                                           alpha=1 / math.sqrt(D // H)))
            ctx = kiln.nn.reshape2(kiln.nn.transpose2(kiln.nn.matmul(att, v), axis=[0, 2, 1, 3]), shape=[0, 0, D])
            x = x + kiln.nn.fc(ctx, D, num_flatten_dims=2)
        logits = kiln.nn.fc(kiln.nn.layer_norm(x, begin_norm_axis=2), V, num_flatten_dims=2)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, targets))
        kiln.optimizer.Adam(0.01).minimize(loss)
    return main, startup, loss


def batches(steps, batch=6):
    rng = np.random.default_rng(5)
    out = []
    for _ in range(steps):
        rows = rng.integers(0, V, (batch, S + 1))
        out.append((rows[:, :S, None].astype("int64"), rows[:, 1:, None].astype("int64")))
    return out


class AttentionFusionTest(unittest.TestCase):
    def test_dump_shows_the_fused_ops(self):
        main, _, loss = char_lm_block()
        with tempfile.TemporaryDirectory() as d:
            kiln.dump(main, d, {"ids": [6, S, 1], "targets": [6, S, 1]}, fetch_list=[loss])
            with open(os.path.join(d, "program.before.pbtxt")) as f:
                before = f.read()
            subgraphs = ""
            for c in sorted(os.listdir(d)):
                if c.startswith("cluster_"):
                    with open(os.path.join(d, c, "subgraph.txt")) as f:
                        subgraphs += f.read()
        self.assertEqual(before.count('type: "fused_softmax_mask_upper_triangle"'), 2)
        self.assertEqual(subgraphs.count("fused_attention["), 2, subgraphs)
        self.assertEqual(subgraphs.count("fused_attention_grad["), 2)
        self.assertIn("causal=true", subgraphs)
        self.assertNotIn("fused_softmax_mask_upper_triangle", subgraphs)

    def test_jit_on_and_off_train_alike(self):
        data = batches(12)
        losses = {}
        for use_jit in (False, True):
            main, startup, loss = char_lm_block()
            scope = kiln.Scope()
            exe = kiln.Executor(use_jit=use_jit)
            exe.run(startup, scope=scope)
            losses[use_jit] = [float(exe.run(main, feed={"ids": xs, "targets": ys}, fetch_list=[loss],
                                             scope=scope)[0][0]) for xs, ys in data]
        np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)
        self.assertLess(losses[True][-1], losses[True][0])


if __name__ == "__main__":
    unittest.main()
