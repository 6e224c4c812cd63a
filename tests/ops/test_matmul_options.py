"""The rounding options of `fpemu.quantize` through the emulated matmul (issue 15): IEEE P3109's
saturation modes, the stochastic-rounding variants and ties-to-even for exponent-only formats, in
every rounding of a dot (operands, running sum, output), against the exact sequential reference
and through the Pallas kernel in interpret mode."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fpemu
from fpemu.kernels import matmul_kernel
from fpemu.testing import dot_general_reference

DIMS = (((1,), (0,)), ((), ()))
KEY = jax.random.key(3)


def _operands(seed: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((3, 8)) * scale).astype(np.float32)
    b = (rng.standard_normal((8, 2)) * scale).astype(np.float32)
    a[0, 0], a[1, 1], b[2, 1] = 3e4, -1e6, 2e5  # beyond every max here: overflow in the operands
    return a, b


def _bits(x) -> np.ndarray:
    """The float32 bits, every NaN as the one quiet NaN (a dot's NaN carries no meaningful sign)."""
    x = np.asarray(x, np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), x).view(np.uint32)


@pytest.mark.parametrize("saturate", [False, True, "sat_finite", "sat_propagate", "ovf_inf"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "p3109_k8p3se", "e5m2"])
def test_saturation_modes_in_every_rounding_equal_the_reference(fmt, saturate):
    a, b = _operands(0, 200.0)
    options = dict(lhs=fmt, rhs=fmt, out=fmt, accumulate="bf16", accumulate_every=2, saturate=saturate)
    got = fpemu.dot_general(a, b, DIMS, **options)
    np.testing.assert_array_equal(_bits(got), _bits(dot_general_reference(a, b, DIMS, **options)))


def test_saturation_modes_differ_where_p3109_says():
    """SatFinite clamps infinities too, SatPropagate keeps them, OvfInf overflows to infinity."""
    a = np.array([[np.inf], [1e6]], np.float32)  # an infinity, and a finite value beyond max (49152)
    b = np.ones((1, 1), np.float32)
    results = {
        mode: np.asarray(fpemu.dot_general(a, b, DIMS, lhs="p3109_k8p3se", saturate=mode)).ravel().tolist()
        for mode in ("sat_finite", "sat_propagate", "ovf_inf")
    }
    assert results["sat_finite"] == [49152.0, 49152.0]
    assert results["sat_propagate"] == [np.inf, 49152.0]
    assert results["ovf_inf"] == [np.inf, np.inf]


@pytest.mark.long
@pytest.mark.parametrize("variant", ["floor", "nearest_even", "nearest_odd", "nearest_away"])
def test_stochastic_variants_in_every_rounding_equal_the_reference(variant):
    a, b = _operands(1, 3.0)
    options = dict(
        lhs="e4m3fn", rhs="e5m2", out="bf16", accumulate="bf16", accumulate_every=3, rounding="stochastic",
        accumulate_rounding="stochastic", stochastic_variant=variant, key=KEY,
    )  # fmt: skip
    got = fpemu.dot_general(a, b, DIMS, **options)
    np.testing.assert_array_equal(_bits(got), _bits(dot_general_reference(a, b, DIMS, **options)))


@pytest.mark.long
def test_stochastic_variants_change_the_operands_as_quantize_does():
    """The operand rounding of the dot is `fpemu.quantize` with the same key stream and variant."""
    a = np.full((1, 16), 1.0 + 2.0**-5 * 3 / 8, np.float32)  # 3/8 of an e4m3fn step above 1
    b = np.eye(16, dtype=np.float32)
    lhs_key = jax.random.split(KEY, 4)[0]  # the operand streams: docs/matmul.md
    for variant in ("floor", "nearest_even", "nearest_odd", "nearest_away"):
        got = fpemu.dot_general(a, b, DIMS, lhs="e4m3fn", rounding="stochastic", stochastic_variant=variant, key=KEY)
        expected = fpemu.quantize(a, "e4m3fn", rounding="stochastic", stochastic_variant=variant, key=lhs_key)
        np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("ties", ["away", "even"])
def test_exponent_ties_in_an_exponent_only_operand_format(ties):
    """E8M0 operands: 1.5 * 2**k is a tie between 2**k and 2**(k+1); "away" goes up, "even" to the even
    biased exponent."""
    a = np.array([[1.5, 3.0, 6.0, 12.0]], np.float32)
    b = np.ones((4, 1), np.float32)
    got = fpemu.dot_general(a, b, DIMS, lhs="e8m0fnu", exponent_ties=ties)
    expected = dot_general_reference(a, b, DIMS, lhs="e8m0fnu", exponent_ties=ties)
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    rounded = fpemu.quantize(a, "e8m0fnu", exponent_ties=ties)
    assert float(got[0, 0]) == float(np.asarray(rounded, np.float64).sum())


def test_the_options_are_checked_and_named():
    a, b = _operands(2, 1.0)
    with pytest.raises(ValueError, match="stochastic_variant is only used with rounding='stochastic'"):
        fpemu.dot_general(a, b, DIMS, lhs="e4m3fn", stochastic_variant="nearest_even")
    with pytest.raises(ValueError, match="stochastic_variant must be one of"):
        fpemu.dot_general(a, b, DIMS, lhs="e4m3fn", rounding="stochastic", stochastic_variant="odd", key=KEY)
    with pytest.raises(ValueError, match="exponent_ties must be one of"):
        fpemu.matmul(a, b, lhs="e8m0fnu", exponent_ties="up")
    with pytest.raises(TypeError, match="saturate must be a bool .* 'sat_finite'"):
        fpemu.matmul(a, b, lhs="e4m3fn", saturate="sat_finit")


@pytest.mark.long
@pytest.mark.parametrize(
    "options",
    [
        dict(lhs="p3109_k8p3se", rhs="e4m3fn", out="p3109_k8p3se", saturate="sat_propagate"),
        dict(lhs="e4m3fn", rhs="e4m3fn", out="bf16", rounding="stochastic", stochastic_variant="nearest_away"),
        dict(lhs="e8m0fnu", rhs="e4m3fn", exponent_ties="even"),
    ],
    ids=["saturation", "variant", "exponent-ties"],
)
def test_the_kernel_takes_the_options_with_the_same_bits(options):
    a, b = _operands(4, 50.0)
    a, b = np.nan_to_num(a, nan=1.0, posinf=500.0), np.nan_to_num(b, nan=1.0, posinf=500.0)
    key = {"key": KEY} if options.get("rounding") == "stochastic" else {}
    got = matmul_kernel(a, b, interpret=True, **options, **key)
    expected = fpemu.matmul(a, b, **options, **key)
    np.testing.assert_array_equal(_bits(got), _bits(expected))
