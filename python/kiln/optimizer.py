"""Optimizers: ``minimize(loss)`` appends the backward pass of the loss and
one update op per parameter (sgd, momentum, adam: updated in place) to the
loss's program, and their state (learning rate, velocities, moments) to the
default startup program. The loss must be one element; a program's
parameters are updated by one optimizer each (a second ``minimize`` of the
same parameters is refused)."""

import sys

from . import _kiln
from . import lr
from .framework import Variable, atomic, default_startup_program, fresh_state_name

# `import kiln.optimizer.lr` works as with Paddle's paddle.optimizer.lr.
sys.modules[__name__ + ".lr"] = lr


class Optimizer:
    _kind = None

    def __init__(self, learning_rate, **settings):
        # A schedule (kiln.optimizer.lr) overwrites the learning-rate var
        # before every update; 1.0 only initialises it.
        self._schedule = learning_rate if isinstance(learning_rate, lr.LRScheduler) else None
        self._settings = dict(settings, learning_rate=1.0 if self._schedule else float(learning_rate))
        self.learning_rate_var = None
        self.lr_step_var = None

    @atomic
    def minimize(self, loss, startup_program=None, parameter_list=None):
        """Appends the gradients of `loss` (one element) and the updates.
        Returns (learning-rate var, [(param, grad), ...]) as Variables.
        Raises kiln.Error, changing nothing, for a loss of more than one
        element or parameters this program's optimizers update already."""
        if not isinstance(loss, Variable):
            raise TypeError("minimize: loss must be a kiln Variable")
        program = loss.program
        startup = startup_program or default_startup_program()
        params = None
        if parameter_list is not None:
            params = [p.name if isinstance(p, Variable) else str(p) for p in parameter_list]
        startup.is_startup = True
        lr_name, pairs = _kiln.minimize(program._p, startup._p, loss.name, self._kind, self._settings, params,
                                        fresh_state_name((program, startup), "learning_rate"))
        self.learning_rate_var = Variable(program, lr_name)
        if self._schedule is not None:
            step = _kiln.append_lr_schedule(program._p, startup._p, lr_name, self._schedule._settings())
            self.lr_step_var = Variable(program, step)
        return self.learning_rate_var, [(Variable(program, p), Variable(program, g)) for p, g in pairs]


class SGD(Optimizer):
    """p -= lr * g"""
    _kind = "sgd"

    def __init__(self, learning_rate):
        super().__init__(learning_rate)


class Momentum(Optimizer):
    """v = momentum * v + g; p -= lr * v (nesterov: p -= lr * (g + momentum * v))"""
    _kind = "momentum"

    def __init__(self, learning_rate, momentum=0.9, use_nesterov=False):
        super().__init__(learning_rate, momentum=float(momentum), use_nesterov=bool(use_nesterov))


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction, as OPS.md's adam op."""
    _kind = "adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
        super().__init__(learning_rate, beta1=float(beta1), beta2=float(beta2), epsilon=float(epsilon))


SGDOptimizer = SGD
MomentumOptimizer = Momentum
AdamOptimizer = Adam
