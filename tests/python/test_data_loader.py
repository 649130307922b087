"""kiln.io.DataLoader: over arrays (the C++ loader) and over a Python
dataset, the batches of every epoch equal kiln.datasets.batches with the
epoch's seed, for num_workers 0, 1 and 2; len(), feed_list dicts, one array,
re-iteration and set_epoch; training with and without prefetch gives the same
losses bit for bit; bad input gives kiln.Error or TypeError naming what was
expected; an error in __getitem__ names its batch; leaving an iteration early
or starting another stops the loader's threads."""

import os
import threading
import time
import unittest

import numpy as np

import kiln

RNG = np.random.default_rng(5)
X = RNG.standard_normal((103, 3)).astype("float32")
Y = np.arange(103, dtype=np.int64).reshape(103, 1)


class Samples:
    """A paddle.io.Dataset-style view of X and Y: sample i is (X[i], Y[i])."""

    def __init__(self, fail_at=None):
        self.fail_at = fail_at

    def __len__(self):
        return len(X)

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError("sample %d is missing" % i)
        return X[i], Y[i]


def threads(at_most=None):
    """OS threads of this process (C++ workers included). A joined Python
    thread leaves /proc a moment after join returns, so this waits (up to
    2 s) for the count to settle, or to fall to `at_most`."""
    last = None
    for _ in range(200):
        n = len(os.listdir("/proc/self/task"))
        if (at_most is None and n == last) or (at_most is not None and n <= at_most):
            return n
        last = n
        time.sleep(0.01)
    return n


def expected(epoch, seed, shuffle, drop_last, batch_size=8):
    s = kiln.datasets.epoch_seed(seed, epoch) if shuffle else None
    return list(kiln.datasets.batches(X, Y, batch_size, seed=s, drop_last=drop_last))


def assert_same(test, got, want, what):
    test.assertEqual(len(got), len(want), what)
    for k, ((gx, gy), (wx, wy)) in enumerate(zip(got, want)):
        test.assertTrue(np.array_equal(gx, wx) and gx.dtype == wx.dtype, "%s: batch %d features" % (what, k))
        test.assertTrue(np.array_equal(gy, wy) and gy.shape == wy.shape, "%s: batch %d labels" % (what, k))


class DataLoaderTest(unittest.TestCase):
    def test_batches_equal_the_seeded_order_for_any_worker_count(self):
        for source in ("arrays", "dataset"):
            for shuffle, drop_last in ((True, True), (True, False), (False, False)):
                for workers in (0, 1, 2):
                    data = (X, Y) if source == "arrays" else Samples()
                    loader = kiln.io.DataLoader(data, batch_size=8, shuffle=shuffle, drop_last=drop_last,
                                                num_workers=workers, seed=11)
                    self.assertEqual(len(loader), 12 if drop_last else 13)
                    for epoch in range(3):  # each iteration is the next epoch
                        what = "%s shuffle=%s drop_last=%s workers=%d epoch %d" % (source, shuffle, drop_last,
                                                                                   workers, epoch)
                        assert_same(self, list(loader), expected(epoch, 11, shuffle, drop_last), what)

    def test_set_epoch_feed_list_and_one_array(self):
        loader = kiln.io.DataLoader((X, Y), batch_size=8, shuffle=True, seed=3, feed_list=["x", "label"])
        loader.set_epoch(5)
        first = next(iter(loader))
        self.assertEqual(sorted(first), ["label", "x"])
        want = expected(5, 3, True, False)[0]
        self.assertTrue(np.array_equal(first["x"], want[0]) and np.array_equal(first["label"], want[1]))
        self.assertEqual(loader.epoch, 6)
        single = kiln.io.DataLoader(X, batch_size=50)
        shapes = [b.shape for b in single]
        self.assertEqual(shapes, [(50, 3), (50, 3), (3, 3)])
        # Batches are new arrays: writing one changes nothing else.
        b = next(iter(single))
        b[:] = 0
        self.assertFalse(np.array_equal(X[:50], b))
        # A strided array is copied once and batched the same.
        strided = np.asfortranarray(X)
        got = [b for b in kiln.io.DataLoader(strided, batch_size=50)]
        self.assertTrue(np.array_equal(np.concatenate(got), X))

    def test_training_with_and_without_prefetch_gives_the_same_losses(self):
        (x_train, y_train), _ = kiln.datasets.digits(seed=1)
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup), kiln.unique_name.guard("dl_"):
            x = kiln.data("x", [-1, 64])
            label = kiln.data("label", [-1, 1], dtype="int64")
            loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(kiln.nn.fc(kiln.nn.fc(x, 32, act="relu"), 10),
                                                                   label))
            kiln.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
        runs = []
        for workers in (0, 2):
            exe, scope = kiln.Executor(), kiln.Scope()
            exe.run(startup, scope=scope)
            loader = kiln.io.DataLoader((x_train, y_train), batch_size=32, shuffle=True, drop_last=True,
                                        num_workers=workers, seed=1, feed_list=[x, label])
            losses = [exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]
                      for _ in range(2) for feed in loader]
            runs.append(np.array(losses))
        self.assertEqual(len(runs[0]), 2 * (len(x_train) // 32))
        self.assertTrue(np.array_equal(runs[0], runs[1]), "prefetch changed the losses")

    def test_bad_input(self):
        cases = [
            (lambda: kiln.io.DataLoader((X, Y), batch_size=0), kiln.Error, "batch_size must be positive, got 0"),
            (lambda: kiln.io.DataLoader(Samples(), batch_size=0), kiln.Error, "batch_size must be positive, got 0"),
            (lambda: kiln.io.DataLoader((X, Y[:50]), batch_size=4), kiln.Error,
             "arrays[1] has 50 rows, arrays[0] has 103"),
            (lambda: kiln.io.DataLoader(42, batch_size=4), TypeError,
             "expected a numpy array, a tuple or list of numpy arrays, or a dataset with __len__ and __getitem__; "
             "got int"),
            (lambda: kiln.io.DataLoader((X, [1, 2]), batch_size=4), TypeError,
             "arrays[1]: expected a numpy array, got list"),
            (lambda: kiln.io.DataLoader(X.astype(np.uint8), batch_size=4), kiln.Error,
             "arrays[0]: dtype uint8 is not one kiln holds"),
            (lambda: kiln.io.DataLoader(np.array(1.0, dtype=np.float32), batch_size=4), kiln.Error,
             "arrays[0]: expected at least 1 dim"),
            (lambda: kiln.io.DataLoader((X, Y), num_workers=-1), kiln.Error, "num_workers must be >= 0, got -1"),
            (lambda: kiln.io.DataLoader(Samples(), num_workers=-1), kiln.Error, "num_workers must be >= 0, got -1"),
            (lambda: kiln.io.DataLoader((X, Y), prefetch_factor=0), kiln.Error, "prefetch_factor must be >= 1"),
            (lambda: kiln.io.DataLoader((X, Y), feed_list=["x"]), kiln.Error,
             "feed_list names 1 vars, the dataset has 2 arrays"),
        ]
        for make, error, message in cases:
            with self.assertRaises(error) as caught:
                make()
            self.assertIn(message, str(caught.exception))

    def test_an_error_in_getitem_names_its_batch(self):
        for workers in (0, 1):
            loader = kiln.io.DataLoader(Samples(fail_at=int(Y[0, 0])), batch_size=8, shuffle=True, seed=2,
                                        num_workers=workers)
            order = kiln.datasets.shuffled_indices(len(X), kiln.datasets.epoch_seed(2, 0))
            batch = order.index(0) // 8
            before = threading.active_count()
            with self.assertRaises(KeyError) as caught:
                for _ in loader:
                    pass
            self.assertIn("while making batch %d of epoch 0" % batch, "\n".join(caught.exception.__notes__))
            self.assertEqual(threading.active_count(), before)

    def test_leaving_early_stops_the_threads(self):
        for data in ((X, Y), Samples()):
            before, before_py = threads(), threading.active_count()
            loader = kiln.io.DataLoader(data, batch_size=2, shuffle=True, num_workers=2, prefetch_factor=1)
            for step, _ in enumerate(loader):
                if step == 1:
                    break
            self.assertLessEqual(threads(before), before, type(data).__name__)
            self.assertEqual(threading.active_count(), before_py, type(data).__name__)
            it = iter(loader)
            next(it)
            again = iter(loader)  # ends `it`
            self.assertEqual(len(list(again)), len(loader))
            next(it, None)
            del it, again, loader
            self.assertLessEqual(threads(before), before, type(data).__name__)
            self.assertEqual(threading.active_count(), before_py, type(data).__name__)


if __name__ == "__main__":
    unittest.main()
