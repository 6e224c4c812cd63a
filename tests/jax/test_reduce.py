"""`fpemu._jax.reduce`: `magnitude_max` and `run_max` give the plain maximum's bits for every shape
and set of axes (a maximum is exact in any order), and the maxima the quantizers take through them
(`fpemu.scaled`'s row and tensor scales, the training layer's `amax_of`) are the values' own."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu import scaled
from fpemu._jax.reduce import RUN, SPLIT_MIN_SIZE, magnitude_max, run_max
from fpemu._training import Quantizer, amax_of, scaled_view

SPECIAL = np.array([0x7FC00000, 0x7F800000, 0x7F7FFFFF, 0x00000001, 0x00800000, 0], np.uint32)  # NaN, inf, ...


def _magnitudes(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """uint32 values below 2**31 (float32 magnitudes), the specials placed at seeded positions."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 0x7F800000, size=shape, dtype=np.uint32)
    flat = u.reshape(-1)
    if flat.size:
        where = rng.integers(0, flat.size, size=2)
        flat[where] = rng.choice(SPECIAL, size=2)
    return u


# small arrays (in steps over axes of at most RUN elements: axes cut into runs, a partial last run
# padded, several long axes at once, a second step of runs where an axis has more than RUN runs) and
# arrays of SPLIT_MIN_SIZE elements or more (runs of the last axis first, their maxima in steps once
# they are few), rows of whole runs and of a partial last run
BIG = SPLIT_MIN_SIZE // 64
SHAPES = [
    (0,),
    (5,),
    (RUN,),
    (RUN + 1,),
    (3, 100),
    (4, 0, 40),
    (RUN + 3, 2 * RUN + 1),
    (7, RUN * RUN + 5),
    (RUN * RUN * 2 + 1,),
    (2, 3 * RUN, 5, RUN + 2),
    (BIG, 64),
    (BIG + 1, 3 * RUN + 7),
    (2, BIG // 2, 2 * RUN),
    (SPLIT_MIN_SIZE + 3,),
    (RUN * RUN, RUN * RUN),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_magnitude_max_is_the_maximum_for_every_set_of_axes(shape):
    u = _magnitudes(shape, seed=len(shape) * 1000 + sum(shape))
    for r in range(1, len(shape) + 1):
        for axes in itertools.combinations(range(len(shape)), r):
            for keepdims in (True, False):
                expected = np.max(u, axis=axes, keepdims=keepdims, initial=0)
                got = np.asarray(magnitude_max(jnp.asarray(u), axes, keepdims=keepdims))
                assert got.dtype == np.uint32 and got.shape == expected.shape, (axes, keepdims, got.shape)
                np.testing.assert_array_equal(got, expected, err_msg=f"{axes}, keepdims={keepdims}")


def test_magnitude_max_keeps_int32_input_int32():
    # the steps alternate uint32 and int32 (the same order below 2**31): the result has the input's type
    u = _magnitudes((RUN + 3, 2 * RUN + 1), seed=7)
    for dtype in (np.uint32, np.int32):
        got = magnitude_max(jnp.asarray(u.astype(dtype)), (0, 1))
        assert got.dtype == dtype
        assert got.tolist() == [[int(u.max())]]
    # an empty int32 reduction is 0, as for uint32 (whose maximum starts at 0), not int32's minimum
    for dtype in (np.uint32, np.int32):
        assert magnitude_max(jnp.zeros((3, 0), dtype), (1,), keepdims=False).tolist() == [0, 0, 0]


@pytest.mark.parametrize("run", [1, 3, 4, 8, 16, 32, 128])
def test_run_max_is_the_maximum_of_each_run(run):
    u = _magnitudes((3, 2 * run), seed=run)
    expected = u.reshape(3, 2, run).max(axis=-1)
    np.testing.assert_array_equal(np.asarray(run_max(jnp.asarray(u), run)), expected)


def test_a_nan_wins_over_infinity_and_a_row_longer_than_a_run_keeps_its_last_elements():
    u = np.zeros((SPLIT_MIN_SIZE // (5 * RUN) + 1, 5 * RUN + 3), np.uint32)  # runs first: a partial last run
    u[0, -1] = 0x7F800000  # inf in the padded last run
    u[1, 7] = 0x7F800000
    u[1, -2] = 0x7FC00001  # a NaN payload, above inf
    got = np.asarray(magnitude_max(jnp.asarray(u), (1,))).ravel().tolist()
    assert got[:3] == [0x7F800000, 0x7FC00001, 0]


def test_amax_of_and_the_row_and_tensor_scales_read_every_element():
    # the largest magnitude sits in the last, partial run of a long row: each quantizer that takes a
    # maximum over whole rows or the whole tensor must see it
    x = np.full((SPLIT_MIN_SIZE // (3 * RUN) + 1, 3 * RUN + 5), 0.5, np.float32)  # runs first
    x[2, -1] = -448.0 * 4  # the tensor's and row 2's amax
    x[3, 0] = np.float32(1e-40)  # a subnormal beside 0.5s: no effect, and no flush
    assert float(amax_of(jnp.asarray(x))) == 1792.0
    assert float(amax_of(jnp.asarray(np.float32([[1e-40, 0.0], [-3e-41, 0.0]])))) == np.float32(1e-40)
    tensor = scaled.BlockArray.from_array(jnp.asarray(x), "fp8_e4m3")
    assert float(tensor.scale.reshape(())) == 4.0  # 1792 / 448
    rows = scaled_view(jnp.asarray(x), [1], Quantizer(format="e4m3fn", scaling="row"))  # one scale per row
    expected = np.full(x.shape[0], np.float32(0.5 / 448))
    expected[2] = 4.0
    np.testing.assert_array_equal(np.asarray(rows.scale).ravel(), expected)
    nan = x.copy()
    nan[1, -1] = np.nan
    assert np.isnan(float(amax_of(jnp.asarray(nan))))
