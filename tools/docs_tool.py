#!/usr/bin/python3
"""Keeps README.md and docs/*.md true.

    /usr/bin/python3 tools/docs_tool.py commands [--build DIR]
        runs every command the docs show in a ```console block (lines that
        start with "$ "), file by file, in order, each file in a fresh
        temporary directory; fails naming the file and line of the first
        command that fails.
    /usr/bin/python3 tools/docs_tool.py gen [--check] [--build DIR]
        regenerates every output excerpt: the fenced block between
        "<!-- gen: COMMAND -->" and "<!-- /gen -->" becomes COMMAND's output
        (timings masked; "<!-- gen exact: COMMAND -->" keeps them, for
        deterministic output such as the cost model's); with --check it
        writes nothing and fails when a committed excerpt differs
        (bash tools/gen_docs.sh runs this).

The excerpts show what kiln prints on an AVX-512 CPU (EXCERPTS_CPU): oneDNN's
implementation names, the generated code and the layouts it keeps depend on
the CPU. On a CPU of another class `gen --check` still runs every excerpt's
command (each must succeed) but compares none, and says so; `gen` refuses to
rewrite them there.

Markers, on the line before a ```console block:
    <!-- docs-test: EXTRA -->        append EXTRA to each command of the block
                                     (to shorten long runs: --max_steps 20)
    <!-- docs-test: skip REASON -->  do not run the block (the set-up itself)

The temporary directory holds symlinks to the build directory (as build/)
and to examples/ and tools/, so the commands run as written from the
repository root. Paths under /tmp/kiln- in commands are moved into it.
"""

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))

MASKS = [
    (re.compile(r"\b\d+(\.\d+)? ms\b"), "# ms"),
    (re.compile(r"\b\d+(\.\d+)? samples/s\b"), "# samples/s"),
    (re.compile(r"^(\| c\d+ \|.*\| )[0-9.]+( \|)$", re.M), r"\1#\2"),  # index.md's compile ms column
]


# The class of CPU the committed excerpts were generated on (cpu_class()).
EXCERPTS_CPU = "avx512"


def cpu_class():
    """"avx512" on a CPU with AVX-512 F and BW (oneDNN's avx512_core), else "avx2"."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "avx512" if "avx512f" in flags and "avx512bw" in flags else "avx2"


def mask(text):
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return text


class Sandbox:
    """A fresh directory where the docs' commands run as from the repository root."""

    def __init__(self, build):
        self.dir = tempfile.mkdtemp(prefix="kiln-docs-")
        os.symlink(os.path.abspath(build), os.path.join(self.dir, "build"))
        for d in ("examples", "tools"):
            os.symlink(os.path.join(ROOT, d), os.path.join(self.dir, d))
        # The docs show the installed `kiln` and Debian's `python3` (as on a
        # fresh Debian machine, whatever python3 comes first on PATH here):
        # both first on PATH, kiln being the build's, with the build's Python
        # package on PYTHONPATH (run), whatever is installed on the machine.
        self.bin = os.path.join(self.dir, "bin")
        os.mkdir(self.bin)
        os.symlink(os.path.join(os.path.abspath(build), "tools", "kiln"), os.path.join(self.bin, "kiln"))
        os.symlink("/usr/bin/python3", os.path.join(self.bin, "python3"))

    def run(self, command, timeout=900):
        command = command.replace("/tmp/kiln-", self.dir + "/tmp-kiln-")
        # mpirun refuses root unless told; the docs' commands are written for users.
        path = self.bin + os.pathsep + os.environ.get("PATH", "")
        env = dict(os.environ, FLAGS_progress="false", PATH=path, PYTHONPATH=os.path.join(self.dir, "build", "python"),
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        return subprocess.run(["bash", "-c", "set -o pipefail; " + command], cwd=self.dir, env=env,
                              capture_output=True, text=True, timeout=timeout)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def console_blocks(text):
    """(line number, marker or None, [commands]) of each ```console block."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        marker = None
        if i > 0:
            m = re.match(r"\s*<!-- docs-test: (.*?) -->\s*$", lines[i - 1])
            marker = m.group(1) if m else None
        start, commands, current = i + 1, [], None
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            line = lines[i].strip()
            if current is not None:
                current[1] += " " + line.rstrip("\\").strip()
                if not line.endswith("\\"):
                    commands.append(tuple(current))
                    current = None
            elif line.startswith("$ "):
                body = line[2:]
                if body.endswith("\\"):
                    current = [i + 1, body.rstrip("\\").strip()]
                else:
                    commands.append((i + 1, body))
            i += 1
        out.append((start, marker, commands))
        i += 1
    return out


def run_commands(build):
    failures, ran, skipped = [], 0, []
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc)).read()
        blocks = console_blocks(text)
        if not blocks:
            continue
        box = Sandbox(build)
        try:
            for start, marker, commands in blocks:
                if marker and marker.startswith("skip"):
                    skipped.append("%s:%d (%s)" % (doc, start, marker))
                    continue
                # One shell per block, so that a variable set by one line
                # reaches the next; a marker before each line names the one
                # that failed.
                script = "set -e\n" + "".join("echo '@@docs-line %d' >&2\n%s%s\n" % (
                    line, command, " " + marker if marker else "") for line, command in commands)
                r = box.run(script)
                ran += len(commands)
                if r.returncode != 0:
                    lines = re.findall(r"@@docs-line (\d+)", r.stderr)
                    line = int(lines[-1]) if lines else start
                    command = dict(commands).get(line, "")
                    failures.append("%s:%d: `%s` exited %d\n%s%s" % (doc, line, command, r.returncode,
                                                                    r.stdout[-2000:], r.stderr[-2000:]))
        finally:
            box.close()
    print("ran %d commands from %d files; skipped %s" % (ran, len(DOCS), ", ".join(skipped) or "none"))
    for f in failures:
        print("FAILED " + f)
    return 1 if failures else 0


# An excerpt: the marker, a fence, the output, the closing fence, the end
# marker, all at one indentation (inside a list item, say).
# `<!-- gen: CMD -->` masks timings; `<!-- gen exact: CMD -->` is for commands
# whose output is deterministic, such as a model's predictions.
GEN = re.compile(r"^([ \t]*)(<!-- gen( exact)?: (.*?) -->\n[ \t]*```[a-z]*\n)(.*?)([ \t]*```\n[ \t]*<!-- /gen -->)",
                 re.S | re.M)


def generate(build, check):
    stale = 0
    same_cpu = cpu_class() == EXCERPTS_CPU
    if not same_cpu and not check:
        raise SystemExit("the excerpts show an %s CPU's kernels and this CPU is %s: regenerate them on an %s CPU"
                         % (EXCERPTS_CPU, cpu_class(), EXCERPTS_CPU))
    for doc in DOCS:
        path = os.path.join(ROOT, doc)
        text = open(path).read()
        if "<!-- gen: " not in text and "<!-- gen exact: " not in text:
            continue
        box = Sandbox(build)
        try:
            def render(m):
                indent, exact, command = m.group(1), m.group(3), m.group(4)
                r = box.run(command)
                if r.returncode != 0:
                    raise SystemExit("%s: `%s` failed:\n%s%s" % (doc, command, r.stdout, r.stderr))
                shown = r.stdout if exact else mask(r.stdout)
                out = "".join(indent + line + "\n" for line in shown.splitlines())
                return indent + m.group(2) + out + m.group(6)
            new = GEN.sub(render, text)
        finally:
            box.close()
        if new == text or not same_cpu:
            continue
        stale += 1
        if check:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), doc, doc + " (generated)"))
        else:
            with open(path, "w") as f:
                f.write(new)
            print("regenerated " + doc)
    if not same_cpu:
        print("ran every excerpt's command; compared none: they show an %s CPU's kernels and this CPU is %s"
              % (EXCERPTS_CPU, cpu_class()))
    if check and stale:
        print("\n%d file(s) differ from what their commands print now: run `bash tools/gen_docs.sh`" % stale)
    return 1 if check and stale else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["commands", "gen"])
    p.add_argument("--check", action="store_true")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    return run_commands(a.build) if a.what == "commands" else generate(a.build, a.check)


if __name__ == "__main__":
    sys.exit(main())
