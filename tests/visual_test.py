"""What kiln shows, checked in a real browser: kiln dump's index.html (MLP and
transformer), the training curves of kiln plot and the step trace of kiln
train --trace. Headless Chromium (Debian's chromium) loads the page without
console errors, its screenshots are not blank, and a cluster named in the
URL is the one the page selects; the trace follows the Chrome trace event
format. Skips the browser checks, with a message, when chromium is not
installed.

    /usr/bin/python3 tests/visual_test.py --kiln build/tools/kiln [--screenshots DIR]
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

KILN = None
SHOTS = None
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium's closed-network flags (the machine has no network).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def png_colours(path):
    """How many distinct byte values the image's decompressed rows hold: a
    blank page has one or two (and the row filter bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def chromium(url, *extra, size="1300,1600"):
    profile = tempfile.mkdtemp(prefix="kiln-chromium-")
    try:
        return subprocess.run([CHROMIUM, *FLAGS, "--user-data-dir=" + profile, "--window-size=" + size,
                               "--enable-logging=stderr", "--v=0", *extra, url],
                              capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(stderr):
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)]


class VisualTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kiln-visual-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_kiln(self, *args):
        r = subprocess.run([KILN, *args], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def screenshot(self, url, name, size="1300,1600"):
        path = os.path.join(self.dir, name)
        r = chromium(url, "--screenshot=" + path, size=size)
        self.assertTrue(os.path.exists(path), r.stderr[-2000:])
        self.assertEqual(console_errors(r.stderr), [])
        self.assertGreater(png_colours(path), 20, "%s looks blank" % name)
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            shutil.copy(path, os.path.join(SHOTS, name))
        return path

    def check_dump_page(self, model, clusters):
        out = os.path.join(self.dir, "dump_" + model)
        self.run_kiln("dump", "--model", model, "--out", out)
        page = os.path.join(out, "index.html")
        with open(page) as f:
            html = f.read()
        self.assertNotIn("http://", html.replace("http://www.w3.org", ""))  # nothing fetched
        for c in clusters:
            self.assertIn('<section class="cluster" id="%s">' % c, html)
        if shutil.which("dot"):
            self.assertIn('href="#c0"', html)  # the graph's cluster boxes link to their sections
        if not CHROMIUM:
            self.skipTest("chromium is not installed (apt-get install chromium): browser checks skipped")
        self.screenshot("file://" + page, "dump_%s.png" % model)
        self.screenshot("file://" + page + "?cluster=" + clusters[-1], "dump_%s_%s.png" % (model, clusters[-1]))
        # A click on a cluster's box follows its link: the page honours the fragment.
        dom = chromium("file://" + page + "#" + clusters[-1], "--dump-dom")
        self.assertIn('data-selected="%s"' % clusters[-1], dom.stdout)
        self.assertIn('class="cluster selected" id="%s"' % clusters[-1], dom.stdout)
        self.assertEqual(console_errors(dom.stderr), [])

    def test_dump_page_mlp(self):
        self.check_dump_page("mlp", ["c0"])  # the whole step is one cluster

    def test_dump_page_transformer(self):
        self.check_dump_page("transformer", ["c0", "c1"])

    def test_curves(self):
        runs = []
        for jit in ("false", "true"):
            h = os.path.join(self.dir, "jit_%s.jsonl" % jit)
            self.run_kiln("train", "--model", "mlp", "--epochs", "3", "--progress=false", "--use_jit=" + jit,
                          "--history", h)
            runs.append(h)
        svg = os.path.join(self.dir, "curves.svg")
        self.run_kiln("plot", *runs, "--out", svg)
        with open(svg) as f:
            text = f.read()
        self.assertEqual(text.count("<polyline"), 6)  # 3 charts x 2 runs
        self.assertIn("jit_true.jsonl", text)
        if not CHROMIUM:
            self.skipTest("chromium is not installed: the curves are not rendered")
        self.screenshot("file://" + svg, "curves.png", size="760,840")

    def test_trace_follows_the_chrome_trace_format(self):
        trace = os.path.join(self.dir, "trace.json")
        self.run_kiln("train", "--model", "transformer", "--epochs", "1", "--max_steps", "8", "--use_jit",
                      "--progress=false", "--trace", trace, "--trace_warmup", "0", "--trace_steps", "3")
        with open(trace) as f:
            doc = json.load(f)
        events = doc["traceEvents"]
        stacks = {}
        kinds = set()
        for e in events:
            for field in ("name", "ph", "pid", "tid"):
                self.assertIn(field, e)
            if e["ph"] == "M":
                continue
            self.assertIn(e["ph"], ("X", "B", "E"))
            self.assertIsInstance(e["ts"], (int, float))
            kinds.add(e.get("cat"))
            if e["ph"] == "X":
                self.assertGreaterEqual(e["dur"], 0)
            elif e["ph"] == "B":
                stacks.setdefault(e["tid"], []).append(e["name"])
            else:
                self.assertEqual(stacks[e["tid"]].pop(), e["name"])  # begin and end match
        self.assertTrue(all(not s for s in stacks.values()))
        self.assertEqual(kinds, {"op", "kernel", "compile"})  # compiles are in the window (no warm-up)
        launches = [e for e in events if e.get("name") == "jit_launch"]
        self.assertTrue(launches and "cluster" in launches[0]["args"] and "outputs" in launches[0]["args"])
        # Spans of one thread nest: a kernel sits inside its launch.
        x = sorted((e for e in events if e["ph"] == "X" and e["tid"] == 1), key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in x:
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            if open_ends:
                self.assertLessEqual(e["ts"] + e["dur"], open_ends[-1] + 1e-3, e["name"])
            open_ends.append(e["ts"] + e["dur"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--screenshots", help="copy the screenshots here (docs/images)")
    a, rest = parser.parse_known_args()
    KILN = os.path.abspath(a.kiln)
    SHOTS = a.screenshots
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
