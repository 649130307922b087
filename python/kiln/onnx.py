"""ONNX models in kiln: export a model from PyTorch once, then train it here.

    main, startup, inputs, outputs = kiln.onnx.load("resnet18.onnx")
    with kiln.program_guard(main, startup):
        label = kiln.data("label", [-1, 1], dtype="int64")
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(outputs[0], label))
        kiln.optimizer.SGD(0.01).minimize(loss)
    exe = kiln.Executor(use_jit=True)
    exe.run(startup)                      # the model's weights, as exported
    exe.run(main, feed={inputs[0].name: x, "label": y}, fetch_list=[loss])

The importer (C++, framework/onnx/, on Debian's libonnx) maps every node onto
kiln's ops and refuses, before anything runs, a model with a node it cannot
express: kiln.Error names the node, its op type and opset, and why.
docs/onnx.md lists what is supported.
"""

from . import _kiln
from . import unique_name
from .framework import Program, Variable


def load(path, input_shapes=None, input_values=None, trainable=None, fuse=True):
    """Imports the ONNX model at `path`.

    Returns (program, startup_program, inputs, outputs): the program, the
    startup program that fills its parameters with the model's initializers
    (a startup program: it never overwrites what the scope holds from
    another program), and the graph's inputs (to feed) and outputs as
    Variables of the program, in graph order. `input_shapes` ({ONNX name:
    dims}, -1 for a dim known only at run time) overrides the model's input
    dims; `input_values` ({ONNX name: ndarray}) binds inputs that kiln needs
    known at import (a Reshape's shape left as an input).

    ONNX does not say which initializers train: PyTorch exports buffers (a
    causal mask, a position table) as it exports parameters. `trainable`
    (names of initializers, e.g. [n for n, _ in model.named_parameters()])
    says it: the others are frozen, and a name that is no float initializer
    is an error. Without it, every float initializer is a parameter except
    those holding an inf or NaN (a -inf mask). BatchNormalization's running
    statistics are state updated in place in training mode.

    With `fuse` (the default) the exporter's decomposed LayerNorm
    (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div, then Mul and Add by [d]
    vectors) and erf GELU become kiln's layer_norm and gelu ops
    (decomposition_fusion_pass), before any backward is appended, so
    minimize() gives them their own grad ops and the JIT lowers them as in
    a native model; fuse=False keeps the program node for node.
    """
    shapes = {str(k): [int(d) for d in v] for k, v in (input_shapes or {}).items()}
    if isinstance(trainable, str):
        raise TypeError("trainable: expected a list of initializer names, got the string %r" % trainable)
    names = None if trainable is None else {str(n) for n in trainable}
    r = _kiln.onnx_import(str(path), shapes, dict(input_values or {}), names, bool(fuse))
    program, startup = Program(r["main"]), Program(r["startup"])
    unique_name.reserve(program._p.var_names())
    return (program, startup, [Variable(program, n) for n in r["inputs"]],
            [Variable(program, n) for n in r["outputs"]])
