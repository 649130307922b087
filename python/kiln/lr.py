"""Learning-rate schedules (kiln.optimizer.lr), with the names and arguments
of paddle.optimizer.lr. Pass one as ``learning_rate=`` to any optimizer:
``minimize`` then adds a persistable step counter ``<lr>.step`` and one
``lr_schedule`` op (op_role "lr_sched") that computes the learning rate from
it first in the program (before the updates) and advances it. The schedule
therefore runs inside the program each step (no ``scheduler.step()`` call;
with the JIT on, inside the compiled cluster of the updates), is saved and
restored with the counter by kiln.save / kiln.load, and is left out of
``clone(for_test=True)``. The k-th step run (from 0) uses the value Paddle's
and PyTorch's schedulers give after k calls of ``step()``; the counter is an
fp32 var, exact up to 2**24 steps."""


class LRScheduler:
    """Base class: a schedule is the lr_schedule op's settings."""

    def _settings(self):
        raise NotImplementedError


class CosineAnnealingDecay(LRScheduler):
    """eta_min + (learning_rate - eta_min) * (1 + cos(pi * step / T_max)) / 2"""

    def __init__(self, learning_rate, T_max, eta_min=0):
        if int(T_max) <= 0:
            raise ValueError("CosineAnnealingDecay: T_max must be > 0, got %r" % (T_max,))
        self.base_lr, self.T_max, self.eta_min = float(learning_rate), int(T_max), float(eta_min)

    def _settings(self):
        return dict(kind="cosine", learning_rate=self.base_lr, T_max=self.T_max, eta_min=self.eta_min)


class ExponentialDecay(LRScheduler):
    """learning_rate * gamma ** step"""

    def __init__(self, learning_rate, gamma):
        self.base_lr, self.gamma = float(learning_rate), float(gamma)

    def _settings(self):
        return dict(kind="exponential", learning_rate=self.base_lr, gamma=self.gamma)


class PiecewiseDecay(LRScheduler):
    """values[i] while step < boundaries[i]; values[-1] from boundaries[-1] on."""

    def __init__(self, boundaries, values):
        self.boundaries, self.values = [int(b) for b in boundaries], [float(v) for v in values]
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError("PiecewiseDecay: expected one more value than boundaries, got %d boundaries and %d values"
                             % (len(self.boundaries), len(self.values)))

    def _settings(self):
        return dict(kind="piecewise", boundaries=self.boundaries, values=self.values)


class NoamDecay(LRScheduler):
    """learning_rate * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
    (0 at step 0, as Paddle's)."""

    def __init__(self, d_model, warmup_steps, learning_rate=1.0):
        self.d_model, self.warmup_steps, self.base_lr = float(d_model), int(warmup_steps), float(learning_rate)

    def _settings(self):
        return dict(kind="noam", learning_rate=self.base_lr, d_model=self.d_model, warmup_steps=self.warmup_steps)


class LinearWarmup(LRScheduler):
    """start_lr + (end_lr - start_lr) * step / warmup_steps while step <
    warmup_steps; then `learning_rate`: a number, or a schedule (other than
    LinearWarmup) that starts from its step 0 when warmup ends."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr):
        if isinstance(learning_rate, LinearWarmup):
            raise ValueError("LinearWarmup: the schedule it wraps cannot be a LinearWarmup itself")
        if int(warmup_steps) < 0:
            raise ValueError("LinearWarmup: warmup_steps must be >= 0, got %r" % (warmup_steps,))
        self.learning_rate, self.warmup_steps = learning_rate, int(warmup_steps)
        self.start_lr, self.end_lr = float(start_lr), float(end_lr)

    def _settings(self):
        if isinstance(self.learning_rate, LRScheduler):
            inner = self.learning_rate._settings()
        else:
            inner = dict(kind="constant", learning_rate=float(self.learning_rate))
        return dict(inner, linear_warmup_steps=self.warmup_steps, start_lr=self.start_lr, end_lr=self.end_lr)
