"""A small residual CNN with batch_norm on Fashion-MNIST, JIT on.

    PYTHONPATH=build/python /usr/bin/python3 examples/resnet_small.py
"""
import argparse
import time

import numpy as np

import kiln

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--max_steps", type=int, default=0, help="stop each epoch early (for quick runs)")
parser.add_argument("--no_jit", action="store_true")
args = parser.parse_args()

(x_train, y_train), (x_test, y_test) = kiln.datasets.fashion_mnist()


def conv_bn(x, filters, stride=1, act="relu"):
    h = kiln.nn.conv2d(x, filters, 3, stride=stride, padding=1, bias=False)
    return kiln.nn.batch_norm(h, act=act)


def residual(x, filters, stride=1):
    """Two 3x3 conv-bn layers plus a shortcut (a 1x1 conv-bn where the shape changes)."""
    h = conv_bn(conv_bn(x, filters, stride), filters, act=None)
    if stride != 1 or x.shape[1] != filters:
        x = kiln.nn.batch_norm(kiln.nn.conv2d(x, filters, 1, stride=stride, bias=False))
    return kiln.nn.relu(h + x)


main, startup = kiln.Program(), kiln.Program()
with kiln.program_guard(main, startup):
    images = kiln.data("images", [-1, 1, 28, 28])
    labels = kiln.data("labels", [-1, 1], dtype="int64")
    h = conv_bn(images, 16)
    h = residual(h, 16)
    h = residual(h, 32, stride=2)
    h = residual(h, 64, stride=2)
    h = kiln.nn.pool2d(h, pool_type="avg", global_pooling=True)
    logits = kiln.nn.fc(h, 10)
    loss, probs = kiln.nn.softmax_with_cross_entropy(logits, labels, return_softmax=True)
    loss = kiln.nn.mean(loss)
    test_program = main.clone(for_test=True)
    lr, _ = kiln.optimizer.Momentum(0.05, 0.9).minimize(loss)

exe = kiln.Executor(use_jit=not args.no_jit)
exe.run(startup)


def accuracy():
    correct = 0
    for x, y in kiln.datasets.batches(x_test, y_test, 500):
        p, = exe.run(test_program, feed={"images": x, "labels": y}, fetch_list=[probs])
        correct += int((p.argmax(axis=1) == y[:, 0]).sum())
    return correct / len(x_test)


for epoch in range(args.epochs):
    # Step decay: the last epoch at a tenth of the first's rate.
    kiln.global_scope().set(lr.name, np.array([0.05 * (0.1 ** (epoch / max(1, args.epochs - 1)))], "float32"))
    start, losses = time.time(), []
    for step, (x, y) in enumerate(kiln.datasets.batches(x_train, y_train, args.batch_size, seed=epoch + 1)):
        if args.max_steps and step == args.max_steps:
            break
        losses.append(exe.run(main, feed={"images": x, "labels": y}, fetch_list=[loss])[0][0])
    ms = 1000 * (time.time() - start) / len(losses)
    print("epoch %d: loss %.4f, %.2f ms/step, test accuracy %.4f" % (epoch + 1, np.mean(losses[-100:]), ms,
                                                                        accuracy()), flush=True)
print("jit:", "on" if exe.use_jit else "off", exe.stats())
