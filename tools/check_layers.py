#!/usr/bin/python3
"""Checks that kiln's C++ sources include only what their layer may.

    /usr/bin/python3 tools/check_layers.py [ROOT]     # ROOT: the checkout (default: this script's)
    /usr/bin/python3 tools/check_layers.py --self_test

Reads every `#include "..."` of the .cc and .h files under the layered
folders and checks it against LAYERS below: a file may include files of its
own layer and of the layers its layer depends on, directly or through other
layers. An include whose first path component is not one of kiln's folders
(oneDNN's "dnnl.hpp", ...) is not checked, and neither are the files of
tools/, tests/, python/ and examples/, which may include anything; a layered
file that includes one of those is an error. A source file in a layered
folder that no layer claims is an error too, so a new file is placed on
purpose. The headers in EDGE_ONLY may be included only where that table
says, in any folder (the process's JIT: only the command line and the
Python package). Exits 1 listing every include that goes the wrong way.

--self_test runs the check on small trees written to a temporary directory:
one that is layered correctly must pass, and each upward include must fail.
"""

import argparse
import os
import re
import sys
import tempfile

# (layer, path prefixes, the layers it may include). The longest matching
# prefix names a file's layer. The order is the intended one, lowest first.
LAYERS = [
    # Programs, ops, reference and oneDNN kernels, the executor, ir::Graph.
    ("framework", ["framework/"], []),
    # runtime::Program, the runner, memory planning, the profiler.
    ("runtime", ["runtime/"], ["framework"]),
    # The graph passes; they hand clusters to the compiler through
    # framework/jit_subgraph.h, never through compiler/.
    ("passes", ["passes/"], ["framework"]),
    # Xbyak generators and the ISA enum.
    ("compiler/codegen", ["compiler/codegen/"], ["runtime", "framework"]),
    # Kernel families: none includes another (compiler/kernels/README.md).
    ("compiler/kernels/onednn", ["compiler/kernels/onednn/"], ["compiler/codegen"]),
    ("compiler/kernels/attention", ["compiler/kernels/attention/"], ["compiler/codegen"]),
    ("compiler/kernels", ["compiler/kernels/"], ["compiler/codegen"]),
    # What a compile produces: the lowering steps build it.
    # Symbolic dims: polynomials in the symbols, fitted from values.
    ("compiler/sym_dim", ["compiler/dynamic/sym_dim."], ["framework"]),
    ("compiler/compiled_object", ["compiler/compiled_object."], ["compiler/codegen", "compiler/sym_dim"]),
    ("compiler/lowering", ["compiler/lowering/"],
     ["compiler/kernels/onednn", "compiler/kernels/attention", "compiler/kernels", "compiler/compiled_object"]),
    # Lower() and the cache in front of it.
    ("compiler/driver", ["compiler/lower.", "compiler/compile_cache.", "compiler/dynamic/"], ["compiler/lowering"]),
    ("compiler/dump", ["compiler/dump/"], ["compiler/driver"]),
    ("launch_op", ["launch_op/"], ["compiler/driver"]),
]

# Folders whose files may include anything; no layered file may include them.
FREE = ["tools/", "tests/", "python/", "examples/"]

# (file, include, why) pairs allowed although they go against LAYERS.
EXCEPTIONS = []

# (header, path prefixes of the only files that may include it, why).
EDGE_ONLY = [
    ("launch_op/default_jit.h", ["tools/", "python/", "launch_op/default_jit."],
     "the process's JIT belongs to the command line and the Python package; tests and library code "
     "take a JitRuntime& (a test builds its own: tests/test_jit.h)"),
]

SOURCE_EXTENSIONS = (".cc", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer whose longest prefix matches path, or None."""
    best = None
    for name, prefixes, _ in LAYERS:
        for p in prefixes:
            if path.startswith(p) and (best is None or len(p) > len(best[1])):
                best = (name, p)
    return best[0] if best else None


def allowed_layers():
    """Each layer's own name plus every layer it reaches through LAYERS."""
    deps = {name: set(d) for name, _, d in LAYERS}
    out = {}
    for name in deps:
        seen, todo = {name}, list(deps[name])
        while todo:
            d = todo.pop()
            if d not in seen:
                seen.add(d)
                todo += deps[d]
        out[name] = seen
    return out


def layered_folders():
    return {p.split("/")[0] for _, prefixes, _ in LAYERS for p in prefixes}


def project_folders():
    return layered_folders() | {f.rstrip("/") for f in FREE}


def source_files(root, tops):
    """(path from root, text) of each source file below the folders tops, in a fixed order."""
    for top in tops:
        for dirpath, dirnames, names in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for n in sorted(names):
                if not n.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    yield path, f.read()


def includes(text):
    """(included path, line) of each `#include "..."` of text."""
    for m in INCLUDE.finditer(text):
        yield m.group(1), text.count("\n", 0, m.start()) + 1


def check(root, counts=None):
    """The list of error lines for the tree at root; counts gets the files and includes checked."""
    allowed = allowed_layers()
    tops = project_folders()
    exceptions = {(f, i) for f, i, _ in EXCEPTIONS}
    errors = []
    for path, text in source_files(root, sorted(layered_folders())):
        layer = layer_of(path)
        if layer is None:
            errors.append(f"{path}: in no layer of tools/check_layers.py's LAYERS")
            continue
        if counts is not None:
            counts[0] += 1
        for inc, line in includes(text):
            if inc.split("/")[0] not in tops or (path, inc) in exceptions:
                continue
            if counts is not None:
                counts[1] += 1
            target = layer_of(inc)
            if target is None:
                errors.append(f"{path}:{line}: includes \"{inc}\", which no layer may include")
            elif target not in allowed[layer]:
                errors.append(f"{path}:{line}: {layer} includes \"{inc}\" of {target}, above it")
    return errors + check_edge_only(root, sorted(tops))


def check_edge_only(root, tops):
    """Error lines for the includes of EDGE_ONLY headers from files their table does not name."""
    errors = []
    for path, text in source_files(root, tops):
        for inc, line in includes(text):
            for header, users, why in EDGE_ONLY:
                if inc == header and not any(path.startswith(u) for u in users):
                    errors.append(f"{path}:{line}: includes \"{header}\": {why}")
    return errors


def self_test():
    """0 when a layered tree passes and each upward include fails."""
    good = {
        "framework/op.h": "",
        "runtime/runner.h": '#include "framework/op.h"\n',
        "passes/pass.h": '#include "framework/op.h"\n',
        "compiler/codegen/isa.h": '#include "runtime/runner.h"\n',
        "compiler/kernels/copy.h": '#include "compiler/codegen/isa.h"\n#include "dnnl.hpp"\n',
        "compiler/compiled_object.h": '#include "compiler/codegen/isa.h"\n',
        "compiler/lowering/unit.h": '#include "compiler/kernels/copy.h"\n#include "compiler/compiled_object.h"\n',
        "compiler/lower.h": '#include "compiler/lowering/unit.h"\n',
        "compiler/dump/jit_dump.h": '#include "compiler/lower.h"\n',
        "launch_op/launch.h": '#include "compiler/lower.h"\n',
        "launch_op/default_jit.cc": '#include "launch_op/default_jit.h"\n',
        "tools/main.cc": '#include "launch_op/launch.h"\n#include "launch_op/default_jit.h"\n',
        "tests/launch_test.cc": '#include "launch_op/launch.h"\n',
    }
    bad = {
        "upward: framework includes the compiler": ("framework/op.h", '#include "compiler/lower.h"\n'),
        "sideways: passes include runtime": ("passes/pass.h", '#include "runtime/runner.h"\n'),
        "upward: a kernel includes a lowering step": ("compiler/kernels/copy.h",
                                                       '#include "compiler/lowering/unit.h"\n'),
        "upward: lowering includes the driver": ("compiler/lowering/unit.h", '#include "compiler/lower.h"\n'),
        "a layered file includes tools/": ("runtime/runner.h", '#include "tools/main.h"\n'),
        "a file in no layer": ("compiler/stray.h", ""),
        "a test uses the process's JIT": ("tests/launch_test.cc", '#include "launch_op/default_jit.h"\n'),
        "library code uses the process's JIT": ("launch_op/launch.h", '#include "launch_op/default_jit.h"\n'),
    }

    def run(files):
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w") as f:
                    f.write(text)
            return check(root)

    failures = 0
    errors = run(good)
    if errors:
        print("self test: the layered tree failed:\n  " + "\n  ".join(errors))
        failures += 1
    for what, (path, text) in bad.items():
        errors = run(dict(good, **{path: text}))
        if not errors:
            print(f"self test: {what} ({path}) passed the check")
            failures += 1
    if failures:
        return 1
    print(f"self test: the layered tree passes, {len(bad)} broken trees fail")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--self_test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    counts = [0, 0]
    errors = check(args.root, counts)
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} includes against the layers (tools/check_layers.py)")
        return 1
    print(f"{counts[0]} files, {counts[1]} includes of kiln's headers: all follow the {len(LAYERS)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
