"""The PyTorch side of tools/bench/bench_vs_pytorch.py: the three models exactly as
framework/models/models.cc builds them, and the worker that times their training step in its own
process (bench_vs_pytorch.py runs itself with --worker, which calls torch_worker). scaling.py
runs the same worker; tests/convert_checkpoint_test.py reads the models' parameter names."""

import json
import math
import resource
import time


def torch_models(torch):
    """The three models exactly as framework/models/models.cc builds them."""
    nn = torch.nn
    F = torch.nn.functional

    class Mlp(nn.Module):  # fc-relu per hidden layer, then fc to the classes
        def __init__(self, input, hidden, classes=10):
            super().__init__()
            sizes = [input] + list(hidden)
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
            self.out = nn.Linear(sizes[-1], classes)

        def forward(self, x):
            for fc in self.hidden:
                x = F.relu(fc(x))
            return self.out(x)

    class Cnn(nn.Module):  # conv6@5x5 pad2-relu-maxpool2, conv16@5x5 pad2-relu-maxpool2, fc120-relu, fc84-relu, fc
        def __init__(self, side, classes=10):
            super().__init__()
            self.conv0 = nn.Conv2d(1, 6, 5, padding=2)
            self.conv1 = nn.Conv2d(6, 16, 5, padding=2)
            flat = 16 * (side // 2 // 2) ** 2
            self.fc0 = nn.Linear(flat, 120)
            self.fc1 = nn.Linear(120, 84)
            self.fc2 = nn.Linear(84, classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv0(x)), 2, 2)
            x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
            x = x.reshape(x.shape[0], -1)
            x = F.relu(self.fc0(x))
            x = F.relu(self.fc1(x))
            return self.fc2(x)

    class Encoder(nn.Module):  # one post-LN block, mean-pooled over the sequence, then a classifier
        def __init__(self, seq_len, d_model, num_heads, ffn_dim, classes=10):
            super().__init__()
            self.h, self.dh = num_heads, d_model // num_heads
            self.q = nn.Linear(d_model, d_model)
            self.k = nn.Linear(d_model, d_model)
            self.v = nn.Linear(d_model, d_model)
            self.o = nn.Linear(d_model, d_model)
            self.ln1 = nn.LayerNorm(d_model, eps=1e-5)
            self.ffn0 = nn.Linear(d_model, ffn_dim)
            self.ffn1 = nn.Linear(ffn_dim, d_model)
            self.ln2 = nn.LayerNorm(d_model, eps=1e-5)
            self.head = nn.Linear(d_model, classes)

        def forward(self, x):
            b, s, d = x.shape

            def split(t):  # [B,S,D] -> [B,H,S,Dh]
                return t.reshape(b, s, self.h, self.dh).transpose(1, 2)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            ctx = ctx.transpose(1, 2).reshape(b, s, d)
            ln1 = self.ln1(x + self.o(ctx))
            ffn = self.ffn1(F.gelu(self.ffn0(ln1)))  # erf form, as kiln's gelu (approximate=false)
            ln2 = self.ln2(ln1 + ffn)
            return self.head(ln2.mean(dim=1))

    return {"mlp": Mlp, "cnn": Cnn, "transformer": Encoder}


def torch_worker(args):
    threads = args.threads
    import torch  # after OMP_NUM_THREADS is set by the parent
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    spec = json.loads(args.torch_spec)
    model = torch_models(torch)[args.model](**spec)
    if args.model == "mlp":
        x = torch.rand(args.batch, spec["input"])
    elif args.model == "cnn":
        x = torch.rand(args.batch, 1, spec["side"], spec["side"])
    else:
        x = torch.rand(args.batch, spec["seq_len"], spec["d_model"])
    y = torch.randint(0, 10, (args.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # plain SGD: p -= lr * g
    loss_fn = torch.nn.functional.cross_entropy  # softmax cross-entropy, mean over the batch

    times = []
    loss = 0.0
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if args.autocast:  # forward and loss under autocast; backward outside, as PyTorch documents
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss_t = loss_fn(model(x), y)
        else:
            loss_t = loss_fn(model(x), y)
        loss_t.backward()
        opt.step()
        loss = loss_t.item()
        t = (time.perf_counter() - t0) * 1e3
        if step >= args.warmup:
            times.append(t)
    times.sort()
    n = len(times)
    median = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    print(json.dumps({
        "what": "model", "side": "torch_bf16" if args.autocast else "torch", "model": args.model, "batch": args.batch,
        "threads": torch.get_num_threads(), "steps": n, "params": sum(p.numel() for p in model.parameters()), "median_ms": median,
        "mean_ms": sum(times) / n, "min_ms": times[0], "final_loss": loss,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))
