#!/usr/bin/python3
"""Regenerates the .npy fixtures of tests/npy_test.cc with NumPy.

Run from this directory: /usr/bin/python3 make_fixtures.py
The files are committed; the test checks kiln reads them and that kiln's
writer produces the same bytes as np.save for the supported dtypes.
"""
import numpy as np

np.save("f32_3x4.npy", (np.arange(12, dtype="<f4").reshape(3, 4) / 4 - 1).astype("<f4"))
np.save("i64_5.npy", np.array([-3, 0, 7, 2**40, -(2**62)], dtype="<i8"))
np.save("f64_2x1x3.npy", np.array([[[0.1, -0.2, 1e300]], [[-1e-300, 3.0, 0.0]]], dtype="<f8"))
np.save("i32_2x2.npy", np.array([[1, -2], [2**31 - 1, -(2**31)]], dtype="<i4"))
np.save("bool_4.npy", np.array([True, False, False, True]))
np.save("scalar_f32.npy", np.array(2.5, dtype="<f4"))
np.save("empty_0x3_f32.npy", np.zeros((0, 3), dtype="<f4"))
# 4-d, to cover a leading dim with more digits and a larger rank.
np.save("f32_10x2x1x2.npy", np.arange(40, dtype="<f4").reshape(10, 2, 1, 2))
for version in [(2, 0), (3, 0)]:
    with open("f32_2x3_v%d.npy" % version[0], "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype="<f4").reshape(2, 3), version=version)

# Unsupported inputs.
np.save("fortran_f32_2x3.npy", np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
np.save("big_endian_f4.npy", np.arange(3, dtype=">f4"))
np.save("u8.npy", np.arange(3, dtype="u1"))
np.save("structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
