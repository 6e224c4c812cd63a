"""NVFP4's block-scale arithmetic in few operations, against independent references, as bits.

`_rne.round_clamped` (a clamped non-negative float32 rounded to nearest even into a narrow scale
format) against a NumPy nearest-even search over the format's own values and against the general
`_rne.round_rne`; `_bits.reciprocal_of_product` (``fl(1 / fl(d * g))``) against NumPy's float32
arithmetic (IEEE, subnormals kept) and against `_bits.reciprocal` of `_bits.mul_normal`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._core.registry import formats, get_format
from fpemu._scaled import bits as _bits
from fpemu._scaled import rne as _rne
from fpemu.testing import reference

RNG = np.random.default_rng(20261128)
_NAMES = [getattr(f, "name", f) for f in formats()]
CLAMPED = [get_format(n) for n in _NAMES if get_format(n).bits <= 16 and _rne.clamped_applies(get_format(n))]


def _values(fmt):
    """The format's non-negative finite values, increasing."""
    return np.array(sorted({v for c in range(fmt.max_code + 1) if np.isfinite(v := fmt.magnitude_value(c)) and v >= 0}))


def _nearest_even(x, fmt):
    """The exact oracle's nearest-even rounding of non-negative float32 ``x`` into ``fmt``, saturating."""
    return reference.round_array(x, fmt, "nearest_even", saturate=True).astype(np.float32)


def _patterns(fmt, stride):
    """float32 bit patterns in [+0, fmt.max]: a stride over all of them, every float32 subnormal with a
    stride, and every value and midpoint of ``fmt`` with its 4 neighbouring patterns on each side."""
    top = int(np.float32(fmt.max).view(np.uint32))
    values = _values(fmt)
    points = np.concatenate([values, (values[:-1] + values[1:]) / 2]).astype(np.float32).view(np.uint32)
    near = (points.astype(np.int64)[:, None] + np.arange(-4, 5)).ravel()
    parts = [
        np.arange(0, top + 1, stride, dtype=np.int64),
        np.arange(0, 1 << 23, 4093, dtype=np.int64),
        np.array([1, 2, 3, (1 << 23) - 1, 1 << 23, top - 1, top]),
        near,
    ]
    b = np.unique(np.concatenate(parts))
    return b[(b >= 0) & (b <= top)].astype(np.uint32)


@pytest.mark.long
@pytest.mark.parametrize("fmt", CLAMPED, ids=lambda f: f.name)
def test_round_clamped_is_nearest_even(fmt):
    b = _patterns(fmt, stride=40_009)
    got = np.asarray(jax.jit(lambda v: _rne.round_clamped(v, fmt))(jnp.asarray(b)))
    np.testing.assert_array_equal(got, _nearest_even(b.view(np.float32), fmt).view(np.uint32))
    grid = _rne.Grid.for_scale(fmt, jnp.zeros((), jnp.int32), k_min=0)
    general = jax.jit(lambda v: _rne.round_rne(v, grid, fmt, saturate=True, negative_zero=False))(jnp.asarray(b))
    np.testing.assert_array_equal(got, np.asarray(general))


@pytest.mark.long
@pytest.mark.parametrize("stride", [997, pytest.param(61, marks=pytest.mark.slow)])
def test_round_clamped_e4m3fn_dense(stride):
    """NVFP4's scale format: every ``stride``-th pattern of [0, 448] (1.1 million; 18.6 million in the
    slow run), every value's and midpoint's neighbours, and the corner cases."""
    fmt = get_format("e4m3fn")
    b = _patterns(fmt, stride=stride)
    got = np.asarray(jax.jit(lambda v: _rne.round_clamped(v, fmt))(jnp.asarray(b)))
    np.testing.assert_array_equal(got, _nearest_even(b.view(np.float32), fmt).view(np.uint32))
    corners = {  # input -> E4M3 value (PITFALLS.md's e4m3fn cases, and the subnormal/normal edge)
        2.0**-10: 0.0,  # the tie with the smallest subnormal goes to 0
        3 * 2.0**-10: 2.0**-8,  # a tie between 1 and 2 quanta goes to 2 (even)
        15 * 2.0**-10: 2.0**-6,  # rounds up to the smallest normal
        1.0625: 1.0,
        float(np.nextafter(np.float32(1.0625), np.float32(2))): 1.125,
        126.24: 128.0,  # a carry into the exponent
        448.0: 448.0,
        1e-45: 0.0,  # float32 subnormals give +0 (flushed or not)
        1.1754942e-38: 0.0,
    }
    x = np.array(list(corners), np.float32)
    got = np.asarray(jax.jit(lambda v: _rne.round_clamped(v, fmt))(jnp.asarray(x.view(np.uint32))))
    np.testing.assert_array_equal(got, np.array(list(corners.values()), np.float32).view(np.uint32))


def test_clamped_applies_where_the_proof_holds():
    assert _rne.clamped_applies(get_format("e4m3fn")) and _rne.clamped_applies(get_format("e5m2"))
    assert not _rne.clamped_applies(get_format("bf16"))  # smallest subnormal 2**-133: below 2**-125
    assert not _rne.clamped_applies(get_format("fp32"))
    assert not _rne.clamped_applies(get_format("e8m0fnu"))  # no mantissa bits


def _short_positive(n, precision, rng=RNG):
    """Non-negative normal float32 values of at most ``precision`` significant bits, exponents -20..20, and 0."""
    sig = rng.integers(1 << (precision - 1), 1 << precision, n).astype(np.float64)
    val = np.ldexp(sig, rng.integers(-20, 20, n) - precision)
    val[:2] = [0.0, 1.0]
    return val.astype(np.float32)


@pytest.mark.parametrize("precision", [1, 3, 4, 5, 6])
def test_reciprocal_of_product(precision):
    n = 1 << 15
    d = _short_positive(n, precision)
    # tensor scales: random positive normal floats, a third aimed so that d * g lands in [2**-152, 2**-124)
    g = (RNG.integers(0x00800000, 0x7F000000, n, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    aim = np.ldexp(RNG.uniform(1, 2, n // 3), RNG.integers(-152, -124, n // 3)).astype(np.float64)
    target = (aim / np.maximum(d[: n // 3].astype(np.float64), 2.0**-20)).astype(np.float32)
    g[: n // 3] = np.clip(target, np.float32(2.0**-126), np.float32(2.0**127))
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        product = d * g
        keep = product <= np.float32(2.0**126)  # the contract
        expected = np.float32(1) / product
    d, g, expected = d[keep], g[keep], expected[keep]
    got = jax.jit(lambda a, b: _bits.reciprocal_of_product(a, b, precision))(
        jnp.asarray(_bits_of(d)), jnp.asarray(_bits_of(g))
    )
    np.testing.assert_array_equal(_bits_of(got), _bits_of(expected))
    old = jax.jit(lambda a, b: _bits.reciprocal(_bits.mul_normal(a, b)))(
        jnp.asarray(_bits_of(d)), jnp.asarray(_bits_of(g))
    )
    np.testing.assert_array_equal(_bits_of(got), _bits_of(old))
    assert (d.astype(np.float64) * g < 2.0**-126).sum() > n // 10  # the integer branch was exercised


def test_reciprocal_of_product_edges():
    # (d, g, 1 / fl(d * g)): zero, the subnormal quantum, the largest subnormal, 2**-126, the overflow edge
    cases = [
        (0.0, 1.0, np.inf),
        (1.0, 2.0**-126, 2.0**126),
        (0.5, 2.0**-126, 2.0**127),  # d * g = 2**-127, subnormal
        (0.25, 2.0**-126, np.inf),  # 2**-128: 1 / p = 2**128 overflows
        (448.0, 2.0**-126, 2.0**126 / 448),
        (2.0**-9, 2.0**-126, np.inf),  # 2**-135
        (1.5, 2.0**-125 * 0.75, None),  # d * g = 1.125 * 2**-125, normal
        (1.5, float(np.float32(2.0**-126 * 1.25)), None),
        (7.0, float(np.nextafter(np.float32(2.0**-126), np.float32(1))), None),
    ]
    d = np.array([c[0] for c in cases], np.float32)
    g = np.array([c[1] for c in cases], np.float32)
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        expected = np.float32(1) / (d * g)
    for (_, _, want), e in zip(cases, expected, strict=True):
        if want is not None:
            assert e == np.float32(want)
    got = jax.jit(lambda a, b: _bits.reciprocal_of_product(a, b, 4))(jnp.asarray(_bits_of(d)), jnp.asarray(_bits_of(g)))
    np.testing.assert_array_equal(_bits_of(got), _bits_of(expected))


def _bits_of(x):
    return np.asarray(x, np.float32).view(np.uint32)


# e2m1fn (NVFP4's elements) takes `round_clamped`; a few-valued format without an exponent field, the table
E0M3 = fpemu.Format(name="e0m3_no_specials", exponent_bits=0, mantissa_bits=3, bias=0, specials="none")


@pytest.mark.long
@pytest.mark.parametrize("fmt", [get_format("e2m1fn"), E0M3], ids=lambda f: f.name)
def test_round_element_is_the_table_rounding(fmt):
    """The split path's elements: saturated, then `round_clamped` (or the table where it does not apply),
    against the thresholds of `_table.round_to_table` and the exact oracle, over every 1021st
    non-negative pattern (inf and NaN patterns included: they saturate, as the table's), and every
    midpoint's neighbours."""
    from fpemu._scaled import core as _core
    from fpemu._scaled import table as _table

    assert _table.applies(fmt) and _rne.clamped_applies(fmt) == (fmt is not E0M3)
    b = np.unique(np.concatenate([np.arange(0, 1 << 31, 1021, dtype=np.int64), _patterns(fmt, stride=1 << 30)]))
    b = b.astype(np.uint32)
    got = np.asarray(jax.jit(lambda v: _core._round_element(v, fmt))(jnp.asarray(b)))
    entries = [jnp.uint32(int(np.float32(v).view(np.uint32))) for v in _table.positive_values(fmt)]
    table = np.asarray(jax.jit(lambda v: _table.round_to_table(v, entries, fmt))(jnp.asarray(b)))
    np.testing.assert_array_equal(got, table)
    finite = b < 0x7F800000
    reference = _nearest_even(np.minimum(b[finite].view(np.float32), np.float32(fmt.max)), fmt)
    np.testing.assert_array_equal(got[finite], reference.view(np.uint32))
