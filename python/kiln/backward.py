"""Reverse-mode autodiff as a public entry (Paddle's names).

``kiln.append_backward(loss)`` appends the gradient ops of a one-element
loss and returns ``[(param, grad), ...]``; ``kiln.gradients(targets,
inputs)`` appends those of any targets (seeded with ones, or with
``target_gradients``) and returns the gradient of each input. Gradients are
named ``<var>@GRAD``; a second backward pass over the same vars writes
``<var>@GRAD@1`` (and so on), never overwriting the first one's.
"""

from . import _kiln
from .framework import Variable, atomic
from .ops import _var_name as _name


def _list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


@atomic
def append_backward(loss, parameter_list=None):
    """Appends the gradients of `loss` (one element) to its program. Returns
    [(param, grad)] for every trainable parameter it depends on (or those of
    `parameter_list`), as Variables."""
    if not isinstance(loss, Variable):
        raise TypeError("append_backward: loss must be a kiln Variable")
    params = None
    if parameter_list is not None:
        params = [_name(p, "append_backward parameter_list") for p in parameter_list]
    pairs = _kiln.append_backward(loss.program._p, loss.name, params)
    return [(Variable(loss.program, p), Variable(loss.program, g)) for p, g in pairs]


@atomic
def gradients(targets, inputs, target_gradients=None):
    """The gradients of sum(targets) (or of the targets weighted by
    `target_gradients`, one var per target of its dims) with respect to each
    of `inputs`: a list of Variables, None where no target depends on that
    input. Inputs may be fed data (stop_gradient does not apply to them)."""
    targets, inputs = _list(targets), _list(inputs)
    if not targets or not inputs:
        raise _kiln.Error("gradients: give at least one target and one input")
    program = targets[0].program if isinstance(targets[0], Variable) else None
    if program is None:
        raise TypeError("gradients: targets must be kiln Variables")
    grads = [] if target_gradients is None else _list(target_gradients)
    if grads and len(grads) != len(targets):
        raise _kiln.Error("gradients: %d target_gradients for %d targets" % (len(grads), len(targets)))
    names = _kiln.gradients(program._p, [_name(t, "gradients targets") for t in targets],
                            [_name(i, "gradients inputs") for i in inputs],
                            ["" if g is None else _name(g, "gradients target_gradients") for g in grads])
    return [None if n is None else Variable(program, n) for n in names]
