"""Real data for examples and tests, read by kiln's C++ loaders (which check
every file and name what is wrong), as numpy arrays."""

from . import _kiln


def fashion_mnist(data_dir="/usr/share/datasets/fashion-mnist"):
    """Fashion-MNIST from Debian's dataset-fashion-mnist: ((x_train,
    y_train), (x_test, y_test)), x float32 [N, 1, 28, 28] in [0, 1], y int64
    [N, 1]; 60000 and 10000 rows in file order."""
    return _kiln.load_fashion_mnist(data_dir)


def digits(seed=1, train_fraction=0.8, path=""):
    """The UCI handwritten digits bundled with kiln: ((x_train, y_train),
    (x_test, y_test)), x float32 [N, 64] in [0, 1], y int64 [N, 1]; shuffled
    with `seed`, then split (1437 / 360 rows by default)."""
    return _kiln.load_digits(path, seed, train_fraction)


def shuffled_indices(n, seed):
    """A permutation of range(n) fixed by `seed` (the one kiln train uses)."""
    return _kiln.shuffled_indices(n, seed)


def epoch_seed(seed, epoch):
    """The shuffle seed of epoch `epoch` under `seed`: kiln train --seed and
    kiln.io.DataLoader(seed=) shuffle epoch e with
    shuffled_indices(n, epoch_seed(seed, e))."""
    return _kiln.epoch_seed(seed, epoch)


def batches(x, y, batch_size, seed=None, drop_last=True):
    """Yields (x, y) mini-batches, shuffled by `seed` (None: in order).
    Each batch is a contiguous copy, fed without a further copy."""
    n = len(x)
    order = list(range(n)) if seed is None else shuffled_indices(n, seed)
    stop = n - n % batch_size if drop_last else n
    for begin in range(0, stop, batch_size):
        rows = order[begin:begin + batch_size]
        yield x[rows], y[rows]
