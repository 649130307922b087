"""Training history in the format of `kiln train --history` (JSON lines), so
that `kiln plot` draws Python runs next to command-line ones:

    history = kiln.History()
    for step ...:
        loss_value, = exe.run(...)
        history.step(step, loss_value[0], step_ms=...)
    history.epoch(epoch, accuracy)
    history.save("run.jsonl")     # kiln plot run.jsonl other.jsonl --out curves.svg
"""

import json
import os
import tempfile


class History:
    def __init__(self):
        self.records = []

    def step(self, step, loss, samples_per_s=None, step_ms=None, epoch=None):
        r = {"step": int(step), "loss": float(loss)}
        if epoch is not None:
            r["epoch"] = int(epoch)
        if samples_per_s is not None:
            r["samples_per_s"] = float(samples_per_s)
        if step_ms is not None:
            r["step_ms"] = float(step_ms)
        self.records.append(r)

    def epoch(self, epoch, test_accuracy):
        self.records.append({"epoch": int(epoch), "test_accuracy": float(test_accuracy)})

    def save(self, path):
        """Writes the JSON lines atomically (a temporary file renamed)."""
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".history-")
        try:
            with os.fdopen(fd, "w") as f:
                for r in self.records:
                    f.write(json.dumps(r) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
