"""Gradient clipping, as an optimizer's ``grad_clip=`` (Paddle's
paddle.nn.ClipGradByGlobalNorm / ClipGradByValue; also kiln.nn.*).

Clipping acts on the raw gradients, before weight decay (Paddle's order:
the L2 term ``coeff * param`` of ``weight_decay=`` is added to the clipped
gradient; AdamW's decoupled decay does not touch the gradient at all).
Both run inside the optimizer's update ops, in the same fused kernels, so
they add no pass over the weights: ClipGradByGlobalNorm adds one op,
``clip_by_global_norm``, which reads every gradient once and writes a
one-element factor that the updates multiply their gradient by;
ClipGradByValue is two attributes of the update ops."""

import math

from . import _kiln


def _number(value, who, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s: %s must be a float, got %r" % (who, what, value))
    value = float(value)
    if not math.isfinite(value):
        raise _kiln.Error("%s: %s must be finite, got %r" % (who, what, value))
    return value


class ClipGradBase:
    def _settings(self):
        raise NotImplementedError


class ClipGradByGlobalNorm(ClipGradBase):
    """Scales every gradient by ``clip_norm / max(global_norm, clip_norm)``,
    where global_norm = sqrt(sum of the squares of all the gradients the
    optimizer updates with): nothing changes while the norm is at most
    clip_norm. As ``torch.nn.utils.clip_grad_norm_(params, clip_norm)``
    (which divides by global_norm + 1e-6 instead)."""

    def __init__(self, clip_norm):
        self.clip_norm = _number(clip_norm, "ClipGradByGlobalNorm", "clip_norm")
        if self.clip_norm <= 0:
            raise _kiln.Error("ClipGradByGlobalNorm: clip_norm must be > 0, got %r" % (clip_norm,))

    def _settings(self):
        return {"grad_clip_norm": self.clip_norm}

    def __repr__(self):
        return "ClipGradByGlobalNorm(clip_norm=%g)" % self.clip_norm


class ClipGradByValue(ClipGradBase):
    """Clamps every gradient element to [min, max]; ``min`` defaults to
    ``-max``. As ``torch.nn.utils.clip_grad_value_(params, max)``."""

    def __init__(self, max, min=None):  # noqa: A002 (Paddle's argument names)
        hi = _number(max, "ClipGradByValue", "max")
        lo = -hi if min is None else _number(min, "ClipGradByValue", "min")
        if not lo < hi:
            raise _kiln.Error("ClipGradByValue: min must be below max, got min %r, max %r" % (lo, hi))
        self.min, self.max = lo, hi

    def _settings(self):
        return {"grad_clip_min": self.min, "grad_clip_max": self.max}

    def __repr__(self):
        return "ClipGradByValue(max=%g, min=%g)" % (self.max, self.min)


def _clip_settings(grad_clip, who):
    """The optimizer settings of a grad_clip= argument."""
    if grad_clip is None:
        return {}
    if not isinstance(grad_clip, ClipGradBase):
        raise TypeError("%s: grad_clip must be kiln.nn.ClipGradByGlobalNorm or kiln.nn.ClipGradByValue, got %r"
                        % (who, grad_clip))
    return grad_clip._settings()


__all__ = ["ClipGradByGlobalNorm", "ClipGradByValue"]
