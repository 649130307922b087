"""A 2-layer causal transformer language model over bytes of English text that
Debian ships (the licenses in /usr/share/common-licenses), JIT on. One whole
license is held out; the script reports its bits per character.

It trains with the recipe of docs/python.md ("A real training recipe"): a
linear warm-up then a cosine decay over --steps, AdamW with decoupled weight
decay on the matrices, clipping by the global gradient norm, and windows of
the text made by kiln.io.DataLoader on a background thread. --minutes stops
it early if the steps take longer than that.

    python3 examples/char_lm.py          (or PYTHONPATH=build/python /usr/bin/python3 without installing)
"""
import argparse
import math
import os
import time

import numpy as np

import kiln

p = argparse.ArgumentParser()
p.add_argument("--minutes", type=float, default=4.5, help="training time budget (stops early)")
p.add_argument("--steps", type=int, default=8000, help="the schedule's length: warm-up, then cosine decay to 0")
p.add_argument("--lr", type=float, default=0.003, help="the peak learning rate")
p.add_argument("--weight_decay", type=float, default=0.1)
p.add_argument("--clip", type=float, default=1.0, help="global gradient norm clip")
p.add_argument("--seq", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--d", type=int, default=128)
p.add_argument("--dropout", type=float, default=0.2)
p.add_argument("--no_jit", action="store_true")
a = p.parse_args()

DIR, HELD_OUT = "/usr/share/common-licenses", "MPL-2.0"
files = sorted(f for f in os.listdir(DIR) if not os.path.islink(os.path.join(DIR, f)))
text = {f: np.frombuffer(open(os.path.join(DIR, f), "rb").read(), np.uint8).astype("int64") for f in files}
train = np.concatenate([text[f] for f in files if f != HELD_OUT])
test = text[HELD_OUT]
S, D, H = a.seq, a.d, 4

main, startup = kiln.Program(), kiln.Program()
with kiln.program_guard(main, startup):
    ids = kiln.data("ids", [-1, S, 1], dtype="int64")
    targets = kiln.data("targets", [-1, S, 1], dtype="int64")
    x = kiln.nn.embedding(ids, size=[256, D]) + kiln.create_parameter("pos", [S, D], "uniform", limit=0.02)
    x = kiln.nn.dropout(x, a.dropout)
    for layer in range(2):
        h = kiln.nn.layer_norm(x, begin_norm_axis=2)
        q, k, v = (kiln.nn.transpose2(kiln.nn.reshape2(kiln.nn.fc(h, D, num_flatten_dims=2), shape=[0, 0, H, D // H]),
                                      axis=[0, 2, 1, 3]) for _ in range(3))
        att = kiln.nn.fused_softmax_mask_upper_triangle(kiln.nn.matmul(q, k, transpose_Y=True,
                                                                       alpha=1 / math.sqrt(D // H)))
        ctx = kiln.nn.reshape2(kiln.nn.transpose2(kiln.nn.matmul(att, v), axis=[0, 2, 1, 3]), shape=[0, 0, D])
        x = x + kiln.nn.dropout(kiln.nn.fc(ctx, D, num_flatten_dims=2), a.dropout)
        h = kiln.nn.layer_norm(x, begin_norm_axis=2)
        h = kiln.nn.fc(kiln.nn.fc(h, 4 * D, num_flatten_dims=2, act="gelu"), D, num_flatten_dims=2)
        x = x + kiln.nn.dropout(h, a.dropout)
    logits = kiln.nn.fc(kiln.nn.layer_norm(x, begin_norm_axis=2), 256, num_flatten_dims=2)
    loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, targets))
    test_program = main.clone(for_test=True)
    warmup = min(200, a.steps // 10)
    schedule = kiln.optimizer.lr.LinearWarmup(kiln.optimizer.lr.CosineAnnealingDecay(a.lr, T_max=a.steps - warmup),
                                              warmup_steps=warmup, start_lr=0.0, end_lr=a.lr)
    kiln.optimizer.AdamW(learning_rate=schedule, weight_decay=a.weight_decay,
                         apply_decay_param_fun=lambda name: name.startswith("fc_") and name.endswith(".w"),
                         grad_clip=kiln.nn.ClipGradByGlobalNorm(a.clip)).minimize(loss)

exe = kiln.Executor(use_jit=not a.no_jit)
exe.run(startup)


def windows(data, starts):
    rows = np.stack([data[s:s + S + 1] for s in starts])
    return rows[:, :S, None].copy(), rows[:, 1:, None].copy()


def held_out_bpc():
    starts = np.arange(0, len(test) - S - 1, S)
    nats = [exe.run(test_program, feed=dict(zip(("ids", "targets"), windows(test, starts[i:i + 64]))),
                    fetch_list=[loss])[0][0] * len(starts[i:i + 64]) for i in range(0, len(starts), 64)]
    return sum(nats) / len(starts) / math.log(2)


class Windows:
    """Sample i: the S bytes from position i, and the S bytes after each."""

    def __len__(self):
        return len(train) - S - 1

    def __getitem__(self, i):
        return train[i:i + S, None], train[i + 1:i + S + 1, None]


loader = kiln.io.DataLoader(Windows(), batch_size=a.batch, shuffle=True, drop_last=True, num_workers=1, seed=1,
                            feed_list=[ids, targets])
start, step = time.time(), 0
while step < a.steps and time.time() - start < 60 * a.minutes:
    for feed in loader:
        value, = exe.run(main, feed=feed, fetch_list=[loss])
        step += 1
        if step % 500 == 0:
            print("step %d (%.0f s): train loss %.3f, held-out bpc %.3f" % (step, time.time() - start, value[0],
                                                                           held_out_bpc()), flush=True)
        if step == a.steps or time.time() - start >= 60 * a.minutes:
            break
seconds = time.time() - start
print("%d steps, %.0f s, %.1f ms/step: held-out bits per character %.3f (%s)" % (step, seconds, 1000 * seconds / step,
                                                                                 held_out_bpc(), HELD_OUT))
