"""The fast path against the independent NumPy reference, bit for bit: element values, scale codes,
global scale, `BlockArray.dequantize` and the fused `quantize_dequantize`.

Inputs come from hypothesis (structured draws: Gaussian, heavy tails, log-normal, raw bit
patterns, subnormal-range and huge blocks, near-boundary significands, exact ties, zeros, NaN and
inf planted in blocks) and from exhaustive sweeps over every bfloat16 bit pattern.
"""

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpemu._engine import rng as _random
from fpemu.scaled import MXINT8_ELEMENT, BlockArray, BlockFormat, block_formats, get_block_format, quantize_dequantize
from fpemu.testing import scaled_reference as reference

SHAPE = (4, 64)
# a share of the hypothesis profile's examples (ci: 60, thorough: 5000): compilation dominates here
EXAMPLES = settings.default.max_examples


def share(divisor: int) -> settings:
    return settings(max_examples=max(4, EXAMPLES // divisor))


FAST_SUBSET = ["mxfp8_e4m3", "mxfp4", "mxint8", "nvfp4", "fp8_e4m3"]
FLT_MAX = float(np.finfo(np.float32).max)
SPECIALS = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 2.0**-149, -(2.0**-149), FLT_MAX, -FLT_MAX, 2.0**-126]
# significands at the scale rules' boundaries: the element maxima of e2m1 (1.5), e4m3/e5m2/e3m2 (1.75),
# e2m3 (1.875), int8 (127/64), and powers of two
BOUNDARY_SIGS = [1.0, 1.5, 1.75, 1.875, 1.984375]


def _values(kind: str, rng: np.random.Generator, shape) -> np.ndarray:
    n = int(np.prod(shape))
    if kind == "normal":
        x = rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20)
    elif kind == "student_t":
        x = rng.standard_t(3, n)
    elif kind == "lognormal":
        x = rng.lognormal(0, 3, n) * rng.choice([-1, 1], n)
    elif kind == "bits":
        b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        return b.view(np.float32).reshape(shape)
    elif kind == "subnormal":  # denormal-range blocks
        x = rng.standard_normal(n) * 2.0 ** rng.integers(-149, -125)
    elif kind == "huge":
        x = rng.uniform(-1, 1, n) * 2.0 ** rng.integers(100, 128)
    elif kind == "boundary":
        sig = rng.choice(BOUNDARY_SIGS, n) + rng.integers(-2, 3, n) * 2.0**-23
        x = sig * 2.0 ** rng.integers(-140, 120, n).astype(np.float64) * rng.choice([-1, 1], n)
    elif kind == "ties":
        x = rng.integers(-96, 97, n) * 2.0 ** rng.integers(-12, 8)
    elif kind == "wide":  # every block a different magnitude
        x = rng.standard_normal(n) * 2.0 ** rng.integers(-140, 120, -(-n // 16)).repeat(16)[:n]
    else:
        raise AssertionError(kind)
    with np.errstate(over="ignore", under="ignore"):
        return x.astype(np.float32).reshape(shape)


KINDS = ["normal", "student_t", "lognormal", "bits", "subnormal", "huge", "boundary", "ties", "wide"]


@st.composite
def arrays(draw, shape=SHAPE, dtypes=(np.float32,)):
    """float arrays of ``shape`` built from a drawn seed and kind, with specials planted."""
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(KINDS))
    rng = np.random.default_rng(seed)
    x = _values(kind, rng, shape).ravel()
    for _ in range(draw(st.integers(0, 3))):
        x[draw(st.integers(0, x.size - 1))] = np.float32(draw(st.sampled_from(SPECIALS)))
    if draw(st.booleans()):  # an all-zero block (with both zero signs)
        start = draw(st.integers(0, x.size // 16 - 1)) * 16
        x[start : start + 16] = np.where(rng.integers(0, 2, 16), np.float32(-0.0), np.float32(0.0))
    dtype = draw(st.sampled_from(dtypes))
    with np.errstate(over="ignore", invalid="ignore"):
        return x.reshape(shape).astype(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", block_formats())
@settings(max_examples=EXAMPLES)
@given(x=arrays(dtypes=(ml_dtypes.bfloat16, np.float16)), stochastic=st.booleans())
def test_every_recipe_half_precision_and_stochastic(recipe, x, stochastic):
    _check(x, recipe, **({"rounding": "stochastic"} if stochastic else {}))


def _check(x, recipe, **kw):
    """BlockArray.from_array / dequantize / quantize_dequantize against the reference."""
    fast_kw, ref_kw = dict(kw), dict(kw)
    if kw.get("rounding") == "stochastic":
        key = jax.random.key(7)
        fast_kw["key"] = key
        ref_kw["random"] = np.asarray(_random.random_uint32(_random.seeds_from_key(key), x.shape))
    expected = reference.quantize(x, recipe, **ref_kw)
    sa = BlockArray.from_array(jnp.asarray(x), recipe, **fast_kw)
    reference.assert_equal(sa, expected, f"{getattr(recipe, 'name', recipe)} {kw}")
    reference.assert_equal(quantize_dequantize(jnp.asarray(x), recipe, **fast_kw), expected.dequantized, "fused")


@pytest.mark.long
@pytest.mark.parametrize("recipe", block_formats())
@share(3)
@given(x=arrays())
def test_matches_reference(recipe, x):
    _check(x, recipe)


@pytest.mark.long
@pytest.mark.parametrize("recipe", FAST_SUBSET)
@share(6)
@given(x=arrays(dtypes=(ml_dtypes.bfloat16, np.float16)))
def test_matches_reference_half_precision_inputs(recipe, x):
    _check(x, recipe)


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["mxfp8_e4m3", "mxfp6_e2m3", "nvfp4", "fp8_e5m2"])
@share(6)
@given(x=arrays())
def test_stochastic_rounding_matches_reference(recipe, x):
    _check(x, recipe, rounding="stochastic")


@pytest.mark.long
@share(2)
@given(x=arrays(), rounding=st.sampled_from(get_block_format("mxfp6_e3m2").allowed_roundings))
def test_every_rounding_mode_of_a_power_of_two_recipe(x, rounding):
    _check(x, "mxfp6_e3m2", rounding=rounding)


@pytest.mark.long
@share(3)
@given(x=arrays(), rounding=st.sampled_from(get_block_format("fp8_e4m3").allowed_roundings))
def test_every_rounding_mode_of_a_float_recipe(x, rounding):
    _check(x, "fp8_e4m3", rounding=rounding, axis=0)


_E8M0 = "e8m0fnu"
VARIANTS = [
    BlockFormat(name="mxfp4_ceil", element="e2m1fn", block_size=32, scale_format=_E8M0, scale_rule="ceil"),
    BlockFormat(name="mxfp8_even", element="e4m3fn", block_size=32, scale_format=_E8M0, scale_rule="even"),
    BlockFormat(name="mxfp6_ceil_log2", element="e2m3fn", block_size=32, scale_format=_E8M0, scale_rule="ceil_log2"),
    BlockFormat(name="mxint8_ceil", element=MXINT8_ELEMENT, block_size=32, scale_format=_E8M0, scale_rule="ceil"),
    BlockFormat(name="e5m2_rows_e8m0", element="e5m2", scale_format=_E8M0, scale_rule="ocp", margin=2),
    BlockFormat(name="e4m3_pow2_fp32", element="e4m3fn", scale_format="fp32", scale_rule="ceil", margin=-1),
    BlockFormat(name="fp8_margin", element="e5m2", scale_format="fp32", scale_rule="float", margin=3),
    BlockFormat(name="e4m3_blocks_fp32", element="e4m3fn", block_size=16, scale_format="fp32", scale_rule="float"),
    BlockFormat(name="nvfp4_one_level", element="e2m1fn", block_size=16, scale_format="e4m3fn", scale_rule="float"),
    BlockFormat(
        name="mxfp8_no_sat", element="e4m3fn", block_size=32, scale_format=_E8M0, scale_rule="ocp", saturate=False
    ),
    BlockFormat(
        name="mxfp8e5_no_sat", element="e5m2", block_size=8, scale_format=_E8M0, scale_rule="ocp", saturate=False
    ),
    BlockFormat(
        name="mxfp4_no_sat", element="e2m1fn", block_size=32, scale_format=_E8M0, scale_rule="ocp", saturate=False
    ),
]


@pytest.mark.parametrize("recipe", VARIANTS, ids=lambda r: r.name)
@share(8)
@given(x=arrays())
def test_custom_recipes_match_reference(recipe, x):
    _check(x, recipe, axis=-1)


@pytest.mark.long
@pytest.mark.parametrize("axis", [None, 0, -1])
@share(6)
@given(x=arrays())
def test_per_tensor_and_per_axis_match_reference(axis, x):
    _check(x, "fp8_e5m2", axis=axis)
    _check(x, VARIANTS[5], axis=axis)


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4", "mxfp6_e2m3"])
@share(8)
@given(x=arrays(shape=(3, 50)))
def test_padded_last_block_matches_reference(recipe, x):
    _check(x, recipe, pad=True)


@share(4)
@given(x=arrays(), exponents=st.lists(st.integers(-126, 126), min_size=8, max_size=8))
def test_given_power_of_two_scales_match_reference(x, exponents):
    scale = np.ldexp(1.0, np.array(exponents)).reshape(4, 2).astype(np.float32)
    _check(x, "mxfp8_e4m3", scale=scale)


@share(4)
@given(x=arrays(), scale=st.floats(2.0**-126, 2.0**126, width=32))
def test_given_float_scales_match_reference(x, scale):
    _check(x, "fp8_e4m3", scale=np.float32(scale))


@pytest.mark.parametrize("name", [n for n in block_formats() if get_block_format(n).scale_kind == "fp32"])
def test_one_float_scale_on_both_sides_of_normal_products(name):
    """One float32 scale (`fpemu._scaled.bits.mul_scale`): from the least scale whose products with
    every nonzero element are normal (2**-126 over the element's smallest subnormal) up, every
    product is a float product; below it, some are float32 subnormals, computed from the integer
    significands. Scales at that edge, one float32 step below it, the least and a large given
    scale, and the scale computed from the data: the same bits as the reference, subnormal
    products, ties at their quantum and signed zeros included."""
    element = get_block_format(name).element
    edge = np.float32(2.0**-126 / element.min_subnormal)
    below = np.nextafter(edge, np.float32(0))
    rng = np.random.default_rng(5)
    for scale in (edge, below, np.float32(2.0**-126), np.float32(2.0**100), None):
        unit = np.float32(1.0 if scale is None else scale)
        x = (rng.standard_normal(SHAPE) * element.max / 4 * unit).astype(np.float32)
        x[0, :6] = np.array([1.0, 1.5, 2.5, -1.0, 3.0, 0.5]) * element.min_subnormal * unit  # the least products, ties
        x[1, :2] = [-0.0, 0.0]
        _check(x, name, **({} if scale is None else {"scale": scale}))


def _every_bfloat16() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.long
@pytest.mark.parametrize(
    "recipe", [r if r in FAST_SUBSET else pytest.param(r, marks=pytest.mark.slow) for r in block_formats()]
)
def test_every_bfloat16_value_in_consecutive_blocks(recipe):
    """All 2**16 bfloat16 patterns in order: blocks of neighbouring codes, from subnormal to NaN."""
    x = _every_bfloat16().reshape(-1, 256)
    axis = -1 if get_block_format(recipe).block_size else 0
    _check(x, recipe, axis=axis)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [*block_formats(), *VARIANTS], ids=str)
@pytest.mark.parametrize("companion", [1.0, 3.0, 2.0**-130, 2.0**100])
def test_every_bfloat16_value_beside_a_fixed_amax(recipe, companion):
    """Every bfloat16 value v in a block [v, companion, 0, ...]: every element position relative to
    every kind of scale (the v's above the companion set the scale themselves)."""
    v = _every_bfloat16()
    r = get_block_format(recipe)
    width = r.block_size or 4
    x = np.zeros((v.size, width), np.float32)
    x[:, 0] = v
    x[:, 1] = np.float32(companion)
    _check(x, r, axis=-1)


def test_reference_agrees_with_the_spec_by_hand():
    """MXFP4 block worked by hand from OCP MX v1.0: amax 12 -> X = 2**(3 - 2) = 2, P = round(V / 2)."""
    x = np.zeros((1, 32), np.float32)
    x[0, :6] = [12.0, -5.0, 0.3, 0.75, 2.5 * 2, -7.0]
    r = reference.quantize(x, "mxfp4")
    assert r.scale.tolist() == [[128]]  # E8M0 code of 2**1
    # V / X = 6, -2.5 (tie: even 2), 0.15, 0.375 (above the 0.25 midpoint), 2.5 (tie: 2), -3.5 (tie: even 4)
    np.testing.assert_array_equal(r.values[0, :6], [6.0, -2.0, 0.0, 0.5, 2.0, -4.0])
    np.testing.assert_array_equal(r.dequantized[0, :6], [12.0, -4.0, 0.0, 1.0, 4.0, -8.0])


def test_variants_are_distinct_recipes():
    assert len({dataclasses.astuple(r)[1:] for r in VARIANTS}) == len(VARIANTS)
