"""Issue 27: each script here is one a user wrote against docs/python.md that
used to give a silently wrong result (or cost them a silent slowdown). Each
now ends where it should, or stops with a kiln.Error naming what is wrong.
Run by ctest (python_silent_errors) with PYTHONPATH=build/python."""

import os
import subprocess
import tempfile
import unittest
import warnings

import numpy as np

import kiln


def regression_data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [0.0]], "float32") + 0.3).astype("float32")
    return x, y


def classifier_data(n=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype("float32")
    y = (x[:, :1] > 0).astype("int64")
    return x, y


def regressor(hidden=8, lr=0.05):
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        x = kiln.data("x", [-1, 4])
        y = kiln.data("y", [-1, 1])
        pred = kiln.nn.fc(kiln.nn.fc(x, hidden, act="relu"), 1)
        loss = kiln.nn.reduce_mean((pred - y) ** 2)
        kiln.optimizer.SGD(lr).minimize(loss)
    return main, startup, loss


def classifier():
    main, startup = kiln.Program(), kiln.Program()
    with kiln.program_guard(main, startup):
        x = kiln.data("x", [-1, 4])
        label = kiln.data("label", [-1, 1], dtype=np.int64)
        logits = kiln.nn.fc(x, 2)
        loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(logits, label))
        test = main.clone(for_test=True)
        kiln.optimizer.SGD(0.1).minimize(loss)
    return main, startup, test, loss


def params_of(main, scope):
    return {p.name: scope.get(p.name) for p in main.all_parameters()}


class TwoModelsTest(unittest.TestCase):
    """A second model overwrote the first one's trained weights: layer names
    were unique per program, and the global scope is shared."""

    def train(self, exe, main, loss, data, steps, scope=None):
        x, y = data
        return [exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0][0] for _ in range(steps)]

    def test_two_models_trained_alternately_end_where_they_end_alone(self):
        data_a, data_b = regression_data(seed=1), regression_data(seed=2)
        for jit in (False, True):
            exe = kiln.Executor(use_jit=jit)
            alone = {}
            for name, hidden, data in (("a", 8, data_a), ("b", 5, data_b)):
                main, startup, loss = regressor(hidden)
                scope = kiln.Scope()
                exe.run(startup, scope=scope)
                losses = self.train(exe, main, loss, data, 12, scope)
                alone[name] = (losses, list(params_of(main, scope).values()))
            # The user's script: both in the global scope, model B built
            # (and initialised) after A has trained, then alternating.
            main_a, startup_a, loss_a = regressor(8)
            exe.run(startup_a)
            losses_a = self.train(exe, main_a, loss_a, data_a, 4)
            main_b, startup_b, loss_b = regressor(5)
            exe.run(startup_b)
            losses_b = []
            for _ in range(4):
                losses_a += self.train(exe, main_a, loss_a, data_a, 2)
                losses_b += self.train(exe, main_b, loss_b, data_b, 3)
            self.assertEqual(losses_a, alone["a"][0], "jit=%s" % jit)
            self.assertEqual(losses_b, alone["b"][0], "jit=%s" % jit)
            for got, want in zip(params_of(main_a, kiln.global_scope()).values(), alone["a"][1]):
                np.testing.assert_array_equal(got, want)
            for got, want in zip(params_of(main_b, kiln.global_scope()).values(), alone["b"][1]):
                np.testing.assert_array_equal(got, want)
            self.assertFalse(set(params_of(main_a, kiln.global_scope())) & set(params_of(main_b, kiln.global_scope())))

    def test_a_shared_name_of_another_shape_is_refused_naming_both(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            kiln.nn.fc(x, 3, name="shared_head")
        kiln.Executor().run(startup)
        other, other_startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(other, other_startup):
            x = kiln.data("x", [-1, 6])
            with self.assertRaises(kiln.Error) as e:
                kiln.nn.fc(x, 3, name="shared_head")
        self.assertIn("'shared_head.w' float32[6, 3]", str(e.exception))
        self.assertIn("dims [4, 3] that the global scope holds", str(e.exception))
        self.assertEqual(other.num_ops(), 0)

    def test_a_startup_program_never_overwrites_what_another_program_trained(self):
        exe = kiln.Executor()
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            loss = kiln.nn.mean(kiln.nn.fc(x, 1, name="shared_fc"))
            kiln.optimizer.SGD(0.5).minimize(loss)
        exe.run(startup)
        xs, _ = regression_data()
        for _ in range(3):
            exe.run(main, feed={"x": xs})
        trained = kiln.global_scope().get("shared_fc.w")
        # A second program sharing the layer by name (same shape): its own
        # startup program keeps the trained values, and says so.
        other, other_startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(other, other_startup):
            x = kiln.data("x", [-1, 4])
            out = kiln.nn.fc(x, 1, name="shared_fc")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exe.run(other_startup)
        np.testing.assert_array_equal(kiln.global_scope().get("shared_fc.w"), trained)
        self.assertTrue(any("keeps 'shared_fc.w'" in str(w.message) for w in caught), [str(w.message) for w in caught])
        got, = exe.run(other, feed={"x": xs}, fetch_list=[out])
        np.testing.assert_allclose(got, xs @ trained + kiln.global_scope().get("shared_fc.b"), rtol=1e-5)
        # Nor does the same startup program run again once the values were
        # trained: a deliberate reset erases them first.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exe.run(startup)
        np.testing.assert_array_equal(kiln.global_scope().get("shared_fc.w"), trained)
        self.assertEqual(len(caught), 1)
        self.assertIn("test_silent_errors.py", caught[0].filename)  # points at the caller's line
        kiln.global_scope().erase("shared_fc.w")
        exe.run(startup)
        self.assertFalse(np.array_equal(kiln.global_scope().get("shared_fc.w"), trained))

    def test_unique_name_generate_and_guard(self):
        a, b = kiln.unique_name.generate("blk"), kiln.unique_name.generate("blk")
        self.assertNotEqual(a, b)
        with kiln.unique_name.guard():
            self.assertEqual(kiln.unique_name.generate("blk"), "blk_0")
        with kiln.unique_name.guard("inner_"):
            self.assertEqual(kiln.unique_name.generate("blk"), "inner_blk_0")
        self.assertNotIn(kiln.unique_name.generate("blk"), (a, b, "blk_0"))


class NamesAndScopesTest(unittest.TestCase):
    """Close variants of the two-models scripts, found in review."""

    def test_a_program_that_is_not_a_startup_program_always_runs_all_its_ops(self):
        # A DQN-style sync (a copy into the target's weights) and a reset.
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            online = kiln.nn.fc(x, 2, name="online")
            target = kiln.nn.fc(x, 2, name="target")
        sync = kiln.Program()
        with kiln.program_guard(sync, kiln.Program()):
            w = kiln.create_parameter("online.w", [4, 2], "constant", value=0.0)
            kiln.ops.scale(w, outputs={"Out": kiln.create_parameter("target.w", [4, 2], "constant", value=0.0)})
        exe = kiln.Executor()
        exe.run(startup)
        self.assertFalse(np.array_equal(kiln.global_scope().get("online.w"), kiln.global_scope().get("target.w")))
        exe.run(sync)
        np.testing.assert_array_equal(kiln.global_scope().get("online.w"), kiln.global_scope().get("target.w"))
        del online, target

    def test_a_kept_var_of_other_dims_is_an_error_naming_both(self):
        exe = kiln.Executor()
        programs = []
        for size in (1, 3):
            main, startup = kiln.Program(), kiln.Program()
            with kiln.program_guard(main, startup), kiln.unique_name.guard("kept_"):
                x = kiln.data("x", [-1, 4])
                kiln.nn.fc(x, size)
            programs.append(startup)
        exe.run(programs[0])
        with self.assertRaises(kiln.Error) as e:
            exe.run(programs[1])
        self.assertIn("'kept_fc_0.w' is declared f32[4,3] but the scope holds it as f32[4,1]", str(e.exception))

    def test_learning_rates_are_never_shared_even_under_guards(self):
        made = []
        for lr in (0.5, 0.001):
            main, startup = kiln.Program(), kiln.Program()
            with kiln.program_guard(main, startup), kiln.unique_name.guard("lr_"):
                x = kiln.data("x", [-1, 4])
                loss = kiln.nn.mean(kiln.nn.fc(x, 1))
                lr_var, _ = kiln.optimizer.SGD(lr).minimize(loss)
            made.append((startup, lr_var, lr))
        self.assertNotEqual(made[0][1].name, made[1][1].name)
        # Two programs built alike under guards, one startup program: the
        # parameters are shared, each minimize gets its own learning rate.
        startup = kiln.Program()
        for _ in range(2):
            with kiln.program_guard(kiln.Program(), startup), kiln.unique_name.guard("twin_"):
                x = kiln.data("x", [-1, 4])
                kiln.optimizer.SGD(0.1).minimize(kiln.nn.mean(kiln.nn.fc(x, 1)))
        scope = kiln.Scope()
        exe = kiln.Executor()
        for start, lr_var, lr in made:
            exe.run(start, scope=scope)
        for start, lr_var, lr in made:
            self.assertEqual(scope.get(lr_var.name)[0], np.float32(lr))

    def test_the_default_startup_program_run_again_keeps_what_was_trained(self):
        # A notebook: a model in the default programs, trained; a cell adds
        # a layer and runs the (same, grown) default startup program again.
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            y = kiln.data("y", [-1, 1])
            loss = kiln.nn.reduce_mean((kiln.nn.fc(x, 1) - y) ** 2)
            kiln.optimizer.SGD(0.1).minimize(loss)
        exe = kiln.Executor()
        scope = kiln.Scope()
        exe.run(startup, scope=scope)
        xs, ys = regression_data()
        for _ in range(20):
            trained, = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss], scope=scope)
        with kiln.program_guard(main, startup):
            extra = kiln.nn.fc(x, 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exe.run(startup, scope=scope)
        self.assertEqual(len(caught), 1)
        again, = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss], scope=scope)
        self.assertLess(again[0], trained[0] * 1.01)  # one more step from where it was
        self.assertIsNotNone(scope.dims(extra.name.split(".")[0] + ".w"))

    def test_names_of_a_loaded_program_are_not_generated_again(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup), kiln.unique_name.guard():
            x = kiln.data("x", [-1, 4])
            kiln.nn.fc(x, 3)  # fc_0
        head = kiln.Program()
        with tempfile.TemporaryDirectory() as d, kiln.unique_name.guard():  # a fresh process's counts
            kiln.save_program(main, os.path.join(d, "p.pbtxt"))
            loaded = kiln.load_program(os.path.join(d, "p.pbtxt"))
            with kiln.program_guard(head, kiln.Program()):
                x = kiln.data("x", [-1, 4])
                kiln.nn.fc(x, 3)
        self.assertTrue(loaded.has_var("fc_0.w"))
        self.assertFalse(head.has_var("fc_0.w"), [v.name for v in head.list_vars()])

    def test_names_made_under_a_guard_are_not_made_again_outside_it(self):
        a, b = kiln.Program(), kiln.Program()
        with kiln.program_guard(a, kiln.Program()):
            with kiln.unique_name.guard():
                kiln.nn.fc(kiln.data("x", [-1, 4]), 3)
        with kiln.program_guard(b, kiln.Program()):
            kiln.nn.fc(kiln.data("x", [-1, 4]), 3)
        names_a = {p.name for p in a.all_parameters()}
        names_b = {p.name for p in b.all_parameters()}
        self.assertFalse(names_a & names_b, (names_a, names_b))


class LayerSemanticsTest(unittest.TestCase):
    """reduce_mean(x) reduced axis 0 only, so a "loss" had 3 elements,
    minimize took it, and the gradient was 3x PyTorch's."""

    def test_reduce_mean_of_a_squared_error_is_the_mean(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            pred = kiln.data("pred", [3, 2])
            y = kiln.data("y", [3, 2])
            pred.stop_gradient = False
            loss = kiln.nn.reduce_mean((pred - y) ** 2)
            grad, = kiln.gradients(loss, pred)
        self.assertEqual(loss.shape, (1,))
        p = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 4.0]], "float32")
        t = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 0.0]], "float32")
        got, g = kiln.Executor().run(main, feed={"pred": p, "y": t}, fetch_list=[loss, grad])
        np.testing.assert_allclose(got, [np.mean((p - t) ** 2)], rtol=1e-6)
        np.testing.assert_allclose(g, 2 * (p - t) / p.size, rtol=1e-6)

    def test_reductions_take_paddle_layer_arguments(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [2, 3, 4])
            outs = [kiln.nn.reduce_sum(x), kiln.nn.reduce_mean(x, dim=1), kiln.nn.reduce_max(x, dim=[0, 2]),
                    kiln.nn.reduce_min(x, dim=-1, keep_dim=True), kiln.ops.reduce_sum(x)]
        xs = np.random.default_rng(3).standard_normal((2, 3, 4)).astype("float32")
        got = kiln.Executor().run(main, feed={"x": xs}, fetch_list=outs)
        np.testing.assert_allclose(got[0], [xs.sum()], rtol=1e-5)
        np.testing.assert_allclose(got[1], xs.mean(axis=1), rtol=1e-5)
        np.testing.assert_allclose(got[2], xs.max(axis=(0, 2)), rtol=1e-6)
        np.testing.assert_allclose(got[3], xs.min(axis=-1, keepdims=True), rtol=1e-6)
        np.testing.assert_allclose(got[4], xs.sum(axis=0), rtol=1e-5)  # kiln.ops keeps the bare op

    def test_layers_with_paddle_signatures(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [2, 6])
            parts = kiln.nn.split(x, 3)  # Paddle's layer: the last dim
            mm = kiln.nn.matmul(x, x, transpose_y=True)
            c = kiln.nn.cast(x > 0.0, np.float32)
            am = kiln.nn.argmax(x, axis=1)
            f = kiln.nn.fill_constant([2], "int64", 7)
            r = kiln.nn.transpose(kiln.nn.reshape(x, [3, 4]), [1, 0])
        xs = np.arange(12, dtype="float32").reshape(2, 6) - 5
        got = kiln.Executor().run(main, feed={"x": xs}, fetch_list=parts + [mm, c, am, f, r])
        for k in range(3):
            np.testing.assert_array_equal(got[k], xs[:, 2 * k:2 * k + 2])
        np.testing.assert_allclose(got[3], xs @ xs.T, rtol=1e-6)
        np.testing.assert_array_equal(got[4], (xs > 0).astype("float32"))
        np.testing.assert_array_equal(got[5], xs.argmax(axis=1))
        np.testing.assert_array_equal(got[6], [7, 7])
        np.testing.assert_array_equal(got[7], xs.reshape(3, 4).T)


class LossesAreScalarsTest(unittest.TestCase):
    def test_minimize_refuses_a_loss_of_several_elements(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            pred = kiln.nn.fc(x, 3)
            per_column = kiln.ops.reduce_mean((pred - 1.0) ** 2)  # the bare op: dim 0 only
            before = main.num_ops()
            with self.assertRaises(kiln.Error) as e:
                kiln.optimizer.SGD(0.1).minimize(per_column)
        self.assertIn("the loss '%s' has shape [3]" % per_column.name, str(e.exception))
        self.assertEqual(main.num_ops(), before)

    def test_minimize_refuses_a_per_row_loss_naming_its_shape(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            label = kiln.data("label", [-1, 1], dtype="int64")
            loss = kiln.nn.softmax_with_cross_entropy(kiln.nn.fc(x, 3), label)
            with self.assertRaises(kiln.Error) as e:
                kiln.optimizer.Adam().minimize(loss)
        self.assertIn("has shape [-1,1]; a loss must be one element", str(e.exception))
        self.assertIn("kiln.nn.mean", str(e.exception))

    def test_minimize_twice_is_refused_and_a_second_optimizer_needs_other_parameters(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            y = kiln.data("y", [-1, 1])
            h = kiln.nn.fc(x, 3, name="body")
            pred = kiln.nn.fc(h, 1, name="head")
            loss = kiln.nn.reduce_mean((pred - y) ** 2)
            kiln.optimizer.SGD(0.1).minimize(loss)
            ops = main.num_ops()
            with self.assertRaises(kiln.Error) as e:  # the notebook cell run again
                kiln.optimizer.SGD(0.1).minimize(loss)
            self.assertIn("update them twice per step", str(e.exception))
            self.assertEqual(main.num_ops(), ops)
        # One SGD(0.1) step, not two.
        xs, ys = regression_data()
        scope = kiln.Scope()
        exe = kiln.Executor()
        exe.run(startup, scope=scope)
        w0 = scope.get("head.w")
        gw, = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=["head.w@GRAD"], scope=scope)
        np.testing.assert_allclose(scope.get("head.w"), w0 - 0.1 * gw, rtol=1e-6)
        # A second optimizer over other parameters is fine.
        main2, startup2 = kiln.Program(), kiln.Program()
        with kiln.program_guard(main2, startup2):
            x = kiln.data("x", [-1, 4])
            y = kiln.data("y", [-1, 1])
            body = kiln.nn.fc(x, 3)
            pred = kiln.nn.fc(body, 1)
            loss = kiln.nn.reduce_mean((pred - y) ** 2)
            params = main2.all_parameters()
            kiln.optimizer.SGD(0.1).minimize(loss, parameter_list=params[:2])
            kiln.optimizer.Adam(0.01).minimize(loss, parameter_list=params[2:])
        types = [op["type"] for op in main2.ops]
        self.assertEqual((types.count("sgd"), types.count("adam")), (2, 2))


class CloneForTestTest(unittest.TestCase):
    """main.clone(for_test=True) after minimize kept the backward and the
    optimizer: "evaluating" trained on the evaluation data."""

    def test_evaluating_a_clone_taken_after_minimize_changes_no_parameter(self):
        for jit in (False, True):
            main, startup = kiln.Program(), kiln.Program()
            with kiln.program_guard(main, startup):
                x = kiln.data("x", [-1, 4])
                label = kiln.data("label", [-1, 1], dtype="int64")
                h = kiln.nn.batch_norm(kiln.nn.fc(x, 6), act="relu")
                h = kiln.nn.dropout(h, 0.3)
                loss = kiln.nn.mean(kiln.nn.softmax_with_cross_entropy(kiln.nn.fc(h, 2), label))
                kiln.optimizer.Momentum(0.1).minimize(loss)
            test = main.clone(for_test=True)  # after minimize, as Paddle allows
            kinds = {op["type"] for op in test.ops}
            self.assertFalse({"sgd", "momentum", "mean_grad", "fill_constant"} & kinds, kinds)
            self.assertFalse(any(op["type"].endswith("_grad") for op in test.ops))
            scope = kiln.Scope()
            exe = kiln.Executor(use_jit=jit)
            exe.run(startup, scope=scope)
            xs, ys = classifier_data()
            exe.run(main, feed={"x": xs, "label": ys}, scope=scope)
            state = {v.name: scope.get(v.name) for v in main.list_vars() if v.persistable}
            outs = [exe.run(test, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)[0] for _ in range(3)]
            for name, value in state.items():
                np.testing.assert_array_equal(scope.get(name), value, "%s changed (jit=%s)" % (name, jit))
            self.assertEqual(outs[0], outs[2])  # is_test: no dropout, running statistics


class FeedsBelongToOneRunTest(unittest.TestCase):
    """After a run failed on a batch mismatch, a run that left out the
    label used the stale labels of the failed run."""

    def test_a_feed_of_a_failed_run_does_not_stand_in_for_a_missing_one(self):
        for jit in (False, True):
            main, startup, test, loss = classifier()
            exe = kiln.Executor(use_jit=jit)
            scope = kiln.Scope()
            exe.run(startup, scope=scope)
            x16, _ = classifier_data(16)
            x32, y32 = classifier_data(32)
            with self.assertRaises(kiln.Error) as e:
                exe.run(test, feed={"x": x16, "label": y32}, fetch_list=[loss], scope=scope)
            self.assertIn("softmax_with_cross_entropy", str(e.exception))
            self.assertNotIn("jit_launch", str(e.exception))
            # 32 rows of x: the stale 32 labels would fit.
            with self.assertRaises(kiln.Error) as e:
                exe.run(test, feed={"x": x32}, fetch_list=[loss], scope=scope)
            self.assertIn("feed 'label' is missing (the program reads it)", str(e.exception))

    def test_a_parameter_that_holds_no_data_is_named_by_its_op_not_jit_launch(self):
        main, startup, test, loss = classifier()
        x, y = classifier_data()
        with self.assertRaises(kiln.Error) as e:  # the startup program never ran
            kiln.Executor(use_jit=True).run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=kiln.Scope())
        self.assertIn("'matmul': input Y", str(e.exception))
        self.assertIn("holds no data", str(e.exception))
        self.assertNotIn("jit_launch", str(e.exception))

    def test_kiln_predict_without_its_feed_names_the_feed_and_the_flag(self):
        main, startup, test, loss = classifier()
        exe = kiln.Executor()
        exe.run(startup)
        probs = [v for v in test.list_vars() if v.name.endswith(".Softmax")][0]
        with tempfile.TemporaryDirectory() as d:
            kiln.save_inference_model(os.path.join(d, "m"), ["x"], [probs], exe, test)
            r = subprocess.run([os.environ["KILN_BINARY"], "predict", "--model", os.path.join(d, "m"), "--out",
                                os.path.join(d, "out")], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("feed 'x' is missing (the program reads it): give it with --feed x=FILE.npy", r.stderr)
            self.assertEqual(os.listdir(os.path.join(d, "out")), [])


class BadFeedsCostNothingTest(unittest.TestCase):
    """Feeds that failed shape checks used up the JIT's recompile budget:
    a valid new batch size then ran through the framework ops."""

    def test_bad_feeds_do_not_count_toward_the_recompile_limit(self):
        main, startup, test, loss = classifier()
        exe = kiln.Executor(use_jit=True)
        scope = kiln.Scope()
        exe.run(startup, scope=scope)
        limit = kiln.get_flags(["jit_recompile_limit"])["jit_recompile_limit"]
        for n in range(2, limit + 4):  # more bad signatures than the limit
            x, _ = classifier_data(n)
            _, y = classifier_data(n + 1)
            with self.assertRaises(kiln.Error):
                exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
        before = kiln.jit_stats()
        x, y = classifier_data(24)
        exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
        after = kiln.jit_stats()
        self.assertGreater(after["compiles"], before["compiles"])
        self.assertEqual(after["fallback_calls"], before["fallback_calls"])


    def test_bad_feeds_cost_nothing_when_the_mismatch_is_in_a_later_cluster(self):
        # The loss kept out of the JIT: a forward cluster that compiles for
        # any batch, then the loss that sees x and label disagree.
        main, startup, test, loss = classifier()
        saved = kiln.get_flags(["jit_deny_ops"])
        kiln.set_flags({"jit_deny_ops": "softmax_with_cross_entropy"})
        try:
            exe = kiln.Executor(use_jit=True)
            scope = kiln.Scope()
            exe.run(startup, scope=scope)
            limit = kiln.get_flags(["jit_recompile_limit"])["jit_recompile_limit"]
            before = kiln.jit_stats()
            for n in range(2, limit + 4):
                x, _ = classifier_data(n)
                _, y = classifier_data(n + 1)
                with self.assertRaises(kiln.Error) as e:
                    exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
                self.assertIn("softmax_with_cross_entropy", str(e.exception))
            self.assertEqual(kiln.jit_stats()["compiles"], before["compiles"], "nothing compiled for bad feeds")
            x, y = classifier_data(24)
            exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
            after = kiln.jit_stats()
            self.assertGreater(after["compiles"], before["compiles"])
            self.assertEqual(after["fallback_calls"], before["fallback_calls"])
        finally:
            kiln.set_flags(saved)


class LayersAreAtomicTest(unittest.TestCase):
    """fc(x, 3, act=<unknown>) left its matmul, add and parameters in the
    program, and the corrected call became fc_1 (shifting checkpoint names)."""

    def test_a_layer_that_raises_leaves_no_trace(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 4])
            before = (main.to_string(), startup.to_string())
            with kiln.unique_name.guard():
                with self.assertRaises(kiln.Error) as e:
                    kiln.nn.fc(x, 3, act="swish")
                self.assertIn("unknown activation 'swish'", str(e.exception))
                self.assertEqual((main.to_string(), startup.to_string()), before)
                y = kiln.nn.fc(x, 3, act="leaky_relu")
            self.assertEqual(sorted(p.name for p in main.all_parameters()), ["fc_0.b", "fc_0.w"])
        kiln.Executor().run(startup)
        xs = np.ones((2, 4), "float32")
        out, = kiln.Executor().run(main, feed={"x": xs}, fetch_list=[y])
        pre = xs @ kiln.global_scope().get("fc_0.w") + kiln.global_scope().get("fc_0.b")
        np.testing.assert_allclose(out, np.where(pre > 0, pre, 0.02 * pre), rtol=1e-6)


class OperatorsTest(unittest.TestCase):
    def test_python_operators_build_the_ops(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [3, 5], dtype=np.float32)
            outs = [x ** 2, x ** 0.5, 2.0 / x, 2.0 ** x, x[1], x[:, 1:4], x[..., -1], x[-2:, :2], x < 1.5,
                    x > 1.5, x <= 2.0, x >= 2.0]
        self.assertEqual(x.dtype, "float32")
        xs = np.arange(1, 16, dtype="float32").reshape(3, 5) / 4
        got = kiln.Executor().run(main, feed={"x": xs}, fetch_list=outs)
        want = [xs ** 2, xs ** 0.5, 2.0 / xs, 2.0 ** xs, xs[1], xs[:, 1:4], xs[..., -1], xs[-2:, :2], xs < 1.5,
                xs > 1.5, xs <= 2.0, xs >= 2.0]
        for g, w in zip(got, want):
            self.assertEqual(g.shape, w.shape)
            if w.dtype == bool:
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=2e-6)

    def test_comparisons_with_numbers_are_exact_for_every_dtype(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            i = kiln.data("i", [5], dtype=np.int64)
            f = kiln.data("f", [3], dtype=np.float64)
            outs = [i < 1.5, i <= 1.5, i > -0.5, i >= 0.5, i < 16777217, f < 0.1, f >= 0.1, f > np.float32(0.05)]
            with self.assertRaises(kiln.Error) as e:
                kiln.nn.cast(i, "bool") < 1
            self.assertIn("cast it first", str(e.exception))
        iv = np.array([0, 1, 2, -1, 16777216], "int64")
        fv = np.array([0.1, 0.05, 0.2])
        got = kiln.Executor().run(main, feed={"i": iv, "f": fv}, fetch_list=outs)
        want = [iv < 1.5, iv <= 1.5, iv > -0.5, iv >= 0.5, iv < 16777217, fv < 0.1, fv >= 0.1, fv > np.float32(0.05)]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)

    def test_flatten_takes_paddles_axis_and_indices_take_numpy_ints(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [-1, 3, 4, 5])
            outs = [kiln.nn.flatten(x), kiln.nn.flatten(x, 2), kiln.nn.flatten(x, axis=0), x[np.int64(1)]]
            with self.assertRaises(TypeError):
                kiln.nn.flatten(x, 2.0)
        xs = np.arange(120, dtype="float32").reshape(2, 3, 4, 5)
        got = kiln.Executor().run(main, feed={"x": xs}, fetch_list=outs)
        np.testing.assert_array_equal(got[0], xs.reshape(2, 60))
        np.testing.assert_array_equal(got[1], xs.reshape(6, 20))
        np.testing.assert_array_equal(got[2], xs.reshape(1, 120))
        np.testing.assert_array_equal(got[3], xs[1])

    def test_unsupported_indexing_is_an_error(self):
        main, startup = kiln.Program(), kiln.Program()
        with kiln.program_guard(main, startup):
            x = kiln.data("x", [3, 5])
            for bad in (np.s_[::2], np.s_[5], np.s_[1, 2, 3], np.s_[None]):
                with self.assertRaises(IndexError):
                    x[bad]
        self.assertEqual(main.num_ops(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
