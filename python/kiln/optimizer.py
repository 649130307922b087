"""Optimizers: ``minimize(loss)`` appends the backward pass of the loss and
one update op per parameter (sgd, momentum, adam, adamw: updated in place) to the
loss's program, and their state (learning rate, velocities, moments) to the
default startup program. The loss must be one element; a program's
parameters are updated by one optimizer each (a second ``minimize`` of the
same parameters is refused).

``weight_decay=`` (a float or ``kiln.regularizer.L2Decay``) adds
``coeff * param`` to the gradient inside the update op (Paddle's L2Decay,
PyTorch's ``weight_decay`` of SGD/Adam); ``AdamW`` decays decoupled from the
moments instead. Either way the decay is part of the same fused update
kernel, with no extra pass over the weights.

``grad_clip=`` (``kiln.nn.ClipGradByGlobalNorm(clip_norm)`` or
``kiln.nn.ClipGradByValue(max, min=None)``) clips the raw gradients before
the decay, inside the same update kernels (kiln/clip.py).

``GradientMergeOptimizer(inner, k_steps)`` wraps any of them: it updates
once every k_steps runs, with the mean of their gradients (gradient
accumulation)."""

import numbers
import sys

from . import _kiln
from . import lr
from .clip import _clip_settings
from .framework import Variable, atomic, default_startup_program, fresh_state_name
from .regularizer import _coeff

# `import kiln.optimizer.lr` works as with Paddle's paddle.optimizer.lr.
sys.modules[__name__ + ".lr"] = lr


class Optimizer:
    _kind = None

    def __init__(self, learning_rate, grad_clip=None, **settings):
        settings.update(_clip_settings(grad_clip, type(self).__name__))
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
        return self._minimize(loss, startup_program, parameter_list, {})

    def _minimize(self, loss, startup_program, parameter_list, merge_settings):
        if not isinstance(loss, Variable):
            raise TypeError("minimize: loss must be a kiln Variable")
        program = loss.program
        startup = startup_program or default_startup_program()
        params = None
        if parameter_list is not None:
            params = [p.name if isinstance(p, Variable) else str(p) for p in parameter_list]
        startup.is_startup = True
        settings = dict(self._settings, **self._decay_settings(program, params), **merge_settings)
        lr_name, pairs = _kiln.minimize(program._p, startup._p, loss.name, self._kind, settings, params,
                                        fresh_state_name((program, startup), "learning_rate"))
        self.learning_rate_var = Variable(program, lr_name)
        if self._schedule is not None:
            step = _kiln.append_lr_schedule(program._p, startup._p, lr_name, self._schedule._settings())
            self.lr_step_var = Variable(program, step)
        return self.learning_rate_var, [(Variable(program, p), Variable(program, g)) for p, g in pairs]

    def _decay_settings(self, program, params):
        return {}


class SGD(Optimizer):
    """p -= lr * g"""
    _kind = "sgd"

    def __init__(self, learning_rate, weight_decay=None, grad_clip=None):
        super().__init__(learning_rate, grad_clip, weight_decay=_coeff(weight_decay, "SGD"))


class Momentum(Optimizer):
    """v = momentum * v + g; p -= lr * v (nesterov: p -= lr * (g + momentum * v))"""
    _kind = "momentum"

    def __init__(self, learning_rate, momentum=0.9, use_nesterov=False, weight_decay=None, grad_clip=None):
        super().__init__(learning_rate, grad_clip, momentum=float(momentum), use_nesterov=bool(use_nesterov),
                         weight_decay=_coeff(weight_decay, "Momentum"))


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction, as OPS.md's adam op."""
    _kind = "adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
                 grad_clip=None):
        super().__init__(learning_rate, grad_clip, beta1=float(beta1), beta2=float(beta2), epsilon=float(epsilon),
                         weight_decay=_coeff(weight_decay, "Adam"))


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter; PyTorch's
    AdamW): p *= 1 - lr * weight_decay, then Adam's step, in one adamw op.
    ``apply_decay_param_fun(name)`` picks the parameters that decay (None:
    all), e.g. ``lambda n: not n.endswith(".b")`` to leave fc biases alone."""
    _kind = "adamw"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01,
                 apply_decay_param_fun=None, grad_clip=None):
        if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
            raise TypeError("AdamW: weight_decay must be a float, got %r" % (weight_decay,))
        if apply_decay_param_fun is not None and not callable(apply_decay_param_fun):
            raise TypeError("AdamW: apply_decay_param_fun must be callable or None")
        super().__init__(learning_rate, grad_clip, beta1=float(beta1), beta2=float(beta2), epsilon=float(epsilon),
                         weight_decay=float(weight_decay))
        self._apply_decay_param_fun = apply_decay_param_fun

    def _decay_settings(self, program, params):
        if self._apply_decay_param_fun is None:
            return {}
        names = params if params is not None else [p.name for p in program.all_parameters()]
        return {"no_decay": [n for n in names if not self._apply_decay_param_fun(n)]}


class GradientMergeOptimizer:
    """Gradient accumulation (Paddle's paddle.incubate.optimizer.
    GradientMergeOptimizer): ``inner_optimizer`` (SGD, Momentum, Adam or
    AdamW) updates once every ``k_steps`` runs of the program, with the mean
    of the k gradients (their sum with ``avg=False``). k runs at batch size B
    of a mean loss then train as one run at batch size k*B.

    ``minimize`` adds a persistable counter ``<lr>.grad_merge_step`` and an
    accumulator ``<param>.grad_merge`` per parameter (saved and restored by
    kiln.save / kiln.load, so a resumed run continues its cycle). On the
    other runs the parameters and the optimizer's state (moments, velocity,
    beta powers) stay exactly as they were. A learning-rate schedule of the
    inner optimizer advances once per update, not per run. Without control
    flow, every run executes the update and keeps the old values where it
    does not apply: with the JIT the accumulation, the update and that
    choice are one generated kernel per parameter."""

    def __init__(self, inner_optimizer, k_steps=1, avg=True):
        if not isinstance(inner_optimizer, Optimizer):
            raise TypeError("GradientMergeOptimizer: inner_optimizer must be a kiln.optimizer optimizer (SGD, Momentum, "
                            "Adam, AdamW), got %r" % (inner_optimizer,))
        if isinstance(k_steps, bool) or not isinstance(k_steps, numbers.Integral) or k_steps < 1:
            raise ValueError("GradientMergeOptimizer: k_steps must be an int >= 1, got %r" % (k_steps,))
        if not isinstance(avg, bool):
            raise TypeError("GradientMergeOptimizer: avg must be a bool, got %r" % (avg,))
        self.inner_optimizer, self.k_steps, self.avg = inner_optimizer, int(k_steps), avg
        self.step_var = None

    @atomic
    def minimize(self, loss, startup_program=None, parameter_list=None):
        """As the inner optimizer's minimize; k_steps=1 adds nothing to it."""
        out = self.inner_optimizer._minimize(loss, startup_program, parameter_list,
                                             dict(grad_merge_steps=self.k_steps, grad_merge_avg=self.avg))
        if self.k_steps > 1:
            self.step_var = Variable(loss.program, self.learning_rate_var.name + ".grad_merge_step")
        return out

    @property
    def learning_rate_var(self):
        return self.inner_optimizer.learning_rate_var

    @property
    def lr_step_var(self):
        return self.inner_optimizer.lr_step_var


SGDOptimizer = SGD
MomentumOptimizer = Momentum
AdamOptimizer = Adam
AdamWOptimizer = AdamW
