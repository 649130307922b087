"""Names that are unique in the whole process (Paddle's ``unique_name``).

Every name kiln generates (layers, their parameters, temporaries, learning
rates) comes from one process-wide generator, so two programs built in one
process never share a var by accident: they share the global scope, and a
second model named like the first would overwrite its trained weights.

    kiln.unique_name.generate("fc")   # "fc_0", then "fc_1", ...
    with kiln.unique_name.guard():    # a fresh namespace: "fc_0" again
        ...

``guard`` is how two programs share parameters on purpose (a test program
built again with the same layers): inside it the names start over, so the
same layers get the same parameter names, and ``create_parameter`` checks
that a shared name keeps its shape.
"""

import contextlib
import re


class UniqueNameGenerator:
    """Counts per key: ``gen("fc")`` is "<prefix>fc_0", then "<prefix>fc_1"."""

    def __init__(self, prefix=None):
        self.ids = {}
        self.prefix = prefix or ""

    def __call__(self, key):
        n = self.ids.get(key, 0)
        self.ids[key] = n + 1
        return "%s%s_%d" % (self.prefix, key, n)


_generator = UniqueNameGenerator()


def generate(key):
    """The next "<key>_<n>" of the current generator."""
    return _generator(key)


def switch(new_generator=None):
    """Makes `new_generator` (a fresh one when None) current; returns the old one."""
    global _generator
    old = _generator
    _generator = new_generator if new_generator is not None else UniqueNameGenerator()
    return old


@contextlib.contextmanager
def guard(new_generator=None):
    """Names inside the block come from a fresh generator (or `new_generator`;
    a string makes a fresh one whose names start with it). After the block,
    the outer generator counts on past the names made in it: a program built
    later outside any guard never takes them by accident."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        inner = switch(old)
        if inner.prefix == old.prefix:
            for key, n in inner.ids.items():
                old.ids[key] = max(old.ids.get(key, 0), n)


# Names that must never repeat, guard or not: optimizer state such as the
# learning rate. Two programs built alike under guards share their
# parameters on purpose, never their learning rates.
_unshared = UniqueNameGenerator()


def generate_unshared(key):
    """The next "<key>_<n>" of a counter that guard() does not reset."""
    return _unshared(key)


_NUMBERED = re.compile(r"^(.*)_(\d+)$")


def reserve(names):
    """Counts on past "<key>_<n>" names (the part before the first '.'), such
    as a loaded program's: later layers never take them."""
    for name in names:
        m = _NUMBERED.match(name.split(".", 1)[0])
        if m is None:
            continue
        key, n = m.group(1), int(m.group(2))
        for gen in (_generator, _unshared):
            gen.ids[key] = max(gen.ids.get(key, 0), n + 1)


def _snapshot():
    """The current generator and its counts, for a layer that must leave no trace."""
    return _generator, dict(_generator.ids)


def _restore(snapshot):
    global _generator
    _generator, ids = snapshot
    _generator.ids = ids
