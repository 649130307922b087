"""A 2-layer causal transformer language model over bytes of English text that
Debian ships (the licenses in /usr/share/common-licenses), JIT on. One whole
license is held out; the script reports its bits per character.

    PYTHONPATH=build/python /usr/bin/python3 examples/char_lm.py
"""
import argparse
import math
import os
import time

import numpy as np

import kiln

p = argparse.ArgumentParser()
p.add_argument("--minutes", type=float, default=4.5, help="training time budget")
p.add_argument("--max_steps", type=int, default=0)
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
    kiln.optimizer.Adam(0.002).minimize(loss)

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


rng, start, step = np.random.default_rng(1), time.time(), 0
while time.time() - start < 60 * a.minutes and (a.max_steps == 0 or step < a.max_steps):
    xs, ys = windows(train, rng.integers(0, len(train) - S - 1, a.batch))
    value, = exe.run(main, feed={"ids": xs, "targets": ys}, fetch_list=[loss])
    step += 1
    if step % 500 == 0:
        print("step %d (%.0f s): train loss %.3f, held-out bpc %.3f" % (step, time.time() - start, value[0],
                                                                       held_out_bpc()), flush=True)
ms = 1000 * (time.time() - start) / step
print("%d steps, %.1f ms/step: held-out bits per character %.3f (%s)" % (step, ms, held_out_bpc(), HELD_OUT))
