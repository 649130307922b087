"""Data-parallel training over MPI, from Python. Launch the script with
mpirun; each rank trains its shard of every global batch, and the gradients
are averaged over the ranks by collective ops in the program (bucketed, each
bucket started as soon as the backward pass has made it):

    import kiln, kiln.distributed as dist
    dist.init()
    ... build main/startup; opt = dist.DistributedOptimizer(kiln.optimizer.Adam(1e-3)); opt.minimize(loss)
    for xb, yb in kiln.datasets.batches(x, y, 64, seed=epoch):   # the global batch
        xs, ys = dist.shard(xb), dist.shard(yb)                     # this rank's rows
        loss_value, = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss])
        print(dist.all_reduce_mean(loss_value[0]))                  # the job's loss

    mpirun -np 2 env PYTHONPATH=build/python /usr/bin/python3 train.py

Every rank starts from the same parameters (the same startup program and
seed). docs/distributed.md describes the design and its costs.
"""

from . import _kiln

_initialized = False


def init(timeout_s=300.0):
    """Joins the MPI job (once; without mpirun the job is this process).
    A rank that waits longer than timeout_s for the others aborts the job."""
    global _initialized
    _kiln.dist_init(float(timeout_s))
    _initialized = True


def _check():
    if not _initialized:
        raise _kiln.Error("kiln.distributed: call kiln.distributed.init() first")


def rank():
    _check()
    return _kiln.dist_rank()


def world_size():
    _check()
    return _kiln.dist_size()


def data_parallel(program, bucket_mb=25.0):
    """Averages every gradient the program's optimizer ops read over the
    ranks, in buckets of about bucket_mb MiB (call after minimize). Returns
    a line per bucket."""
    return _kiln.append_data_parallel(program._p, float(bucket_mb))


class DistributedOptimizer:
    """Wraps an optimizer: minimize(loss) appends the backward pass, the
    gradient averaging and the updates."""

    def __init__(self, optimizer, bucket_mb=25.0):
        self._optimizer = optimizer
        self._bucket_mb = bucket_mb

    def minimize(self, loss, startup_program=None, parameter_list=None):
        _check()
        result = self._optimizer.minimize(loss, startup_program, parameter_list)
        data_parallel(loss.program, self._bucket_mb)
        return result


def shard(batch):
    """This rank's rows of a global batch (its length must be a multiple of
    the world size)."""
    n, size = len(batch), world_size()
    if n % size:
        raise _kiln.Error("kiln.distributed.shard: %d rows do not split over %d ranks" % (n, size))
    r = rank()
    return batch[r * n // size:(r + 1) * n // size]


def all_reduce_mean(value):
    """The mean of `value` (a number) over the ranks."""
    _check()
    return _kiln.dist_mean(float(value))


def stats():
    """What the gradient averages cost so far: count, bytes, milliseconds of
    communication and milliseconds this rank waited for them."""
    return _kiln.dist_stats()
