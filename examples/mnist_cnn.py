"""A CNN on Fashion-MNIST with kiln's Python API and the JIT on.

    PYTHONPATH=build/python /usr/bin/python3 examples/mnist_cnn.py

Two epochs reach about 90% test accuracy (docs/python.md has the figures).
Batches come from kiln.io.DataLoader, made on --num_workers threads while
the step runs (0: between steps).
"""
import argparse
import time

import numpy as np

import kiln

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.002)
parser.add_argument("--max_steps", type=int, default=0, help="stop each epoch early (for quick runs)")
parser.add_argument("--no_jit", action="store_true")
parser.add_argument("--num_workers", type=int, default=1, help="threads making the next batches (0: none)")
args = parser.parse_args()

(x_train, y_train), (x_test, y_test) = kiln.datasets.fashion_mnist()

main, startup = kiln.Program(), kiln.Program()
with kiln.program_guard(main, startup):
    images = kiln.data("images", [-1, 1, 28, 28])
    labels = kiln.data("labels", [-1, 1], dtype="int64")
    h = kiln.nn.conv2d(images, 16, 3, padding=1, act="relu")
    h = kiln.nn.pool2d(h, 2, pool_stride=2)
    h = kiln.nn.conv2d(h, 32, 3, padding=1, act="relu")
    h = kiln.nn.pool2d(h, 2, pool_stride=2)
    h = kiln.nn.fc(h, 128, act="relu")
    logits = kiln.nn.fc(h, 10)
    loss, probs = kiln.nn.softmax_with_cross_entropy(logits, labels, return_softmax=True)
    loss = kiln.nn.mean(loss)
    test_program = main.clone(for_test=True)
    kiln.optimizer.Adam(args.lr).minimize(loss)

exe = kiln.Executor(use_jit=not args.no_jit)
exe.run(startup)
# Each pass over train_data is the next epoch, shuffled as kiln train --seed 1 shuffles it.
train_data = kiln.io.DataLoader((x_train, y_train), batch_size=args.batch_size, shuffle=True, drop_last=True,
                                num_workers=args.num_workers, seed=1, feed_list=[images, labels])
test_data = kiln.io.DataLoader((x_test, y_test), batch_size=1000, num_workers=args.num_workers)


def accuracy():
    correct = 0
    for x, y in test_data:
        p, = exe.run(test_program, feed={"images": x, "labels": y}, fetch_list=[probs])
        correct += int((p.argmax(axis=1) == y[:, 0]).sum())
    return correct / len(x_test)


for epoch in range(args.epochs):
    start, losses = time.time(), []
    for step, feed in enumerate(train_data):
        if args.max_steps and step == args.max_steps:
            break
        losses.append(exe.run(main, feed=feed, fetch_list=[loss])[0][0])
    seconds = time.time() - start
    print("epoch %d: loss %.4f, %.2f ms/step, %.1f s, test accuracy %.4f" % (
        epoch + 1, np.mean(losses[-100:]), 1000 * seconds / len(losses), seconds, accuracy()), flush=True)
print("jit:", "on" if exe.use_jit else "off", exe.stats())
