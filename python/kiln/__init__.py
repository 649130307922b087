"""kiln: a training framework with a JIT compiler, from Python.

    import kiln
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        x = kiln.data("x", [-1, 784])
        label = kiln.data("label", [-1, 1], dtype="int64")
        logits = kiln.nn.fc(kiln.nn.fc(x, 128, act="relu"), 10)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, label))
        kiln.optimizer.Adam(0.001).minimize(loss)
    exe = kiln.Executor(use_jit=True)
    exe.run(startup)
    loss_value, = exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss])

docs/python.md describes the API.
"""

from ._kiln import Error, get_flags, set_flags, flags, version as __version__  # noqa: F401
from .framework import (Program, Variable, program_guard, data, default_main_program,  # noqa: F401
                        default_startup_program, create_parameter, create_persistable)
from . import unique_name  # noqa: F401
from .backward import append_backward, gradients  # noqa: F401
from .executor import Executor, Scope, global_scope, jit_stats  # noqa: F401
from .io import (save_program, load_program, dump, save, load, save_inference_model,  # noqa: F401
                 load_inference_model)
from .history import History  # noqa: F401
from . import ops, nn, optimizer, regularizer, datasets, distributed, amp, onnx  # noqa: F401
