"""A data-parallel MLP on the digits with kiln.distributed (run under
mpirun by tests/distributed_test.py): prints the job's loss of each step and
rank 0 writes them to argv[1] as JSON."""
import json
import sys

import kiln
import kiln.distributed as dist

dist.init(timeout_s=120)
(x_train, y_train), _ = kiln.datasets.digits(seed=1)
main, startup = kiln.Program(), kiln.Program()
with kiln.program_guard(main, startup):
    x = kiln.data("x", [-1, 64])
    y = kiln.data("y", [-1, 1], dtype="int64")
    loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(kiln.nn.fc(kiln.nn.fc(x, 32, act="relu"), 10), y))
    dist.DistributedOptimizer(kiln.optimizer.Adam(0.01), bucket_mb=0.004).minimize(loss)
exe = kiln.Executor(use_jit=True)
exe.run(startup)
losses = []
for step, (xb, yb) in enumerate(kiln.datasets.batches(x_train, y_train, 32, seed=1)):
    if step == 20:
        break
    value, = exe.run(main, feed={"x": dist.shard(xb), "y": dist.shard(yb)}, fetch_list=[loss])
    losses.append(dist.all_reduce_mean(value[0]))
if dist.rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"world_size": dist.world_size(), "losses": losses, "stats": dist.stats()}, f)
