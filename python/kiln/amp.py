"""Mixed precision: matmuls in bf16 with f32 accumulation, everything else
(tensors, master weights, optimizer state, elementwise ops, the loss) in
f32. The same switch as `kiln train --amp bf16` (docs/jit.md, "Mixed
precision (bf16)"); it holds for the whole process, JIT on or off.

    with kiln.amp.bf16():
        loss_value, = exe.run(main, feed=feed, fetch_list=[loss])

A CPU without oneDNN bf16 matmuls (AVX512_CORE at least) refuses it with
kiln.Error; `kiln.amp.available()` asks first.
"""

from ._kiln import Error, get_flags, set_flags


def enable(dtype="bf16"):
    """Turns mixed precision on for everything run from now on."""
    set_flags({"amp": dtype})


def disable():
    """Back to f32 throughout."""
    set_flags({"amp": ""})


def enabled():
    """The mixed-precision dtype in force ("bf16"), or None."""
    return get_flags(["amp"])["amp"] or None


def available(dtype="bf16"):
    """Whether this CPU runs `dtype` matmuls (tries, then restores the flag)."""
    before = get_flags(["amp"])["amp"]
    try:
        set_flags({"amp": dtype})
    except Error:
        return False
    set_flags({"amp": before})
    return True


class bf16:
    """A `with` block that runs in bf16 and restores the previous setting."""

    def __enter__(self):
        self._before = get_flags(["amp"])["amp"]
        enable("bf16")
        return self

    def __exit__(self, *exc):
        set_flags({"amp": self._before})
        return False
