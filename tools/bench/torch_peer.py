"""The PyTorch side of tools/bench/bench_vs_pytorch.py: the five models exactly as
framework/models/ builds them, and the worker that times their training step in its own
process (bench_vs_pytorch.py runs itself with --worker, which calls torch_worker). scaling.py
runs the same worker; tests/convert_checkpoint_test.py reads the models' parameter names."""

import json
import math
import resource
import time


def torch_models(torch):
    """The five models exactly as framework/models/ builds them (models.cc, resnet.cc, gpt.cc)."""
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

    class BasicBlock(nn.Module):  # conv3x3-bn-relu-conv3x3-bn + shortcut (1x1 conv-bn where the shape changes), relu
        def __init__(self, cin, cout, stride):
            super().__init__()
            # PyTorch's batch-norm momentum 0.1 is kiln's 0.9 (running = 0.9 * running + 0.1 * batch).
            self.conv0 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn0 = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            self.conv1 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1))

        def forward(self, x):
            h = self.bn1(self.conv1(F.relu(self.bn0(self.conv0(x)))))
            return F.relu(h + (x if self.down is None else self.down(x)))

    class Resnet(nn.Module):  # stem conv3x3-bn-relu, stages of basic blocks, global average pool, fc
        def __init__(self, side, channels=3, widths=(32, 64, 128, 256), blocks=2, classes=10):  # side: any (pooled)
            super().__init__()
            self.stem = nn.Conv2d(channels, widths[0], 3, padding=1, bias=False)
            self.stem_bn = nn.BatchNorm2d(widths[0], eps=1e-5, momentum=0.1)
            layers, cin = [], widths[0]
            for s, w in enumerate(widths):
                for k in range(blocks):
                    layers.append(BasicBlock(cin, w, 2 if s > 0 and k == 0 else 1))
                    cin = w
            self.blocks = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(F.relu(self.stem_bn(self.stem(x))))
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    class DecoderBlock(nn.Module):  # pre-LN: x + attn(ln1(x)) causal, then x + ffn(ln2(x)), GELU erf
        def __init__(self, d_model, num_heads, ffn_dim):
            super().__init__()
            self.h, self.dh = num_heads, d_model // num_heads
            self.ln1 = nn.LayerNorm(d_model, eps=1e-5)
            self.q = nn.Linear(d_model, d_model)
            self.k = nn.Linear(d_model, d_model)
            self.v = nn.Linear(d_model, d_model)
            self.o = nn.Linear(d_model, d_model)
            self.ln2 = nn.LayerNorm(d_model, eps=1e-5)
            self.ffn0 = nn.Linear(d_model, ffn_dim)
            self.ffn1 = nn.Linear(ffn_dim, d_model)

        def forward(self, x, mask):
            b, s, d = x.shape

            def split(t):  # [B,S,D] -> [B,H,S,Dh]
                return t.reshape(b, s, self.h, self.dh).transpose(1, 2)

            h = self.ln1(x)
            q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))
            ctx = torch.matmul(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1), v)
            x = x + self.o(ctx.transpose(1, 2).reshape(b, s, d))
            return x + self.ffn1(F.gelu(self.ffn0(self.ln2(x))))

    class Gpt(nn.Module):  # token + position embeddings, decoder blocks, final LN, vocabulary projection
        def __init__(self, layers, seq_len, d_model, num_heads, ffn_dim, vocab):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Parameter(torch.empty(seq_len, d_model).uniform_(-0.02, 0.02))
            self.blocks = nn.ModuleList(DecoderBlock(d_model, num_heads, ffn_dim) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
            self.head = nn.Linear(d_model, vocab)
            # Position i sees j <= i (a buffer, not a parameter).
            self.register_buffer("mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1))

        def forward(self, ids):  # [B, S] -> logits [B, S, vocab]
            x = self.tok(ids) + self.pos
            for block in self.blocks:
                x = block(x, self.mask)
            return self.head(self.ln_f(x))

    return {"mlp": Mlp, "cnn": Cnn, "transformer": Encoder, "resnet": Resnet, "gpt": Gpt}


def make_step_inputs(torch, model_name, spec, batch):
    """Seeded inputs and targets of one step, and a function of the model that returns (logits, targets) for
    the cross-entropy: gpt reads seq_len + 1 tokens and predicts each next one, the others a class each."""
    if model_name == "gpt":
        tokens = torch.randint(0, spec["vocab"], (batch, spec["seq_len"] + 1))
        inputs, targets = tokens[:, :-1], tokens[:, 1:].reshape(-1)
        return lambda model: (model(inputs).reshape(-1, spec["vocab"]), targets)
    if model_name == "mlp":
        x = torch.rand(batch, spec["input"])
    elif model_name == "cnn":
        x = torch.rand(batch, 1, spec["side"], spec["side"])
    elif model_name == "resnet":
        x = torch.rand(batch, spec.get("channels", 3), spec["side"], spec["side"])
    else:
        x = torch.rand(batch, spec["seq_len"], spec["d_model"])
    y = torch.randint(0, 10, (batch,))
    return lambda model: (model(x), y)


def make_optimizer(torch, params, name, lr):
    """kiln's --optimizer: sgd (p -= lr * g), momentum (v = 0.9 v + g; p -= lr * v, PyTorch's SGD with
    momentum 0.9 and no dampening) or adam (PyTorch's defaults: betas 0.9, 0.999, eps 1e-8)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError("bench: no PyTorch optimizer for '%s'" % name)


def torch_worker(args):
    threads = args.threads
    import torch  # after OMP_NUM_THREADS is set by the parent
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    spec = json.loads(args.torch_spec)
    optimizer, lr = spec.pop("optimizer", "sgd"), spec.pop("lr", 0.1)
    model = torch_models(torch)[args.model](**spec)
    step_inputs = make_step_inputs(torch, args.model, spec, args.batch)
    opt = make_optimizer(torch, model.parameters(), optimizer, lr)
    loss_fn = torch.nn.functional.cross_entropy  # softmax cross-entropy, mean over the batch (and tokens)

    times = []
    loss = 0.0
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if args.autocast:  # forward and loss under autocast; backward outside, as PyTorch documents
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss_t = loss_fn(*step_inputs(model))
        else:
            loss_t = loss_fn(*step_inputs(model))
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
