"""Files: programs as protobuf text (what `kiln run --program` reads), kiln
dump's files for a program, checkpoints of parameters and optimizer state,
and inference models (what `kiln predict --model` runs); and DataLoader,
mini-batches made ahead of the step (data_loader.py)."""

from . import _kiln
from .data_loader import DataLoader  # noqa: F401
from . import unique_name
from .executor import global_scope
from .framework import Program, Variable


def _loaded(native):
    """A loaded program: later layers' names stay clear of its names."""
    unique_name.reserve(native.var_names())
    return Program(native)


def save_program(program, path):
    """Writes the program to `path`: protobuf text for .pbtxt/.txt, binary
    otherwise. `kiln run --program path` runs it."""
    program._p.save(str(path))


def load_program(path):
    """A program read from `path` and validated."""
    return _loaded(_kiln.Program.load(str(path)))


def dump(program, out_dir, feed_shapes, fetch_list=None):
    """Writes what `kiln dump` writes for `program` to out_dir: the program
    before and after the pass pipeline, its clusters compiled for the given
    feed shapes ({name: shape}), their IR, lowering steps, kernels, machine
    code and buffer plans, and index.md. Returns index.md's short form."""
    fetch = [f.name if isinstance(f, Variable) else f for f in (fetch_list or [])]
    shapes = {(k.name if isinstance(k, Variable) else k): [int(d) for d in v] for k, v in feed_shapes.items()}
    explain, _ = _kiln.dump(program._p, str(out_dir), shapes, fetch)
    return explain


def _scope(executor, scope):
    return scope if scope is not None else global_scope()


def save(executor, program, dirname, step=0, scope=None):
    """Saves every persistable var of `program` (parameters, optimizer state,
    running statistics, RNG state) as a checkpoint directory: one .npy per
    var and a manifest with sha256 sums, written atomically."""
    _kiln.save_checkpoint(str(dirname), program._p, _scope(executor, scope), int(step))


def load(executor, program, dirname, scope=None):
    """Loads a checkpoint saved by kiln.save (or kiln train --save_dir) into
    the scope after verifying every file and matching every var against the
    program; on any error the scope is unchanged. Returns the saved step."""
    return _kiln.load_checkpoint(str(dirname), program._p, _scope(executor, scope))


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program, scope=None):
    """Writes the ops of main_program that the targets need (dropout and
    batch_norm in inference mode, no labels, loss or optimizer) with the
    parameters they read. `kiln predict --model dirname` runs it."""
    feeds = [v.name if isinstance(v, Variable) else v for v in feeded_var_names]
    fetches = [v.name if isinstance(v, Variable) else v for v in target_vars]
    pruned = _kiln.save_inference_model(str(dirname), feeds, fetches, main_program._p, _scope(executor, scope))
    return Program(pruned)


def load_inference_model(dirname, executor, scope=None):
    """Reads a model saved by save_inference_model or kiln export and loads
    its parameters. Returns [program, feed names, fetch Variables]."""
    native, feeds, fetches = _kiln.load_inference_model(str(dirname), _scope(executor, scope))
    program = _loaded(native)
    return [program, feeds, [Variable(program, f) for f in fetches]]
