"""Transformers exported from PyTorch at opset 14 and trained in kiln
(issue 28, points 2 and 4): nn.TransformerEncoder (batch_first, GELU, a
causal mask) with an embedding and a linear head, and a GPT block in plain
PyTorch ops (LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div, Erf GELU,
masked_fill as Where, Split, the embedding as Gather). Both start from the
exported weights; 20 steps of SGD and of Adam give PyTorch's losses within
1e-4 relative, JIT off and on. kiln.onnx.load runs decomposition_fusion_pass
(issue 28, point 3): the decomposed LayerNorms and erf GELUs train as
layer_norm and gelu with their own grad ops, and the causal attention as
attention_fusion_pass's pattern (fused_attention with the JIT). Skipped without python3-torch
or onnx.
"""

import copy
import math
import os
import tempfile
import unittest

import numpy as np

import kiln

try:
    import onnx  # noqa: F401  (torch.onnx.export needs it)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

VOCAB, D, HEADS, LAYERS, T, BATCH = 50, 32, 4, 2, 16, 4
STEPS = 20
RTOL = 1e-4

if torch is not None:
    class EncoderLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D)
            layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.0, activation="gelu", batch_first=True)
            self.enc = nn.TransformerEncoder(layer, LAYERS)
            self.head = nn.Linear(D, VOCAB)
            self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids), mask=self.mask))

    class GPTBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc1, self.fc2, self.head = nn.Linear(D, 4 * D), nn.Linear(4 * D, D), nn.Linear(D, VOCAB)
            self.g1, self.b1 = nn.Parameter(torch.ones(D)), nn.Parameter(torch.zeros(D))
            self.g2, self.b2 = nn.Parameter(torch.ones(D)), nn.Parameter(torch.zeros(D))
            self.register_buffer("tril", torch.tril(torch.ones(T, T)))

        @staticmethod
        def layer_norm(x, g, b):
            m = x.mean(-1, keepdim=True)
            v = (x - m).pow(2).mean(-1, keepdim=True)
            return (x - m) / torch.sqrt(v + 1e-5) * g + b

        @staticmethod
        def gelu(x):
            return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))

        def forward(self, ids):
            b, t = ids.shape
            x = self.emb(ids)
            q, k, v = self.qkv(self.layer_norm(x, self.g1, self.b1)).split(D, dim=-1)
            q, k, v = (z.reshape(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
            a = q.matmul(k.transpose(-2, -1)) / math.sqrt(D // HEADS)
            a = a.masked_fill(self.tril[:t, :t] == 0, float("-inf")).softmax(-1)
            x = x + self.proj(a.matmul(v).transpose(1, 2).reshape(b, t, D))
            return self.head(x + self.fc2(self.gelu(self.fc1(self.layer_norm(x, self.g2, self.b2)))))


@unittest.skipIf(torch is None, "python3-torch or python3-onnx is missing")
class TransformerFromPyTorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(0)
        # Each label is the token after its id: a rule the models can learn.
        ids = [rng.integers(0, VOCAB, (BATCH, T)) for _ in range(STEPS)]
        cls.batches = [(i, ((i + 1) % VOCAB).reshape(BATCH * T, 1)) for i in ids]

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def export(self, cls):
        torch.manual_seed(0)
        model = cls()
        path = os.path.join(self.dir.name, cls.__name__ + ".onnx")
        torch.onnx.export(model, (torch.from_numpy(self.batches[0][0]),), path, opset_version=14,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["ids"], output_names=["logits"])
        return path, copy.deepcopy(model.state_dict())

    def torch_losses(self, cls, state, make_optimizer):
        model = cls()
        model.load_state_dict(state)
        model.train()
        opt = make_optimizer(model.parameters())
        losses = []
        for ids, label in self.batches:
            opt.zero_grad()
            loss = F.cross_entropy(model(torch.from_numpy(ids)).reshape(-1, VOCAB), torch.from_numpy(label[:, 0]))
            loss.backward()
            opt.step()
            losses.append(float(loss))
        return losses

    def kiln_losses(self, path, optimizer, jit, trainable):
        main, startup, inputs, outputs = kiln.onnx.load(path, trainable=trainable)
        with kiln.program_guard(main, startup):
            label = kiln.data("label", [BATCH * T, 1], dtype=np.int64)
            logits = kiln.nn.reshape(outputs[0], [BATCH * T, VOCAB])
            loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, label))
            optimizer.minimize(loss)
        scope = kiln.Scope()
        exe = kiln.Executor(use_jit=jit)
        exe.run(startup, scope=scope)
        return [float(exe.run(main, feed={inputs[0].name: ids, "label": lab}, fetch_list=[loss], scope=scope)[0][0])
                for ids, lab in self.batches]

    def check(self, cls):
        path, state = self.export(cls)
        trainable = [n for n, _ in cls().named_parameters()]  # the buffers stay as exported
        cases = [("sgd", lambda: kiln.optimizer.SGD(0.1), lambda p: torch.optim.SGD(p, 0.1)),
                 ("adam", lambda: kiln.optimizer.Adam(0.001), lambda p: torch.optim.Adam(p, 0.001))]
        for name, make_kiln, make_torch in cases:
            want = self.torch_losses(cls, state, make_torch)
            self.assertLess(want[-1], want[0], "%s: PyTorch's loss should fall" % name)
            for jit in (False, True):
                got = self.kiln_losses(path, make_kiln(), jit, trainable)
                np.testing.assert_allclose(got, want, rtol=RTOL, err_msg="%s %s, jit=%s" % (cls.__name__, name, jit))

    def test_transformer_encoder_lm_trains_as_in_pytorch(self):
        self.check(EncoderLM)

    def test_gpt_block_in_plain_ops_trains_as_in_pytorch(self):
        self.check(GPTBlock)

    def op_types(self, cls, fuse):
        path, _ = self.export(cls)
        trainable = [n for n, _ in cls().named_parameters()]
        main = kiln.onnx.load(path, trainable=trainable, fuse=fuse)[0]
        return [op["type"] for op in main.ops]

    # The exporter's decompositions come back as kiln's ops; fuse=False keeps
    # the program node for node. The attention's scores become one matmul
    # (keys transposed by it, the 1/sqrt(d) in its alpha) and its causal mask
    # (GPTBlock: where(tril == 0, -inf, s); EncoderLM: + a -inf triu buffer)
    # the causal softmax, which attention_fusion_pass fuses with the JIT.
    def test_import_fuses_the_decompositions(self):
        for cls, norms, gelus, attns in ((GPTBlock, 2, 1, 1), (EncoderLM, 2 * LAYERS, LAYERS, LAYERS)):
            fused = self.op_types(cls, True)
            self.assertEqual(fused.count("layer_norm"), norms, cls.__name__)
            self.assertEqual(fused.count("gelu"), gelus, cls.__name__)
            self.assertEqual(fused.count("fused_softmax_mask_upper_triangle"), attns, cls.__name__)
            for gone in ("reduce_mean", "pow", "sqrt", "erf", "softmax", "where", "equal", "expand_v2"):
                self.assertNotIn(gone, fused, cls.__name__)
            plain = self.op_types(cls, False)
            for absent in ("layer_norm", "gelu", "fused_softmax_mask_upper_triangle"):
                self.assertNotIn(absent, plain)
            self.assertEqual(plain.count("erf"), gelus)
            self.assertEqual(plain.count("softmax"), attns)

    # ONNX does not tell a buffer from a parameter. Without `trainable`, the
    # causal mask (it holds -inf) is frozen, not trained: an optimizer step
    # on it would change which positions attend.
    def test_an_initializer_holding_inf_is_frozen_and_trainable_names_the_parameters(self):
        path, _ = self.export(EncoderLM)
        want = sorted(n for n, _ in EncoderLM().named_parameters())
        main = kiln.onnx.load(path)[0]
        self.assertEqual(sorted(p.name for p in main.all_parameters()), want)
        main = kiln.onnx.load(path, trainable=["head.weight"])[0]
        self.assertEqual([p.name for p in main.all_parameters()], ["head.weight"])
        with self.assertRaises(kiln.Error) as e:
            kiln.onnx.load(path, trainable=["head.weight", "head.wieght"])
        self.assertIn("trainable names 'head.wieght', which is not a float initializer of the model; "
                      "did you mean 'head.weight'?", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
