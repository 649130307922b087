"""Parity with PyTorch: the same small CNN (with batch_norm) and transformer
block built in kiln's Python API and in PyTorch, started from the same
weights, give the same losses over 20 training steps (within 1e-4 relative),
with kiln's JIT off and on. Skipped when python3-torch is not installed.

PyTorch runs at its defaults here: parity is about numbers, not speed.
"""

import unittest

import numpy as np

import kiln

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

STEPS = 20
RTOL = 1e-4


def train_kiln(build, batches, use_jit):
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        loss, feeds = build()
    scope = kiln.Scope()
    exe = kiln.Executor(use_jit=use_jit)
    exe.run(startup, scope=scope)
    params = {p.name: scope.get(p.name) for p in main.all_parameters()}
    losses = []
    for xs, ys in batches:
        out, = exe.run(main, feed={feeds[0]: xs, feeds[1]: ys}, fetch_list=[loss], scope=scope)
        losses.append(float(out[0]))
    return params, losses


def train_torch(model, optimizer, batches):
    losses = []
    for xs, ys in batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(xs)), torch.from_numpy(ys[:, 0]))
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def linear(params, prefix):
    """A torch Linear holding kiln's fc weights ([in, out] -> [out, in])."""
    w = params[prefix + ".w"]
    m = torch.nn.Linear(w.shape[0], w.shape[1])
    with torch.no_grad():
        m.weight.copy_(torch.from_numpy(w.T.copy()))
        m.bias.copy_(torch.from_numpy(params[prefix + ".b"]))
    return m


# ---- the CNN: conv-bn-relu-pool twice, then a classifier --------------------

def build_cnn():
    x = kiln.data("x", [-1, 3, 12, 12])
    y = kiln.data("y", [-1, 1], dtype="int64")
    h = kiln.nn.conv2d(x, 8, 3, padding=1, name="c0")
    h = kiln.nn.pool2d(kiln.nn.batch_norm(h, act="relu", name="bn0"), 2, pool_stride=2)
    h = kiln.nn.conv2d(h, 16, 3, padding=1, name="c1")
    h = kiln.nn.pool2d(kiln.nn.batch_norm(h, act="relu", name="bn1"), 2, pool_stride=2)
    logits = kiln.nn.fc(h, 5, name="head")
    loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, y))
    kiln.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return loss, ("x", "y")


class TorchCnn(torch.nn.Module if torch else object):
    def __init__(self, p):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.bns = torch.nn.ModuleList()
        for c in ("c0", "c1"):
            w = p[c + ".w"]
            conv = torch.nn.Conv2d(w.shape[1], w.shape[0], 3, padding=1)
            with torch.no_grad():
                conv.weight.copy_(torch.from_numpy(w))
                conv.bias.copy_(torch.from_numpy(p[c + ".b"]))
            self.convs.append(conv)
            # kiln's momentum 0.9 is PyTorch's 0.1 (running = 0.9 running + 0.1 batch).
            self.bns.append(torch.nn.BatchNorm2d(w.shape[0], eps=1e-5, momentum=0.1))
        self.head = linear(p, "head")

    def forward(self, x):
        for conv, bn in zip(self.convs, self.bns):
            x = F.max_pool2d(F.relu(bn(conv(x))), 2)
        return self.head(x.flatten(1))


# ---- the transformer block: post-LN attention and GELU FFN, mean-pooled ---

D, H, S = 16, 4, 7


def build_transformer():
    x = kiln.data("x", [-1, S, D])
    y = kiln.data("y", [-1, 1], dtype="int64")

    def heads(t):  # [B, S, D] -> [B, H, S, D/H]
        return kiln.nn.transpose2(kiln.nn.reshape2(t, shape=[0, 0, H, D // H]), axis=[0, 2, 1, 3])

    q, k, v = (heads(kiln.nn.fc(x, D, num_flatten_dims=2, name=n)) for n in ("q", "k", "v"))
    scores = kiln.nn.matmul(q, k, transpose_Y=True, alpha=1.0 / np.sqrt(D // H))
    ctx = kiln.nn.matmul(kiln.nn.softmax(scores), v)
    ctx = kiln.nn.reshape2(kiln.nn.transpose2(ctx, axis=[0, 2, 1, 3]), shape=[0, 0, D])
    h = kiln.nn.layer_norm(x + kiln.nn.fc(ctx, D, num_flatten_dims=2, name="o"), begin_norm_axis=2, name="ln1")
    f = kiln.nn.fc(kiln.nn.fc(h, 2 * D, num_flatten_dims=2, act="gelu", name="f0"), D, num_flatten_dims=2, name="f1")
    h = kiln.nn.layer_norm(h + f, begin_norm_axis=2, name="ln2")
    logits = kiln.nn.fc(kiln.nn.reduce_mean(h, dim=[1]), 5, name="head")
    loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, y))
    kiln.optimizer.Adam(0.01).minimize(loss)
    return loss, ("x", "y")


class TorchTransformer(torch.nn.Module if torch else object):
    def __init__(self, p):
        super().__init__()
        self.lin = torch.nn.ModuleDict({n: linear(p, n) for n in ("q", "k", "v", "o", "f0", "f1", "head")})
        self.ln1 = torch.nn.LayerNorm(D, eps=1e-5)
        self.ln2 = torch.nn.LayerNorm(D, eps=1e-5)

    def forward(self, x):
        b = x.shape[0]

        def heads(t):
            return t.reshape(b, S, H, D // H).transpose(1, 2)

        q, k, v = (heads(self.lin[n](x)) for n in ("q", "k", "v"))
        a = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(D // H), dim=-1) @ v
        h = self.ln1(x + self.lin["o"](a.transpose(1, 2).reshape(b, S, D)))
        h = self.ln2(h + self.lin["f1"](F.gelu(self.lin["f0"](h))))
        return self.lin["head"](h.mean(dim=1))


def batches(shape, seed):
    """Two fixed batches, alternating: the models learn them, so the loss falls."""
    rng = np.random.default_rng(seed)
    two = [(rng.standard_normal((8,) + shape).astype("float32"), rng.integers(0, 5, (8, 1)).astype("int64"))
           for _ in range(2)]
    return [two[i % 2] for i in range(STEPS)]


@unittest.skipIf(torch is None, "python3-torch is not installed")
class ParityTest(unittest.TestCase):
    def check(self, build, make_torch, optimizer, shape):
        data = batches(shape, seed=3)
        for use_jit in (False, True):
            params, kiln_losses = train_kiln(build, data, use_jit)
            model = make_torch(params)
            torch_losses = train_torch(model, optimizer(model.parameters()), data)
            np.testing.assert_allclose(kiln_losses, torch_losses, rtol=RTOL,
                                       err_msg="kiln (JIT %s) against PyTorch" % ("on" if use_jit else "off"))
            self.assertLess(kiln_losses[-1], kiln_losses[0])
            print("%s, JIT %s: max relative difference %.2e over %d steps" % (
                build.__name__, "on" if use_jit else "off",
                max(abs(a - b) / abs(b) for a, b in zip(kiln_losses, torch_losses)), STEPS))

    def test_cnn_with_batch_norm(self):
        self.check(build_cnn, TorchCnn, lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9), (3, 12, 12))

    def test_transformer(self):
        self.check(build_transformer, TorchTransformer, lambda ps: torch.optim.Adam(ps, lr=0.01, eps=1e-8), (S, D))


if __name__ == "__main__":
    unittest.main()
