#!/usr/bin/python3
"""Reports C++ source files over a line limit and functions over a length limit.

    /usr/bin/python3 tools/check_code_size.py compiler passes [--max_file 450] [--max_function 80]
        [--exclude tests/some_test.cc ...]

Exits 1 when anything is over, listing each file and function with its length.
Functions are found with a small brace scanner (comments, strings and
character literals skipped): a `{` whose preceding declaration text ends in a
parameter list `)` (optionally followed by const, override, noexcept, a
trailing return type or a constructor's initialiser list) opens a function
body when it is not inside another function. Namespace, class, struct, enum
and union bodies are transparent. A function's length counts its lines from
the signature's first line to the closing brace.
"""

import argparse
import os
import re
import sys

SOURCE_EXTENSIONS = (".cc", ".h")
SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|enum|union)\b")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else)\b")


def strip_code(text):
    """The text with comments and string/char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line) of every function body outside other functions."""
    with open(path, encoding="utf-8", errors="replace") as f:
        code = strip_code(f.read())
    found = []
    stack = []  # "scope" or ("function", name, start line)
    decl_start = 0  # offset where the current declaration text begins
    line_of = [0] * (len(code) + 1)
    line = 1
    for k, ch in enumerate(code):
        line_of[k] = line
        if ch == "\n":
            line += 1
    line_of[len(code)] = line
    in_function = lambda: any(isinstance(s, tuple) for s in stack)
    for k, ch in enumerate(code):
        if ch == "{":
            if in_function():
                stack.append("block")
                continue
            decl = code[decl_start:k]
            flat = " ".join(decl.split())
            # Preprocessor lines are not declarations.
            flat = " ".join(l for l in decl.split("\n") if not l.strip().startswith("#"))
            flat = " ".join(flat.split())
            is_scope = SCOPE_KEYWORDS.search(flat.split("(")[0]) is not None
            looks_function = (")" in flat and not is_scope and "=" not in flat.split("(")[0]
                              and not CONTROL.match(flat))
            if looks_function:
                name_part = flat.split("(")[0].split()
                name = name_part[-1] if name_part else "?"
                first = decl_start + (len(decl) - len(decl.lstrip()))
                stack.append(("function", name, line_of[first]))
            else:
                stack.append("scope")
            decl_start = k + 1
        elif ch == "}":
            if stack:
                top = stack.pop()
                if isinstance(top, tuple):
                    found.append((top[1], top[2], line_of[k]))
            if not in_function():
                decl_start = k + 1
        elif ch == ";" and not in_function():
            decl_start = k + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="folders or files")
    parser.add_argument("--max_file", type=int, default=450)
    parser.add_argument("--max_function", type=int, default=80)
    parser.add_argument("--exclude", action="append", default=[],
                        help="a file not to check (a path ending, e.g. tests/some_test.cc); repeatable")
    args = parser.parse_args()
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(SOURCE_EXTENSIONS)]
        else:
            files.append(p)
    excluded = [f for f in files if any(os.path.normpath(f).endswith(os.path.normpath(e)) for e in args.exclude)]
    files = [f for f in files if f not in excluded]
    for path in excluded:
        print(f"{path}: not checked (--exclude)")
    over = 0
    for path in sorted(files):
        with open(path, encoding="utf-8", errors="replace") as f:
            n_lines = sum(1 for _ in f)
        if n_lines > args.max_file:
            print(f"{path}: {n_lines} lines (limit {args.max_file})")
            over += 1
        for name, first, last in functions(path):
            length = last - first + 1
            if length > args.max_function:
                print(f"{path}:{first}: function {name} is {length} lines (limit {args.max_function})")
                over += 1
    if over:
        print(f"{over} over the limits")
        return 1
    print(f"{len(files)} files within {args.max_file} lines, functions within {args.max_function}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
