"""kiln.io.DataLoader: mini-batches made ahead of the training step.

Over numpy arrays the batches come from kiln's C++ DataLoader (the one
`kiln train` uses): worker threads gather the rows of the next batches while
the step runs, without the GIL. Over a Python dataset (`__len__` and
`__getitem__`, as paddle.io.Dataset) one Python thread reads the samples of
the next batches. Either way the rows of epoch e are
kiln.datasets.shuffled_indices(n, kiln.datasets.epoch_seed(seed, e)) when
shuffling (range(n) otherwise) and do not depend on num_workers.
"""

import queue
import threading
import weakref

import numpy as np

from . import _kiln
from .framework import Variable

_BATCH, _END, _ERROR = range(3)


def _arrays_of(dataset):
    """The arrays to batch, or None for a Python dataset; TypeError for neither."""
    if isinstance(dataset, np.ndarray):
        return [dataset]
    if isinstance(dataset, (tuple, list)):
        kinds = [isinstance(a, np.ndarray) for a in dataset]
        if dataset and all(kinds):
            return list(dataset)
        if any(kinds):
            bad = kinds.index(False)
            raise TypeError("kiln.io.DataLoader: arrays[%d]: expected a numpy array, got %s"
                            % (bad, type(dataset[bad]).__name__))
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return None
    raise TypeError("kiln.io.DataLoader: expected a numpy array, a tuple or list of numpy arrays, or a dataset with "
                    "__len__ and __getitem__; got %s" % type(dataset).__name__)


def _default_collate(samples):
    """Stacks the samples: one array per field of a tuple/list sample, else one array."""
    if isinstance(samples[0], (tuple, list)):
        return tuple(np.stack([np.asarray(s[f]) for s in samples]) for f in range(len(samples[0])))
    return np.stack([np.asarray(s) for s in samples])


class DataLoader:
    """Iterates over mini-batches of `dataset`, one epoch per iteration.

        loader = kiln.io.DataLoader((x_train, y_train), batch_size=64, shuffle=True, drop_last=True, seed=1)
        for epoch in range(10):
            for x, y in loader:                      # epoch 0, 1, 2, ...
                exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])

    dataset: a numpy array, a tuple or list of numpy arrays with one row per
        sample (float32, float64, int64, int32 or bool), or an object with
        __len__ and __getitem__ whose items are samples.
    batch_size, shuffle, drop_last: as paddle.io.DataLoader; batch_size >= 1.
    num_workers: threads making the next batches while the caller runs the
        step (0: each batch is made when asked for). Over arrays, that many C++
        threads; over a Python dataset one Python thread for any value >= 1
        (__getitem__ holds the GIL). The batches are the same for any value.
    seed: the shuffle's seed; epoch e uses epoch_seed(seed, e), as kiln train
        --seed does.
    feed_list: names (or Variables) of the fed vars, one per array or field:
        each batch is then a {name: array} dict for Executor.run(feed=...).
    prefetch_factor: batches each worker may make ahead (>= 1).
    collate_fn: for a Python dataset, makes a batch from a list of samples
        (default: np.stack per field).

    A batch is a tuple of arrays (one per array or sample field; a single
    array gives arrays), or a dict with feed_list. The arrays are new, own
    their memory and may be kept. The k-th iteration over the loader is epoch
    k (set_epoch changes it); starting an iteration ends the one before, and
    leaving an iteration early (break) stops its thread.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, num_workers=1, seed=0,
                 feed_list=None, prefetch_factor=2, collate_fn=None):
        arrays = _arrays_of(dataset)
        options = dict(batch_size=int(batch_size), shuffle=bool(shuffle), drop_last=bool(drop_last), seed=int(seed))
        self.num_workers, self.prefetch_factor = int(num_workers), int(prefetch_factor)
        if arrays is not None:
            if collate_fn is not None:
                raise TypeError("kiln.io.DataLoader: collate_fn applies to a Python dataset, not to numpy arrays")
            self._native = _kiln.DataLoader(arrays, num_workers=self.num_workers,
                                            prefetch_factor=self.prefetch_factor, **options)
            self._dataset, width = None, len(arrays)
            self._single = isinstance(dataset, np.ndarray)
        else:
            if self.num_workers < 0:
                raise _kiln.Error("DataLoader: num_workers must be >= 0, got %d" % self.num_workers)
            if self.prefetch_factor < 1:
                raise _kiln.Error("DataLoader: prefetch_factor must be >= 1, got %d" % self.prefetch_factor)
            # The C++ loader over the row numbers: the same order, checks and len().
            self._native = _kiln.DataLoader([np.arange(len(dataset), dtype=np.int64)], num_workers=0,
                                            prefetch_factor=1, **options)
            self._dataset, width, self._single = dataset, None, False
            self._collate = collate_fn or _default_collate
        self._names = None
        if feed_list is not None:
            self._names = [v.name if isinstance(v, Variable) else str(v) for v in feed_list]
            if width is not None and len(self._names) != width:
                raise _kiln.Error("kiln.io.DataLoader: feed_list names %d vars, the dataset has %d arrays"
                                  % (len(self._names), width))
        self._epoch = 0
        self._live = None

    def __len__(self):
        """Batches per epoch."""
        return len(self._native)

    @property
    def epoch(self):
        """The epoch the next iteration runs."""
        return self._epoch

    def set_epoch(self, epoch):
        """Makes the next iteration epoch `epoch` (>= 0); later ones follow it."""
        if int(epoch) < 0:
            raise _kiln.Error("kiln.io.DataLoader: epoch must be >= 0, got %d" % epoch)
        self._epoch = int(epoch)

    def __iter__(self):
        live = self._live() if self._live is not None else None
        if live is not None:
            live.close()  # one iteration at a time: the one before stops here
        epoch, self._epoch = self._epoch, self._epoch + 1
        it = self._arrays_epoch(epoch) if self._dataset is None else self._dataset_epoch(epoch)
        # Weak: an iteration left early (break) is closed, and its threads
        # stopped, as soon as the caller drops it.
        self._live = weakref.ref(it)
        return it

    def _batch(self, arrays):
        if self._single:
            return arrays[0]
        if self._names is None:
            return tuple(arrays)
        if len(self._names) != len(arrays):
            raise _kiln.Error("kiln.io.DataLoader: feed_list names %d vars, a batch has %d fields"
                              % (len(self._names), len(arrays)))
        return dict(zip(self._names, arrays))

    def _arrays_epoch(self, epoch):
        self._native.start_epoch(epoch)
        try:
            while True:
                arrays = self._native.next()
                if arrays is None:
                    return
                yield self._batch(arrays)
        finally:
            self._native.stop()

    def _make(self, rows):
        batch = self._collate([self._dataset[int(i)] for i in rows])
        if isinstance(batch, dict):  # a collate_fn that names the fields itself
            return batch
        return self._batch(batch if isinstance(batch, (tuple, list)) else (batch,))

    def _dataset_epoch(self, epoch):
        self._native.start_epoch(epoch)
        if self.num_workers == 0:
            k = 0
            while True:
                rows = self._native.next()
                if rows is None:
                    return
                yield self._named_errors(lambda: self._make(rows[0]), epoch, k)
                k += 1
        yield from self._prefetched(epoch)

    def _named_errors(self, make, epoch, k):
        try:
            return make()
        except Exception as e:
            e.add_note("kiln.io.DataLoader: while making batch %d of epoch %d" % (k, epoch))
            raise

    def _prefetched(self, epoch):
        ready = queue.Queue(maxsize=max(1, self.num_workers) * self.prefetch_factor)
        stop = threading.Event()

        def work():
            k = 0
            while not stop.is_set():
                rows = self._native.next()
                if rows is None:
                    ready.put((_END, None))
                    return
                try:
                    ready.put((_BATCH, self._named_errors(lambda: self._make(rows[0]), epoch, k)))
                except Exception as e:  # handed to the caller, who raises it at this batch
                    ready.put((_ERROR, e))
                    return
                k += 1

        thread = threading.Thread(target=work, name="kiln-data-loader", daemon=True)
        thread.start()
        try:
            while True:
                kind, value = ready.get()
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise value
                yield value
        finally:
            stop.set()
            while thread.is_alive():  # unblock a put on a full queue
                try:
                    ready.get(timeout=0.05)
                except queue.Empty:
                    pass
            thread.join()
