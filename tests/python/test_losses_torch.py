"""Losses users build from kiln's ops (binary cross-entropy, focal loss,
cosine similarity) and the public autodiff entries (kiln.gradients,
kiln.append_backward) against PyTorch autograd: values and gradients within
1e-5, with the JIT off and on. Skipped when python3-torch is not installed.
"""

import unittest

import numpy as np

import kiln

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

RTOL, ATOL = 1e-5, 1e-6


def run(build, feed, use_jit):
    """Builds a program with `build()` -> fetch list, runs it once."""
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        fetch = build()
    scope = kiln.Scope()
    exe = kiln.Executor(use_jit=use_jit)
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def torch_grads(fn, *arrays):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


@unittest.skipIf(torch is None, "python3-torch is not installed")
class LossesTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(7)
        self.logits = (3 * rng.standard_normal((13, 5))).astype("float32")
        self.targets = (rng.random((13, 5)) > 0.6).astype("float32")
        self.a = rng.standard_normal((11, 7)).astype("float32")
        self.b = rng.standard_normal((11, 7)).astype("float32")

    def check(self, build, feed, want):
        for jit in (False, True):
            got = run(build, feed, jit)
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.asarray(g, np.float64).reshape(np.shape(w)), w, rtol=RTOL, atol=ATOL,
                                           err_msg="jit=%s" % jit)

    def test_binary_cross_entropy(self):
        def build():
            x = kiln.data("x", [-1, 5])
            y = kiln.data("y", [-1, 5])
            loss = kiln.nn.mean(kiln.nn.sigmoid_cross_entropy_with_logits(x, y))
            return [loss] + kiln.gradients(loss, [x])

        want = torch_grads(lambda x, y: F.binary_cross_entropy_with_logits(x, y), self.logits, self.targets)[:2]
        self.check(build, {"x": self.logits, "y": self.targets}, want)

    def test_binary_cross_entropy_from_log_and_sigmoid(self):
        def build():
            x = kiln.data("x", [-1, 5])
            y = kiln.data("y", [-1, 5])
            p = kiln.nn.sigmoid(x)
            ll = y * kiln.nn.log(p) + (1.0 - y) * kiln.nn.log(1.0 - p)
            loss = -kiln.nn.reduce_mean(ll)
            return [loss] + kiln.gradients(loss, [x])

        x = np.clip(self.logits, -4, 4)  # where 1 - sigmoid(x) keeps its digits in float32
        want = torch_grads(lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), y), x, self.targets)[:2]
        self.check(build, {"x": x, "y": self.targets}, want)

    def test_focal_loss(self):
        gamma, alpha = 2.0, 0.25

        def build():
            x = kiln.data("x", [-1, 5])
            y = kiln.data("y", [-1, 5])
            p = kiln.nn.sigmoid(x)
            ce = kiln.nn.sigmoid_cross_entropy_with_logits(x, y)
            p_t = p * y + (1.0 - p) * (1.0 - y)
            alpha_t = y * alpha + (1.0 - y) * (1 - alpha)
            loss = kiln.nn.reduce_mean(alpha_t * (1.0 - p_t) ** gamma * ce)
            return [loss] + kiln.gradients(loss, [x])

        def focal(x, y):  # torchvision.ops.sigmoid_focal_loss, mean
            p = torch.sigmoid(x)
            ce = F.binary_cross_entropy_with_logits(x, y, reduction="none")
            p_t = p * y + (1 - p) * (1 - y)
            return ((alpha * y + (1 - alpha) * (1 - y)) * (1 - p_t) ** gamma * ce).mean()

        want = torch_grads(focal, self.logits, self.targets)[:2]
        self.check(build, {"x": self.logits, "y": self.targets}, want)

    def test_cosine_similarity(self):
        def build():
            a = kiln.data("a", [-1, 7])
            b = kiln.data("b", [-1, 7])
            dot = kiln.nn.reduce_sum(a * b, dim=1)
            norms = kiln.nn.reduce_sum(a * a, dim=1) * kiln.nn.reduce_sum(b * b, dim=1)
            cos = dot * kiln.nn.rsqrt(norms)
            loss = kiln.nn.reduce_mean(1.0 - cos)
            return [cos, loss] + kiln.gradients(loss, [a, b])

        cos = F.cosine_similarity(torch.from_numpy(self.a).double(), torch.from_numpy(self.b).double()).numpy()
        want = torch_grads(lambda a, b: (1 - F.cosine_similarity(a, b)).mean(), self.a, self.b)
        self.check(build, {"a": self.a, "b": self.b}, [cos] + want)


@unittest.skipIf(torch is None, "python3-torch is not installed")
class AutodiffTest(unittest.TestCase):
    def test_gradients_of_an_expression_of_the_new_ops(self):
        rng = np.random.default_rng(11)
        xs = rng.standard_normal((6, 4)).astype("float32")
        ws = (rng.random((4, 4)) + 0.5).astype("float32")
        idx = np.array([4, 0, 4, 2], "int64")

        def build():
            x = kiln.data("x", [6, 4])
            w = kiln.data("w", [4, 4])
            i = kiln.data("idx", [4], dtype=np.int64)
            h = kiln.nn.softplus(x) + kiln.nn.leaky_relu(x, alpha=0.1) * kiln.nn.abs(x)
            g = kiln.nn.gather(h, i) @ kiln.nn.sqrt(w)
            picked = kiln.nn.where(g > 1.0, kiln.nn.log(g), g ** 3)
            # Y broadcasts into X: the [6] row maxima first, the [1] sum second.
            y = kiln.nn.reduce_max(kiln.nn.pow(kiln.nn.exp(x), 0.5), dim=1) + kiln.nn.reduce_sum(picked) / 6.0
            y = kiln.nn.reduce_sum(y)
            return [y] + kiln.gradients(y, [x, w])

        def fn(x, w):
            h = F.softplus(x) + F.leaky_relu(x, 0.1) * x.abs()
            g = h[torch.from_numpy(idx)] @ w.sqrt()
            picked = torch.where(g > 1.0, g.log(), g ** 3)
            return picked.sum() + torch.exp(x).pow(0.5).amax(dim=1).sum()

        want = torch_grads(fn, xs, ws)
        for jit in (False, True):
            got = run(build, {"x": xs, "w": ws, "idx": idx}, jit)
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.reshape(g, np.shape(w)), w, rtol=1e-5, atol=1e-5,
                                           err_msg="jit=%s" % jit)

    def test_append_backward_matches_torch_and_a_second_pass_keeps_the_first(self):
        rng = np.random.default_rng(5)
        xs = rng.standard_normal((8, 3)).astype("float32")
        ys = rng.standard_normal((8, 1)).astype("float32")
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 3])
            y = kiln.data("y", [-1, 1])
            pred = kiln.nn.fc(x, 1, act="tanh")
            loss = kiln.nn.reduce_mean((pred - y) ** 2)
            pairs = kiln.append_backward(loss)
            loss2 = kiln.nn.reduce_sum(kiln.nn.abs(pred))
            pairs2 = kiln.append_backward(loss2)
            with self.assertRaises(kiln.Error):
                kiln.append_backward(pred)  # not one element
        self.assertEqual([p.name for p, _ in pairs], [p.name for p, _ in pairs2])
        self.assertNotEqual([g.name for _, g in pairs], [g.name for _, g in pairs2])
        scope = kiln.Scope()
        exe = kiln.Executor()
        exe.run(startup, scope=scope)
        w, b = scope.get(pairs[0][0].name), scope.get(pairs[1][0].name)
        got = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[g for _, g in pairs + pairs2], scope=scope)
        _, gw, gb = torch_grads(lambda w, b: ((torch.tanh(torch.from_numpy(xs).double() @ w + b)
                                               - torch.from_numpy(ys).double()) ** 2).mean(), w, b)
        _, gw2, gb2 = torch_grads(lambda w, b: torch.tanh(torch.from_numpy(xs).double() @ w + b).abs().sum(), w, b)
        for g, want in zip(got, [gw, gb, gw2, gb2]):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


class TargetGradientsTest(unittest.TestCase):
    """Needs no PyTorch."""

    def test_target_gradients_weight_each_target(self):
        def build():
            x = kiln.data("x", [3, 2])
            x.stop_gradient = False
            t1 = x * x
            t2 = kiln.nn.exp(x)
            g1 = kiln.data("g1", [3, 2])
            g2 = kiln.data("g2", [3, 2])
            return kiln.gradients([t1, t2], [x], target_gradients=[g1, g2])

        rng = np.random.default_rng(2)
        xs, g1, g2 = (rng.standard_normal((3, 2)).astype("float32") for _ in range(3))
        got, = run(build, {"x": xs, "g1": g1, "g2": g2}, False)
        np.testing.assert_allclose(got, 2 * xs * g1 + np.exp(xs) * g2, rtol=1e-6)


if __name__ == "__main__":
    unittest.main(verbosity=2)
