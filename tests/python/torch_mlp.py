"""The small MLP the optimizer tests train in kiln and, with the same initial
parameters and batches, in PyTorch: 12 -> fc0 (16, relu) -> fc1 (4), softmax
cross-entropy, STEPS batches of 8. Used by test_weight_decay and
test_grad_clip."""

import numpy as np

import kiln

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

STEPS = 20


def build(make_optimizer, seed):
    main, startup = kiln.Program(), kiln.Program()
    startup.random_seed = seed
    with kiln.program_guard(main, startup):
        x = kiln.data("x", [-1, 12])
        y = kiln.data("y", [-1, 1], dtype="int64")
        h = kiln.nn.fc(x, 16, act="relu", name="fc0")
        logits = kiln.nn.fc(h, 4, name="fc1")
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, y))
        make_optimizer().minimize(loss)
    return main, startup, loss


def batches(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return [((scale * rng.standard_normal((8, 12))).astype(np.float32), rng.integers(0, 4, (8, 1)).astype(np.int64))
            for _ in range(STEPS)]


def train_kiln(make_optimizer, use_jit, seed, data):
    """(initial parameters, final parameters, losses) by name."""
    main, startup, loss = build(make_optimizer, seed)
    scope = kiln.Scope()
    exe = kiln.Executor(use_jit=use_jit)
    exe.run(startup, scope=scope)
    names = [p.name for p in main.all_parameters()]
    init = {n: np.array(scope.get(n)) for n in names}
    losses = [float(exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss], scope=scope)[0][0]) for xs, ys in data]
    return init, {n: np.array(scope.get(n)) for n in names}, losses


def train_torch(init, make_optimizer, data, before_step=None):
    """(final parameters by kiln name, losses, steps where before_step(params)
    returned true). before_step may change the gradients in place."""
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        for i, prefix in ((0, "fc0"), (2, "fc1")):
            model[i].weight.copy_(torch.from_numpy(init[prefix + ".w"].T.copy()))
            model[i].bias.copy_(torch.from_numpy(init[prefix + ".b"]))
    opt = make_optimizer(model)
    losses, marked = [], 0
    for xs, ys in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(xs)), torch.from_numpy(ys[:, 0]))
        loss.backward()
        if before_step is not None:
            marked += bool(before_step(list(model.parameters())))
        opt.step()
        losses.append(float(loss))
    params = {}
    for i, prefix in ((0, "fc0"), (2, "fc1")):
        params[prefix + ".w"] = model[i].weight.detach().numpy().T
        params[prefix + ".b"] = model[i].bias.detach().numpy()
    return params, losses, marked
