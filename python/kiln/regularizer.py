"""Weight-decay regularizers, as Paddle's ``paddle.regularizer``: pass one
(or a float, meaning ``L2Decay(float)``) as an optimizer's ``weight_decay=``.
The decay is applied inside each parameter's update op (its
``regularization_coeff``), so it fuses into the generated update kernel."""


class L2Decay:
    """Adds ``coeff * param`` to each gradient before the optimizer step
    (PyTorch's ``weight_decay`` of SGD, Adam)."""

    def __init__(self, coeff=0.0):
        self.coeff = float(coeff)

    def __repr__(self):
        return "L2Decay(coeff=%g)" % self.coeff


def _coeff(weight_decay, who):
    """The L2 coefficient of an optimizer's weight_decay= argument."""
    if weight_decay is None:
        return 0.0
    if isinstance(weight_decay, L2Decay):
        return weight_decay.coeff
    if isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool):
        return float(weight_decay)
    raise TypeError("%s: weight_decay must be a float or kiln.regularizer.L2Decay, got %r" % (who, weight_decay))
