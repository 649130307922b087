"""Programs and variables, in the style of Paddle's static graph.

A ``Program`` is a list of ops over named variables. Layer functions
(``kiln.nn``) append ops to the *default main program* and the initialisers
of their parameters to the *default startup program*; ``program_guard``
switches both for the code inside it.
"""

import contextlib

from . import _kiln


class Variable:
    """A variable of a program: a name plus what the program declares for it.

    Variables are handles: the data lives in a scope while an executor runs
    the program. Arithmetic on them appends ops (``x + y`` is
    ``elementwise_add``, ``x * 2.0`` is ``scale``, ``x @ w`` is ``matmul``).
    """

    def __init__(self, program, name):
        self.program = program
        self.name = name

    def _info(self):
        info = self.program._p.var(self.name)
        if info is None:
            raise _kiln.Error("the program declares no variable '%s'" % self.name)
        return info

    @property
    def shape(self):
        return tuple(self._info()["shape"])

    @property
    def dtype(self):
        return self._info()["dtype"]

    @property
    def persistable(self):
        return self._info()["persistable"]

    @property
    def stop_gradient(self):
        return self._info()["stop_gradient"]

    @stop_gradient.setter
    def stop_gradient(self, value):
        self.program._p.set_stop_gradient(self.name, bool(value))

    def __repr__(self):
        return "Variable(%s: %s%s)" % (self.name, self.dtype, list(self.shape))

    # Arithmetic: elementwise ops with Paddle's broadcasting (Y into X).
    def __add__(self, other):
        return _binary("elementwise_add", self, other, scale=1.0, bias=_scalar(other))

    __radd__ = __add__

    def __sub__(self, other):
        return _binary("elementwise_sub", self, other, scale=1.0, bias=-_scalar(other))

    def __rsub__(self, other):
        return _ops().scale(self, scale=-1.0, bias=float(other))

    def __mul__(self, other):
        return _binary("elementwise_mul", self, other, scale=_scalar(other, 1.0), bias=0.0)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if _is_scalar(other):
            return _ops().scale(self, scale=1.0 / float(other))
        return _ops().elementwise_div(self, other)

    def __neg__(self):
        return _ops().scale(self, scale=-1.0)

    def __matmul__(self, other):
        return _ops().matmul(self, other)


def _ops():
    from . import ops
    return ops


def _is_scalar(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _scalar(v, default=0.0):
    return float(v) if _is_scalar(v) else default


def _binary(op_type, x, other, scale, bias):
    if _is_scalar(other):
        return _ops().scale(x, scale=scale, bias=bias)
    return getattr(_ops(), op_type)(x, other)


class Program:
    """A program: ops over variables, built by layer functions.

    ``random_seed`` seeds the initialisers of parameters created with this
    program as the startup program (default 1).
    """

    def __init__(self, _native=None):
        self._p = _native if _native is not None else _kiln.Program()

    @property
    def random_seed(self):
        return self._p.random_seed

    @random_seed.setter
    def random_seed(self, seed):
        self._p.random_seed = int(seed)

    def global_block(self):
        """Paddle's programs have blocks; kiln's have one. Returns self."""
        return self

    def var(self, name):
        """The variable `name`; kiln.Error when the program has none."""
        if self._p.var(name) is None:
            raise _kiln.Error("the program declares no variable '%s'" % name)
        return Variable(self, name)

    def has_var(self, name):
        return self._p.var(name) is not None

    def list_vars(self):
        return [Variable(self, n) for n in self._p.var_names()]

    def all_parameters(self):
        """Trainable parameters: persistable vars that take gradients."""
        return [v for v in self.list_vars() if v.persistable and not v.stop_gradient]

    @property
    def ops(self):
        """The ops, each a dict of type, inputs, outputs and attrs (as text)."""
        return self._p.ops()

    def num_ops(self):
        return self._p.num_ops()

    def to_string(self, throw_on_error=False, with_details=False):
        """The program as protobuf text: what save_program writes and
        `kiln run --program` reads."""
        return self._p.to_string()

    __str__ = to_string

    def clone(self, for_test=False):
        """A copy. With for_test, dropout and batch_norm run in inference
        mode (is_test); clone before minimize to get the forward only."""
        return Program(self._p.clone(for_test))

    def validate(self):
        """Checks every op against its registry entry and shapes; raises
        kiln.Error naming the op otherwise."""
        self._p.validate()


_main = Program()
_startup = Program()


def default_main_program():
    return _main


def default_startup_program():
    return _startup


@contextlib.contextmanager
def program_guard(main_program, startup_program=None):
    """Layers called inside the block append to these programs."""
    global _main, _startup
    if not isinstance(main_program, Program):
        raise TypeError("program_guard: main_program must be a kiln.Program")
    if startup_program is not None and not isinstance(startup_program, Program):
        raise TypeError("program_guard: startup_program must be a kiln.Program")
    saved = (_main, _startup)
    _main = main_program
    if startup_program is not None:
        _startup = startup_program
    try:
        yield
    finally:
        _main, _startup = saved


def data(name, shape, dtype="float32", lod_level=0):
    """Declares a fed input of the default main program; -1 in `shape` is a
    dim known only when data is fed (the batch)."""
    if lod_level != 0:
        raise _kiln.Error("data '%s': kiln has no LoD tensors (lod_level must be 0)" % name)
    shape = [int(d) for d in shape]
    _main._p.declare_data(name, shape, str(dtype), True)
    return Variable(_main, name)


def unique_name(prefix):
    """A name "<prefix>_<n>" that the default main program does not use."""
    return _main._p.unique_name(prefix)


def create_parameter(name, shape, init="xavier_uniform", **init_args):
    """A trainable parameter of the default main program, initialised by the
    default startup program: init is constant(value), xavier_uniform(fan_in,
    fan_out), he_uniform(fan_in) or uniform(limit)."""
    _main._p.create_parameter(_startup._p, name, [int(d) for d in shape], init, init_args)
    return Variable(_main, name)


def create_persistable(name, shape, value=0.0, dtype="float32"):
    """A persistable, non-trainable var (running statistics, RNG state),
    filled with `value` by the default startup program."""
    _main._p.create_persistable(_startup._p, name, [int(d) for d in shape], float(value), dtype)
    return Variable(_main, name)
