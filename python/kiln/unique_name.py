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
    a string makes a fresh one whose names start with it)."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)


def _snapshot():
    """The current generator and its counts, for a layer that must leave no trace."""
    return _generator, dict(_generator.ids)


def _restore(snapshot):
    global _generator
    _generator, ids = snapshot
    _generator.ids = ids
