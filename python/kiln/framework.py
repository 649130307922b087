"""Programs and variables, in the style of Paddle's static graph.

A ``Program`` is a list of ops over named variables. Layer functions
(``kiln.nn``) append ops to the *default main program* and the initialisers
of their parameters to the *default startup program*; ``program_guard``
switches both for the code inside it.
"""

import contextlib
import functools
import math
import numbers
import operator

from . import _kiln
from . import unique_name as _names


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

    def __rtruediv__(self, other):
        if not _is_scalar(other):
            return NotImplemented
        return _ops().scale(_ops().pow(self, factor=-1.0), scale=float(other))

    def __pow__(self, other):
        if not _is_scalar(other):
            raise TypeError("x ** p: p must be a number (kiln has no elementwise pow of two variables)")
        return _ops().pow(self, factor=float(other))

    def __rpow__(self, other):
        if not _is_scalar(other) or other <= 0:
            raise TypeError("p ** x: p must be a positive number")
        return _ops().exp(_ops().scale(self, scale=math.log(float(other))))

    def __neg__(self):
        return _ops().scale(self, scale=-1.0)

    def __matmul__(self, other):
        return _ops().matmul(self, other)

    # Comparisons return bool masks (less_than ...); == and != stay Python's
    # identity, so Variables remain usable as dict keys (feeds).
    def __lt__(self, other):
        return _compare("less_than", self, other)

    def __le__(self, other):
        return _compare("less_equal", self, other)

    def __gt__(self, other):
        return _compare("greater_than", self, other)

    def __ge__(self, other):
        return _compare("greater_equal", self, other)

    __hash__ = object.__hash__

    def __getitem__(self, index):
        """x[i], x[a:b], x[..., i]: the `slice` op (step 1); an int index drops its dim."""
        return _slice(self, index)


def _ops():
    from . import ops
    return ops


def _is_scalar(v):
    """A Python or numpy number (numpy registers its scalars as numbers.Real), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _scalar(v, default=0.0):
    return float(v) if _is_scalar(v) else default


# A number compared with an integer var: the same test against an integer
# (x < 1.5 is x < 2, x <= 1.5 is x <= 1), since the constant takes x's dtype.
_INT_BOUND = {"less_than": math.ceil, "greater_equal": math.ceil, "less_equal": math.floor,
              "greater_than": math.floor}


def _compare(op_type, x, other):
    if _is_scalar(other):
        dtype = x.dtype
        if dtype == "bool":
            raise _kiln.Error("comparing the bool var %s with a number: cast it first "
                              "(kiln.nn.cast(%s, 'float32'))" % (x.name, x.name))
        if dtype in ("int64", "int32"):
            value = repr(int(_INT_BOUND[op_type](other)))
        else:
            value = repr(float(other))  # full precision (str_value), not a float32 attribute
        other = _ops().fill_constant(shape=[1], str_value=value, dtype=DTYPE_CODES[dtype])
    return getattr(_ops(), op_type)(x, other)


# proto DataType codes of numpy's dtype names (attributes such as cast's).
DTYPE_CODES = {"float32": 0, "int64": 1, "int32": 2, "float64": 3, "bool": 4}
_END = 2 ** 62  # an end past any dim (the slice op clamps it)


def _slice(x, index):
    if not isinstance(index, tuple):
        index = (index,)
    rank = len(x.shape)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("x[...]: at most one Ellipsis")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (rank - len(index) + 1) + index[at + 1:]
    if len(index) > rank:
        raise IndexError("x[...]: %d indices for %s of rank %d" % (len(index), x.name, rank))
    axes, starts, ends, drop = [], [], [], []
    for axis, i in enumerate(index):
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise IndexError("x[a:b:step]: kiln slices with step 1 only, got step %r" % (i.step,))
            if i.start is None and i.stop is None:
                continue
            axes.append(axis)
            starts.append(0 if i.start is None else int(i.start))
            ends.append(_END if i.stop is None else int(i.stop))
        elif _is_index(i):
            i = operator.index(i)
            d = x.shape[axis]
            if d >= 0 and not -d <= i < d:
                raise IndexError("x[...]: index %d is out of range for dim %d (%d) of %s" % (i, axis, d, x.name))
            axes.append(axis)
            starts.append(i)
            ends.append(i + 1 if i != -1 else _END)
            drop.append(axis)
        else:
            raise IndexError("x[...]: kiln indexes with ints, slices and ... only, got %r" % (i,))
    if not axes:
        return x
    return _ops().slice(x, axes=axes, starts=starts, ends=ends, decrease_axis=drop)


def _is_index(i):
    if isinstance(i, bool):
        return False
    try:
        operator.index(i)
        return True
    except TypeError:
        return False


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
    def is_startup(self):
        """A startup program never overwrites what the scope holds from
        another program or from outside (it keeps it and warns). Programs
        used as startup programs (program_guard's second argument, the
        default startup program) are marked; set it on one you loaded."""
        return self._p.is_startup

    @is_startup.setter
    def is_startup(self, on):
        self._p.is_startup = bool(on)

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
        """A copy. With for_test, the forward part only (as Paddle's): the
        backward, optimizer and learning-rate ops are dropped wherever
        clone is called, and dropout and batch_norm run in inference mode
        (is_test). Evaluating a test clone never changes a parameter."""
        return Program(self._p.clone(for_test))

    def validate(self):
        """Checks every op against its registry entry and shapes; raises
        kiln.Error naming the op otherwise."""
        self._p.validate()


_main = Program()
_startup = Program()
_startup.is_startup = True


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
        startup_program.is_startup = True
        _startup = startup_program
    try:
        yield
    finally:
        _main, _startup = saved


def dtype_name(dtype):
    """numpy's name of a dtype given as a string, a numpy type or a dtype."""
    if isinstance(dtype, str):
        return dtype
    try:
        import numpy
        return numpy.dtype(dtype).name
    except TypeError:
        raise _kiln.Error("unknown dtype %r: expected float32, float64, int64, int32 or bool" % (dtype,))


def data(name, shape, dtype="float32", lod_level=0):
    """Declares a fed input of the default main program; -1 in `shape` is a
    dim known only when data is fed (the batch). `dtype` is a name
    ("int64") or a numpy dtype (np.int64)."""
    if lod_level != 0:
        raise _kiln.Error("data '%s': kiln has no LoD tensors (lod_level must be 0)" % name)
    shape = [int(d) for d in shape]
    _main._p.declare_data(name, shape, dtype_name(dtype), True)
    return Variable(_main, name)


def fresh_name(program, key):
    """unique_name.generate(key), past the names `program` already declares
    (a loaded program, or names made again under unique_name.guard())."""
    while True:
        name = _names.generate(key)
        if not program._p.declares_prefix(name):
            return name


def fresh_state_name(programs, key):
    """A name for optimizer state (the learning rate) that no guard reuses,
    that none of `programs` declares and the global scope does not hold."""
    from .executor import global_scope
    while True:
        name = _names.generate_unshared(key)
        if not any(p._p.declares_prefix(name) for p in programs) and global_scope().dims(name) is None:
            return name


def _check_scope(name, shape, dtype):
    """A persistable name the global scope already holds (another program
    made it, or it was loaded) must keep its dims: sharing a name shares
    the var."""
    from .executor import global_scope
    held = global_scope().dims(name)
    if held is not None and list(held) != shape:
        raise _kiln.Error("'%s' %s%s clashes with '%s' of dims %s that the global scope holds (another program "
                          "made it, or it was loaded): pick another name=, or erase it first with "
                          "kiln.global_scope().erase('%s')" % (name, dtype, shape, name, list(held), name))


def create_parameter(name, shape, init="xavier_uniform", **init_args):
    """A trainable parameter of the default main program, initialised by the
    default startup program: init is constant(value), xavier_uniform(fan_in,
    fan_out), he_uniform(fan_in) or uniform(limit). A name the global scope
    holds with other dims is an error naming both."""
    shape = [int(d) for d in shape]
    _check_scope(name, shape, "float32")
    _main._p.create_parameter(_startup._p, name, shape, init, init_args)
    return Variable(_main, name)


def create_persistable(name, shape, value=0.0, dtype="float32"):
    """A persistable, non-trainable var (running statistics, RNG state),
    filled with `value` by the default startup program."""
    shape = [int(d) for d in shape]
    dtype = dtype_name(dtype)
    _check_scope(name, shape, dtype)
    _main._p.create_persistable(_startup._p, name, shape, float(value), dtype)
    return Variable(_main, name)


def atomic(fn):
    """A layer that raises leaves the default programs and the name counter
    exactly as they were: nothing of a half-built layer stays behind."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        main, startup = _main, _startup
        marks = (main._p.mark(), startup._p.mark(), _names._snapshot())
        try:
            return fn(*args, **kwargs)
        except BaseException:
            main._p.rollback(*marks[0])
            startup._p.rollback(*marks[1])
            _names._restore(marks[2])
            raise
    return wrapper
