"""The kiln Python package: building programs, running them, feeds and
fetches without copies, errors, flags, files. Run by ctest (python_api)
with PYTHONPATH=build/python and KILN_BINARY set."""

import os
import subprocess
import tempfile
import threading
import unittest

import numpy as np

import kiln


def mlp(hidden=8, classes=3, features=4, optimizer=None):
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        x = kiln.data("x", [-1, features])
        label = kiln.data("label", [-1, 1], dtype="int64")
        logits = kiln.nn.fc(kiln.nn.fc(x, hidden, act="relu"), classes)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, label))
        (optimizer or kiln.optimizer.SGD(0.1)).minimize(loss)
    return main, startup, x, label, logits, loss


def batch(n=16, features=4, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, features)).astype("float32")
    ys = ((xs[:, :1] > 0).astype("int64") + (xs[:, 1:2] > 0)).astype("int64")
    return xs, ys


class ProgramTest(unittest.TestCase):
    def test_layers_declare_shapes_and_names(self):
        # Names count per process; a guard starts a fresh namespace.
        with kiln.unique_name.guard():
            main, startup, x, label, logits, loss = mlp()
        self.assertEqual(x.shape, (-1, 4))
        self.assertEqual(logits.shape, (-1, 3))
        self.assertEqual(loss.shape, (1,))
        self.assertEqual(label.dtype, "int64")
        params = sorted(p.name for p in main.all_parameters())
        self.assertEqual(params, ["fc_0.b", "fc_0.w", "fc_1.b", "fc_1.w"])
        # The startup program initialises every parameter and the learning rate.
        startup_vars = set(startup._p.var_names())
        self.assertTrue(set(params) <= startup_vars)
        self.assertTrue(any(v.startswith("learning_rate_") for v in startup_vars), startup_vars)
        self.assertIn("matmul_grad", main.to_string())
        main.validate()

    def test_every_registered_op_has_a_function(self):
        schemas = kiln._kiln.op_schemas()
        self.assertGreater(len(schemas), 40)
        for s in schemas:
            self.assertTrue(callable(getattr(kiln.ops, s["type"])), s["type"])
            self.assertTrue(callable(getattr(kiln.nn, s["type"])), s["type"])

    def test_generated_ops_and_arithmetic(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            a = kiln.data("a", [2, 3])
            b = kiln.data("b", [2, 3])
            y = kiln.ops.relu((a + b) * 2.0 - 1.0)
            z = kiln.ops.matmul(a, b, transpose_Y=True)
            w = (a / 4.0) @ kiln.ops.transpose2(b, axis=[1, 0])
            n = -a
        xa = np.arange(6, dtype="float32").reshape(2, 3) - 2
        xb = np.ones((2, 3), dtype="float32")
        out = kiln.Executor().run(main, feed={"a": xa, "b": xb}, fetch_list=[y, z, w, n])
        np.testing.assert_allclose(out[0], np.maximum((xa + xb) * 2 - 1, 0))
        np.testing.assert_allclose(out[1], xa @ xb.T)
        np.testing.assert_allclose(out[2], (xa / 4) @ xb.T)
        np.testing.assert_allclose(out[3], -xa)

    def test_a_rejected_op_leaves_the_program_unchanged(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            a = kiln.data("a", [2, 3])
            before = main.to_string()
            with self.assertRaises(kiln.Error) as e:
                kiln.ops.matmul(a, a)  # [2,3] x [2,3]
            self.assertIn("matmul", str(e.exception))
            self.assertEqual(main.to_string(), before)
            with self.assertRaises(kiln.Error) as e:
                kiln.ops.reshape2(a, shape="no")
            self.assertIn("shape", str(e.exception))
            with self.assertRaises(TypeError) as e:
                kiln.ops.relu(a, alpha=1.0)
            self.assertIn("alpha", str(e.exception))
            self.assertEqual(main.to_string(), before)

    def test_save_and_load_program_for_kiln_run(self):
        main, startup, x, label, logits, loss = mlp()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "main.pbtxt")
            kiln.save_program(main, path)
            again = kiln.load_program(path)
            self.assertEqual(again.to_string(), main.to_string())
            # kiln run executes it: feeds as .npy, the parameters fed too.
            scope = kiln.Scope()
            exe = kiln.Executor()
            exe.run(startup, scope=scope)
            xs, ys = batch()
            np.save(os.path.join(d, "x.npy"), xs)
            np.save(os.path.join(d, "label.npy"), ys)
            feeds = ["--feed", "x=%s/x.npy" % d, "--feed", "label=%s/label.npy" % d]
            for p in [v.name for v in main.list_vars() if v.persistable]:
                np.save(os.path.join(d, p + ".npy"), scope.get(p))
                feeds += ["--feed", "%s=%s/%s.npy" % (p, d, p)]
            out = os.path.join(d, "out")
            r = subprocess.run([os.environ["KILN_BINARY"], "run", "--program", path, "--fetch", loss.name,
                                "--out", out] + feeds, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            expected, = exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)
            np.testing.assert_allclose(np.load(os.path.join(out, loss.name + ".npy")), expected, rtol=1e-6)


class ExecutorTest(unittest.TestCase):
    def test_training_lowers_the_loss_and_jit_matches(self):
        losses = {}
        for jit in (False, True):
            main, startup, x, label, logits, loss = mlp(optimizer=kiln.optimizer.Momentum(0.1, 0.9))
            scope = kiln.Scope()
            exe = kiln.Executor(use_jit=jit)
            exe.run(startup, scope=scope)
            xs, ys = batch(64)
            losses[jit] = [exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)[0][0]
                           for _ in range(30)]
        self.assertLess(losses[False][-1], 0.6 * losses[False][0])
        np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)

    def test_feeds_and_fetches_cross_without_copies_where_they_can(self):
        main, startup, x, label, logits, loss = mlp()
        scope = kiln.Scope()
        exe = kiln.Executor()
        exe.run(startup, scope=scope)
        xs, ys = batch()
        w = main.all_parameters()[0]
        out = exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[logits, w.name], scope=scope)
        s = exe.stats()
        self.assertEqual((s["feeds_shared"], s["feeds_copied"]), (2, 0))
        # The logits are handed over (the array owns kiln's buffer); the
        # parameter, updated in place by the next step, is a copy.
        self.assertEqual((s["fetches_shared"], s["fetches_copied"]), (1, 1))
        self.assertFalse(out[0].flags.owndata)
        self.assertTrue(out[1].flags.owndata)
        w_before = out[1].copy()
        logits_before = out[0].copy()
        exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[logits], scope=scope)
        np.testing.assert_array_equal(out[1], w_before)        # not changed by the update
        np.testing.assert_array_equal(out[0], logits_before)  # not overwritten by the next run
        # A strided array is copied; so is one of another layout.
        exe.run(main, feed={"x": np.asfortranarray(xs), "label": ys}, fetch_list=[loss], scope=scope)
        self.assertEqual(exe.stats()["feeds_copied"], 1)
        # Plans are prepared once per program version and feed/fetch set.
        self.assertEqual(exe.stats()["plans_prepared"], 4)  # startup; logits+w; logits; loss
        exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)
        self.assertEqual(exe.stats()["plans_prepared"], 4)
        self.assertEqual(exe.stats()["plan_hits"], 1)

    def test_bad_feeds_and_fetches_are_named(self):
        main, startup, x, label, logits, loss = mlp()
        exe = kiln.Executor()
        exe.run(startup)
        xs, ys = batch()
        cases = [
            ({"x": xs.astype("float64"), "label": ys}, [loss], "feed 'x': expected dtype float32, got float64"),
            ({"x": xs[:, :3].copy(), "label": ys}, [loss], "feed 'x': expected dims [-1,4], got [16,3]"),
            ({"x": xs, "label": ys.astype("int32")}, [loss], "feed 'label': expected dtype int64"),
            ({"x": xs, "lable": ys}, [loss], "feed 'lable': the program declares no such variable"),
            ({"x": xs, "label": ys}, ["nope"], "fetch 'nope': the program declares no such variable"),
            ({"x": xs}, [loss], "feed 'label' is missing (the program reads it)"),
        ]
        for feed, fetch, message in cases:
            with self.assertRaises(kiln.Error) as e:
                exe.run(main, feed=feed, fetch_list=fetch)
            self.assertIn(message, str(e.exception))
            self.assertIsInstance(e.exception, RuntimeError)
        bad = ys.copy()
        bad[3] = 7
        with self.assertRaises(kiln.Error) as e:
            exe.run(main, feed={"x": xs, "label": bad}, fetch_list=[loss])
        self.assertIn("label 7 at row 3 is out of range [0, 3)", str(e.exception))

    def test_threads_share_an_executor(self):
        main, startup, x, label, logits, loss = mlp()
        exe = kiln.Executor(use_jit=True)
        scopes = [kiln.Scope() for _ in range(4)]
        for s in scopes:
            exe.run(startup, scope=s)
        xs, ys = batch(32)
        results = {}

        def train(i):
            results[i] = [exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scopes[i])[0][0]
                          for _ in range(20)]

        threads = [threading.Thread(target=train, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(1, 4):
            self.assertEqual(results[i], results[0])

    def test_feeds_from_lists_are_converted(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            a = kiln.data("a", [-1, 2])
            y = kiln.ops.scale(a, scale=3.0)
        out, = kiln.Executor().run(main, feed={"a": [[1, 2], [3, 4]]}, fetch_list=[y])
        np.testing.assert_array_equal(out, [[3, 6], [9, 12]])
        self.assertEqual(out.dtype, np.float32)


class FlagsTest(unittest.TestCase):
    def test_every_flag_reads_and_writes(self):
        for f in kiln.flags():
            name = f["name"]
            value = kiln.get_flags(["FLAGS_" + name])["FLAGS_" + name]
            self.assertEqual(value, f["value"], name)
            kiln.set_flags({name: value})  # every flag takes its own value back
            self.assertEqual(kiln.get_flags(name)[name], value)

    def test_bad_flags_change_nothing(self):
        with self.assertRaises(kiln.Error) as e:
            kiln.set_flags({"use_jitt": True})
        self.assertIn("unknown flag 'use_jitt'", str(e.exception))
        with self.assertRaises(kiln.Error):
            kiln.set_flags({"jit_min_cluster_size": "two"})
        with self.assertRaises(kiln.Error) as e:
            kiln.set_flags({"check_nan_inf": True, "jit_isa": "sse2"})
        self.assertIn("jit_isa", str(e.exception))
        self.assertFalse(kiln.get_flags("check_nan_inf")["check_nan_inf"])

    def test_amp_flag_takes_bf16_only(self):
        try:
            kiln.set_flags({"amp": "bf16"})
        except kiln.Error as e:  # a CPU without oneDNN bf16 matmuls: refused, flag unchanged
            self.assertIn("no usable bf16 matmul", str(e))
            self.assertEqual(kiln.get_flags("amp")["amp"], "")
            self.skipTest(str(e))
        try:
            self.assertEqual(kiln.get_flags("amp")["amp"], "bf16")
            with self.assertRaises(kiln.Error) as e:
                kiln.set_flags({"amp": "fp16"})
            self.assertIn("unknown --amp 'fp16': expected bf16", str(e.exception))
            self.assertEqual(kiln.get_flags("amp")["amp"], "bf16")
        finally:
            kiln.set_flags({"amp": ""})
        self.assertEqual(kiln.get_flags("amp")["amp"], "")

    def test_amp_module_trains_in_bf16_and_restores_the_flag(self):
        if not kiln.amp.available():
            self.skipTest("this CPU has no oneDNN bf16 matmuls")
        losses = {}
        for precision in ("f32", "bf16"):
            for jit in (False, True):
                main, startup, x, label, logits, loss = mlp(hidden=64, features=48)
                scope = kiln.Scope()
                exe = kiln.Executor(use_jit=jit)
                exe.run(startup, scope=scope)
                xs, ys = batch(32, features=48)
                run = lambda: exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)[0][0]
                if precision == "bf16":
                    with kiln.amp.bf16():
                        self.assertEqual(kiln.amp.enabled(), "bf16")
                        losses[precision, jit] = [run() for _ in range(10)]
                else:
                    losses[precision, jit] = [run() for _ in range(10)]
                self.assertIsNone(kiln.amp.enabled())
        # bf16 ran (its losses are not f32's) and stays close to f32; JIT on and off agree.
        self.assertNotEqual(losses["bf16", False], losses["f32", False])
        np.testing.assert_allclose(losses["bf16", False], losses["f32", False], rtol=2e-2)
        np.testing.assert_allclose(losses["bf16", True], losses["bf16", False], rtol=2e-2)

    def test_use_jit_flag_turns_the_jit_on(self):
        kiln.set_flags({"FLAGS_use_jit": True})
        try:
            self.assertTrue(kiln.Executor().use_jit)
        finally:
            kiln.set_flags({"FLAGS_use_jit": False})
        self.assertFalse(kiln.Executor().use_jit)
        self.assertTrue(kiln.Executor(use_jit=True).use_jit)


class FilesTest(unittest.TestCase):
    def test_dump_writes_what_kiln_dump_writes(self):
        main, startup, x, label, logits, loss = mlp()
        with tempfile.TemporaryDirectory() as d:
            explain = kiln.dump(main, d, {"x": [32, 4], "label": [32, 1]}, fetch_list=[loss])
            self.assertIn("c0", explain)
            files = os.listdir(d)
            for f in ("index.md", "program.before.pbtxt", "program.after.pbtxt", "program.dot"):
                self.assertIn(f, files)
            self.assertTrue(any(f.startswith("cluster_") for f in files))
            with open(os.path.join(d, "index.md")) as f:
                index = f.read()
            self.assertIn("batch size 32", index)
            with self.assertRaises(kiln.Error) as e:
                kiln.dump(main, d, {"x": [32, 5]})
            self.assertIn("feed shape of 'x'", str(e.exception))

    def test_checkpoint_roundtrip_and_errors(self):
        with kiln.unique_name.guard("ck_"):
            main, startup, x, label, logits, loss = mlp(optimizer=kiln.optimizer.Adam(0.01))
        xs, ys = batch()
        scope = kiln.Scope()
        exe = kiln.Executor()
        exe.run(startup, scope=scope)
        for _ in range(3):
            exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)
        with tempfile.TemporaryDirectory() as d:
            kiln.save(exe, main, os.path.join(d, "ck"), step=3, scope=scope)
            with open(os.path.join(d, "ck", "manifest.json")) as f:
                manifest = f.read()
            self.assertIn("ck_fc_0.w.moment1", manifest)
            resumed = kiln.Scope()
            self.assertEqual(kiln.load(exe, main, os.path.join(d, "ck"), scope=resumed), 3)
            a = [exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=s)[0][0] for s in (scope, resumed)]
            self.assertEqual(a[0], a[1])  # bit for bit
            # The parameters alone (a test clone), against a program of the
            # same names with other dims.
            kiln.save(exe, main.clone(for_test=True), os.path.join(d, "params"), scope=scope)
            with kiln.unique_name.guard("ck_"):
                other, *_ = mlp(hidden=9, optimizer=kiln.optimizer.Adam(0.01))
            with self.assertRaises(kiln.Error) as e:
                kiln.load(exe, other.clone(for_test=True), os.path.join(d, "params"), scope=kiln.Scope())
            self.assertIn("checkpoint var 'ck_fc_0.b'", str(e.exception))
            self.assertIn("has shape [8], the program declares [9]", str(e.exception))

    def test_history_is_what_kiln_plot_draws(self):
        main, startup, x, label, logits, loss = mlp()
        exe = kiln.Executor()
        scope = kiln.Scope()
        exe.run(startup, scope=scope)
        xs, ys = batch()
        history = kiln.History()
        for step in range(1, 6):
            value, = exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)
            history.step(step, value[0], step_ms=1.0)
        history.epoch(1, 0.5)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "run.jsonl")
            history.save(path)
            r = subprocess.run([os.environ["KILN_BINARY"], "plot", path, "--out", os.path.join(d, "c.svg")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(d, "c.svg")) as f:
                self.assertEqual(f.read().count("<polyline"), 3)

    def test_inference_model_runs_in_kiln_predict(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            label = kiln.data("label", [-1, 1], dtype="int64")
            logits = kiln.nn.fc(kiln.nn.fc(x, 8, act="relu"), 3)
            loss, probs = kiln.nn.softmax_with_cross_entropy(logits, label, return_softmax=True)
            forward = main.clone(for_test=True)
            kiln.optimizer.SGD(0.1).minimize(kiln.nn.mean(loss))
        exe = kiln.Executor()
        scope = kiln.Scope()
        exe.run(startup, scope=scope)
        xs, ys = batch()
        exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)
        expected, = exe.run(forward, feed={"x": xs, "label": ys}, fetch_list=[probs], scope=scope)
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model")
            pruned = kiln.save_inference_model(model, ["x"], [probs], exe, forward, scope=scope)
            self.assertNotIn("label", pruned.to_string())
            program, feeds, fetches = kiln.load_inference_model(model, exe, scope=kiln.Scope())
            self.assertEqual(feeds, ["x"])
            np.save(os.path.join(d, "x.npy"), xs)
            r = subprocess.run([os.environ["KILN_BINARY"], "predict", "--model", model, "--feed",
                                "x=%s/x.npy" % d, "--out", d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = np.load(os.path.join(d, fetches[0].name + ".npy"))
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
