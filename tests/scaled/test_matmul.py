"""`fpemu.scaled.matmul`: the recipe-level quantized matmul (moved here from tests/tools/test_accuracy.py)."""

from __future__ import annotations

import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.testing import assert_bit_exact
from tests.scaled.test_split import expected_split

U32 = 2.0**-24


def test_recipes_in_table_order():
    assert scaled.MATMUL_FORMATS[:5] == ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
    assert set(scaled.MATMUL_FORMATS) == {"fp32", "bf16", "fp16"} | set(scaled.block_formats())
    assert scaled.MATMUL_FORMATS[-1] == "mxint8"


def test_blocks_run_along_the_contraction():
    # One MXFP4 block of 32 along K holding 1000 and 31 ones: floor(log2(1000)) = 9, scale
    # 2**(9 - 2) = 128, 1000 / 128 = 7.8 saturates to 6 (768) and 1 / 128 rounds to 0: the sum is 768.
    # Blocks along the other axis would keep every element in its own block: 768 + 31.
    row = np.ones((1, 32), np.float32)
    row[0, 0] = 1000.0
    assert scaled.matmul(row, np.ones((32, 1), np.float32), "mxfp4").tolist() == [[768.0]]
    assert scaled.matmul(np.ones((1, 32), np.float32), row.T.copy(), "mxfp4").tolist() == [[768.0]]


def test_short_last_block():
    # K = 40 is not a multiple of 32: the last block has 8 elements (pad=True), here each a lone 1.
    a = np.ones((1, 40), np.float32)
    a[0, 0] = 1000.0
    assert scaled.matmul(a, np.ones((40, 1), np.float32), "mxfp4").tolist() == [[768.0 + 8.0]]


def test_small_products():
    a = np.full((1, 32), 0.3, np.float32)
    b = np.ones((32, 1), np.float32)
    assert scaled.matmul(a, b, "bf16").tolist() == [[32 * 0.30078125]]  # 0.3 in bf16
    assert scaled.matmul(a, b, "fp16").tolist() == [[32 * 1229 / 2**12]]  # 0.3 in fp16: 1228.8 ulps of 2**-12
    # Per-tensor scaling maps the amax 0.3 to the E4M3 max 448, which is exact: 0.3 comes back
    # (within the float32 roundings of the scale and its reciprocal).
    assert scaled.matmul(a, b, "fp8_e4m3").item() == pytest.approx(9.6, rel=4 * U32)


@pytest.mark.parametrize("recipe", [r for r in scaled.MATMUL_FORMATS if r in scaled.block_formats()])
def test_the_operands_without_their_tensor_scales_are_bfloat16(recipe):
    # The premise of the bf16 fast path: rounding an operand's blocks (the dequantized values without
    # a float per-tensor scale) to bfloat16 changes nothing (elements of at most 8 significant bits
    # together with their block scales; bfloat16 has 8), on heavy-tailed data (Student's t, 3 degrees
    # of freedom).
    a = np.random.default_rng(0).standard_t(3, (64, 64)).astype(np.float32)
    axis = -1 if scaled.get_block_format(recipe).block_size else None
    blocks, _ = scaled.quantize_dequantize_split(a, recipe, axis=axis)
    np.testing.assert_array_equal(np.asarray(fpemu.quantize(blocks, "bf16")), np.asarray(blocks))


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["fp8_e4m3", "fp8_e5m2", "nvfp4"])
def test_per_tensor_scales_multiply_the_float32_product(recipe):
    # fl(sum(blocks_a * blocks_b) * fl(t_a * t_b)) from the reference's blocks and scales, on data whose
    # sums are exact (magnitudes in [1, 3] on a 1/64 grid: tensor scales that are not powers of two)
    rng = np.random.default_rng(2)
    a = ((1 + rng.integers(0, 129, (3, 32)) / 64) * rng.choice([-1, 1], (3, 32))).astype(np.float32)
    b = ((1 + rng.integers(0, 129, (32, 2)) / 64) * rng.choice([-1, 1], (32, 2))).astype(np.float32)
    per_tensor = scaled.get_block_format(recipe).block_size is None
    blocks_a, t_a = expected_split(a, recipe, None if per_tensor else -1)
    blocks_b, t_b = expected_split(b.T.copy(), recipe, None if per_tensor else -1)
    sums = (blocks_a.astype(np.float64) @ blocks_b.T.astype(np.float64)).astype(np.float32)  # exact
    expected = sums * (t_a.reshape(()) * t_b.reshape(()))
    got = np.asarray(scaled.matmul(a, b, recipe))
    assert_bit_exact(got, expected)
    axes = (None, None) if per_tensor else (-1, 0)
    a_q = np.asarray(scaled.quantize_dequantize(a, recipe, axis=axes[0], pad=True), np.float64)
    b_q = np.asarray(scaled.quantize_dequantize(b, recipe, axis=axes[1], pad=True), np.float64)
    assert not np.array_equal(got, (a_q @ b_q).astype(np.float32))  # the dequantized operands' product


def test_special_values():
    a = np.ones((2, 32), np.float32)
    a[0, 3] = np.nan  # row 0's block gets the NaN scale: every product that reads it is NaN
    b = np.ones((32, 2), np.float32)
    c = np.asarray(scaled.matmul(a, b, "mxfp8_e4m3"))
    assert np.isnan(c[0]).all() and c[1].tolist() == [32.0, 32.0]
    big = np.full((1, 2), 1e5, np.float32)  # beyond float16's max 65504: the fp16 operand is inf
    assert scaled.matmul(big, np.ones((2, 1), np.float32), "fp16").tolist() == [[np.inf]]


@pytest.mark.long
def test_recipe_aliases_mean_what_get_recipe_says():
    """``"mxfp8"`` is ``mxfp8_e4m3`` in `scaled.matmul` as in `scaled.quantize_dequantize` (it was refused)."""
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(4, 64)).astype(np.float32), rng.normal(size=(64, 3)).astype(np.float32)
    for alias, name in (("mxfp8", "mxfp8_e4m3"), ("mxfp4_e2m1", "mxfp4")):
        assert scaled.get_block_format(alias).name == name
        assert_bit_exact(scaled.matmul(a, b, alias), scaled.matmul(a, b, name))
    assert_bit_exact(
        scaled.matmul(a, b, "mxfp8"),
        scaled.quantize_dequantize(a, "mxfp8", axis=1) @ scaled.quantize_dequantize(b, "mxfp8", axis=0),
    )


def test_unknown_recipe_lists_the_recipes():
    with pytest.raises(ValueError, match="fmt must be one of") as info:
        scaled.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), "fp64")
    assert all(name in str(info.value) for name in scaled.MATMUL_FORMATS)


def test_bad_operands():
    ok = np.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match="float32"):
        scaled.matmul(ok.astype(np.float64), ok, "bf16")
    with pytest.raises(TypeError, match="array"):
        scaled.matmul([[1.0]], ok, "bf16")
    with pytest.raises(ValueError, match="2-D"):
        scaled.matmul(np.ones(4, np.float32), ok, "bf16")
    with pytest.raises(ValueError, match="contraction"):
        scaled.matmul(np.ones((4, 3), np.float32), ok, "bf16")
