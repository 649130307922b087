"""The executor: runs programs over a scope, numpy in and numpy out."""

from . import _kiln
from .framework import Program, Variable, default_main_program

Scope = _kiln.Scope
global_scope = _kiln.global_scope


def jit_stats():
    """What the JIT did in this process so far: compiles, cache hits,
    failed compiles, dynamic compiles and their instances (dynamic_compiles,
    instances, instance_ms, guard_failures; docs/jit.md "Dynamic shapes"),
    calls answered by the framework ops (fallback_calls:
    a cluster past --jit_recompile_limit, or denied), launches."""
    return _kiln.jit_stats()


class Executor:
    """Runs programs. ``use_jit=True`` compiles clusters of the program's ops
    (the JIT); the default follows FLAGS_use_jit (off unless set).

    ``run(main, feed={name: ndarray}, fetch_list=[var, ...])`` returns a list
    of numpy arrays. A program is transformed and prepared once per set of
    feeds and fetches and reused while it does not change.
    """

    def __init__(self, place=None, use_jit=None):
        self._e = _kiln.Executor(use_jit)

    @property
    def use_jit(self):
        return self._e.use_jit

    def run(self, program=None, feed=None, fetch_list=None, scope=None, return_numpy=True):
        program = program if program is not None else default_main_program()
        if not isinstance(program, Program):
            raise TypeError("Executor.run: program must be a kiln.Program")
        if not return_numpy:
            raise _kiln.Error("Executor.run: kiln returns numpy arrays only (return_numpy=True)")
        fetch = []
        for f in fetch_list or []:
            if isinstance(f, Variable):
                fetch.append(f.name)
            elif isinstance(f, str):
                fetch.append(f)
            else:
                raise TypeError("fetch_list: expected kiln Variables or names, got %r" % type(f).__name__)
        feed = {(k.name if isinstance(k, Variable) else k): v for k, v in (feed or {}).items()}
        return self._e.run(program._p, feed, fetch, scope if scope is not None else global_scope())

    def stats(self):
        """Counts of feeds and fetches that crossed without a copy (shared)
        and with one (copied), and of plans prepared and reused."""
        return self._e.stats()

    def close(self):
        pass
