"""IEEE P3109 and OCP INT8 through quantize/encode; the stochastic-rounding variants; explicit random bits.

The exhaustive sweeps (every 16-bit input, every option) live in tests/ops/test_exhaustive.py and the
oracle's own checks (every code of every P3109 format against the draft standard's Decode) in
tests/testing/test_reference.py. This file pins what the engine adds: explicit random bits equal to
the keyed path bit for bit, the variants' exact up-probabilities over all 2**k draws, P3109 widths
other than 8 bits, and the argument checks.
"""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fpemu
import fpemu._core.format
from fpemu._core.registry import p3109_format  # public as fpemu.p3109_format
from fpemu._engine import rng as _random
from fpemu._ops import quantize as _quantize
from fpemu.kernels import quantize_kernel
from fpemu.testing import reference

VARIANTS = ["floor", "nearest_even", "nearest_odd", "nearest_away"]
SATURATIONS = [False, True, "sat_finite", "sat_propagate", "ovf_inf"]


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same_bits(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    both_nan = np.isnan(a) & np.isnan(b) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    assert (both_nan | (_bits(a) == _bits(b))).all()


def _keyed_bits(key, shape, k: int) -> jax.Array:
    """The k-bit draws the keyed path uses: the top k of the counter-based generator's uint32 words."""
    return _random.random_uint32(_random.seeds_from_key(key), shape) >> jnp.uint32(32 - k)


def _sample(n: int, seed: int = 0) -> jax.Array:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(n // 2) * 30, rng.standard_normal(n - n // 2) * 2.0**-14])
    return jnp.asarray(x.astype(np.float32))


# -- explicit random bits -----------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize(
    ("fmt", "k", "variant"),
    [("e4m3fn", None, "floor"), ("e2m1fn", 3, "nearest_even"), ("bf16", 8, "nearest_odd"),
     ("p3109_k8p3se", 1, "nearest_away"), ("int8_ocp", 5, "floor"), ("p3109_k8p1ue", 2, "nearest_even")],
)  # fmt: skip
def test_explicit_random_bits_equal_the_keyed_path(fmt, k, variant):
    x = _sample(300).reshape(3, 100)
    key = jax.random.key(11)
    opts = dict(rounding="stochastic", random_bits=k, stochastic_variant=variant)
    random = _keyed_bits(key, x.shape, k or 32)
    _same_bits(fpemu.quantize(x, fmt, random=random, **opts), fpemu.quantize(x, fmt, key=key, **opts))
    _same_bits(fpemu.encode(x, fmt, random=np.asarray(random), **opts), fpemu.encode(x, fmt, key=key, **opts))


def test_stochastic_bits_are_the_keyed_draws():
    key = jax.random.key(5)
    for k in (None, 1, 7, 32):
        bits = _quantize.stochastic_bits(key, (3, 4), k)  # public as fpemu.stochastic_bits
        assert bits.dtype == jnp.uint32 and bits.shape == (3, 4)
        np.testing.assert_array_equal(np.asarray(bits), np.asarray(_keyed_bits(key, (3, 4), k or 32)))
    assert _quantize.stochastic_bits(jax.random.PRNGKey(5), 6, 3).shape == (6,)
    with pytest.raises(ValueError, match="random_bits must be None or an int in"):
        _quantize.stochastic_bits(key, (2,), 0)
    with pytest.raises(TypeError, match="key must be a single JAX PRNG key"):
        _quantize.stochastic_bits(0, (2,))


@pytest.mark.long
def test_explicit_random_bits_under_jit_vmap_grad_and_float64():
    x = _sample(64).reshape(4, 16)
    key = jax.random.key(3)
    random = _keyed_bits(key, x.shape, 6)
    keyed = fpemu.quantize(x, "e5m2", rounding="stochastic", key=key, random_bits=6)
    f = jax.jit(lambda v, r: fpemu.quantize(v, "e5m2", rounding="stochastic", random=r, random_bits=6))
    _same_bits(f(x, random), keyed)
    # traced bits are not range-checked: only their low random_bits bits are read
    _same_bits(f(x, random + jnp.uint32(7 << 6)), keyed)
    rows = jax.vmap(lambda v, r: fpemu.quantize(v, "e5m2", rounding="stochastic", random=r, random_bits=6))(x, random)
    _same_bits(rows, keyed)
    grad = jax.grad(lambda v: fpemu.quantize(v, "e5m2", rounding="stochastic", random=random, random_bits=6).sum())(x)
    np.testing.assert_array_equal(np.asarray(grad), np.ones(x.shape, np.float32))
    # a NumPy float64 input with x64 off is rounded from its float64 value, with the same bits
    x64 = np.asarray(x, np.float64) + 2.0**-40
    got = fpemu.quantize(x64, "e5m2", rounding="stochastic", random=np.asarray(random), random_bits=6)
    _same_bits(got, fpemu.quantize(x64, "e5m2", rounding="stochastic", key=key, random_bits=6))


@pytest.mark.long
def test_explicit_random_bits_broadcast_to_the_input():
    x = _sample(24).reshape(2, 3, 4)
    row = jnp.array([0, 1, 2, 3], jnp.uint8)
    full = jnp.broadcast_to(row, x.shape).astype(jnp.uint32)
    opts = dict(rounding="stochastic", random_bits=2, stochastic_variant="nearest_away")
    _same_bits(fpemu.quantize(x, "e4m3fn", random=row, **opts), fpemu.quantize(x, "e4m3fn", random=full, **opts))
    _same_bits(fpemu.quantize(x, "e4m3fn", random=3, **opts), fpemu.quantize(x, "e4m3fn", random=full * 0 + 3, **opts))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(rounding="stochastic", random=jnp.zeros(4, jnp.uint32), key=jax.random.key(0)), ValueError, "not both"),
        (dict(random=jnp.zeros(4, jnp.uint32)), ValueError, "random is only used with rounding='stochastic'"),
        (dict(rounding="stochastic", random=jnp.full(4, 8), random_bits=3), ValueError, r"\[0, 2\*\*3\).*got 8"),
        (dict(rounding="stochastic", random=np.array([-1, 0, 0, 0])), ValueError, "got -1"),
        (dict(rounding="stochastic", random=jnp.zeros(5, jnp.uint32)), ValueError, r"shape \(5,\) does not broadcast"),
        (dict(rounding="stochastic", random=jnp.zeros(4)), TypeError, "random must be an integer array"),
        (dict(rounding="stochastic", random=np.zeros(4, bool)), TypeError, "got a bool"),
        (dict(rounding="stochastic", random="0"), TypeError, "random must be an integer array"),
        (dict(rounding="stochastic"), ValueError, "needs key"),
        (dict(stochastic_variant="nearest_even"), ValueError, "stochastic_variant is only used with rounding='stochastic'"),
        (dict(rounding="stochastic", key=jax.random.key(0), stochastic_variant="fast"), ValueError,
         "stochastic_variant must be one of 'floor'"),
        (dict(exponent_ties="odd"), ValueError, "exponent_ties must be one of 'away', 'even'"),
        (dict(saturate="satfinite"), TypeError, "saturate must be a bool.*did you mean 'sat_finite'"),
        (dict(saturate=1), TypeError, "saturate must be a bool"),
    ],
)  # fmt: skip
def test_argument_errors(kwargs, error, match):
    for op in (fpemu.quantize, fpemu.encode):
        with pytest.raises(error, match=match):
            op(jnp.ones(4), "e4m3fn", **kwargs)


@pytest.mark.long
def test_the_pallas_engine_takes_explicit_bits_as_the_xla_engine_does():
    x = jnp.linspace(-3.0, 3.0, 256, dtype=jnp.float32) + 0.01
    bits = fpemu.stochastic_bits(jax.random.key(5), x.shape)
    for variant in ("floor", "nearest_even"):
        spec = _quantize.rounding_spec(
            "e4m3fn", "stochastic", False, True, None, None, random=bits, stochastic_variant=variant
        )
        words = _quantize.seeds_for(spec, None, bits, x.shape)
        xla = _quantize.quantize_with_spec(x, words, spec, "xla")
        kernel = _quantize.quantize_with_spec(x, words, spec, "pallas_interpret")
        np.testing.assert_array_equal(np.asarray(kernel).view(np.uint32), np.asarray(xla).view(np.uint32))
        keyed = fpemu.quantize(x, "e4m3fn", rounding="stochastic", key=jax.random.key(5), stochastic_variant=variant)
        np.testing.assert_array_equal(np.asarray(kernel).view(np.uint32), np.asarray(keyed).view(np.uint32))


@pytest.mark.parametrize(
    "fmt, options",
    [
        ("e8m0fnu", dict(exponent_ties="even")),
        ("p3109_k8p3se", dict(saturate="sat_propagate")),
        ("p3109_k8p1ue", dict(rounding="stochastic", stochastic_variant="nearest_even", random_bits=3)),
        ("e4m3fn", dict(rounding="stochastic", stochastic_variant="nearest_odd")),
    ],
    ids=["exponent-ties", "p3109-saturation", "p3109-variant", "variant"],
)
def test_the_quantize_kernel_runs_the_new_options_with_the_same_bits(fmt, options):
    x = jnp.asarray(np.geomspace(2.0**-12, 2.0**18, 257, dtype=np.float32) * np.tile([1, -1], 129)[:257])
    key = {"key": jax.random.key(9)} if options.get("rounding") == "stochastic" else {}
    got = quantize_kernel(x, fmt, interpret=True, **options, **key)
    expected = fpemu.quantize(x, fmt, **options, **key)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(expected).view(np.uint32))


# -- the stochastic variants, exactly -----------------------------------------------------------------


def _threshold(f: Fraction, k: int, variant: str) -> int:
    scaled = f * (1 << k)
    n = scaled.numerator // scaled.denominator
    frac = scaled - n
    half = Fraction(1, 2)
    if variant == "floor" or frac == 0:
        return n
    if variant == "nearest_away":
        return n + (frac >= half)
    if frac != half:
        return n + (frac > half)
    return n + (n % 2 if variant == "nearest_even" else 1 - n % 2)


# The default variant ("floor") on the classic formats: tests/ops/test_quantize.py.
_DRAW_CASES = [
    *((fmt, k, variant) for fmt in ("e2m1fn", "e8m0fnu", "p3109_k8p1ue", "int8_ocp") for k in (1, 3, 8)
      for variant in VARIANTS[1:]),
    *((fmt, 3, "floor") for fmt in ("p3109_k8p1ue", "int8_ocp", "p3109_k8p3se")),
    *(("bf16", k, variant) for k in (3, 8) for variant in VARIANTS[1:]),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "k", "variant"), _DRAW_CASES)
def test_up_probability_is_exact_over_all_draws(fmt, k, variant):
    """Feed every k-bit draw as explicit random bits: exactly T(2**k f) of them round up."""
    fmt = fpemu.get_format(fmt)
    rng = np.random.default_rng(k)
    lo_x = 1.0 if fmt.max > 4 else 0.1
    x = np.concatenate([rng.uniform(lo_x, min(fmt.max, 3.0), 24), rng.uniform(0, 4, 8) * fmt.min_subnormal,
                        [fmt.min_normal if fmt.min_normal < fmt.max else fmt.max, 1.0 if fmt.max >= 1 else fmt.max]])  # fmt: skip
    x = x.astype(np.float32)
    draws = np.broadcast_to(np.arange(1 << k, dtype=np.uint32), (x.size, 1 << k))
    y = np.asarray(fpemu.quantize(jnp.asarray(np.repeat(x[:, None], 1 << k, axis=1)), fmt, rounding="stochastic",
                                  random=draws, random_bits=k, stochastic_variant=variant))  # fmt: skip
    for i, xi in enumerate(x.tolist()):
        lo = reference.round_scalar(xi, fmt, rounding="toward_zero")
        hi = reference.round_scalar(xi, fmt, rounding="toward_positive")
        if hi == lo:
            assert np.all(y[i] == np.float32(lo)), xi  # representable: never moves
            continue
        assert set(y[i].tolist()) <= {lo, hi}
        f = (Fraction(xi) - Fraction(lo)) / (Fraction(hi) - Fraction(lo))
        assert int(np.sum(y[i] == np.float32(hi))) == _threshold(f, k, variant), (xi, lo, hi, f)


def test_issue_example_277_in_e5m2_with_3_random_bits():
    """fpemu's stochastic (gfloat StochasticFastest) rounds 277 up with probability 0.25, gfloat's
    Stochastic (the remainder rounded to 3 bits, nearest even) with 0.375 (the exact f is 21/64)."""
    x = jnp.full(8, 277.0, jnp.float32)
    up = {}
    for variant in VARIANTS:
        y = fpemu.quantize(x, "e5m2", rounding="stochastic", random=jnp.arange(8), random_bits=3,
                           stochastic_variant=variant)  # fmt: skip
        up[variant] = float(jnp.mean(y == 320.0))
    assert up == {"floor": 0.25, "nearest_even": 0.375, "nearest_odd": 0.375, "nearest_away": 0.375}


@pytest.mark.long
@pytest.mark.parametrize("variant", ["nearest_even", "nearest_odd", "nearest_away"])
def test_variants_are_unbiased_on_average(variant):
    """E[q(x)] over the 2**k draws differs from x by at most half a draw's weight of the gap."""
    k = 4
    x = np.random.default_rng(5).uniform(1.0, 2.0, 400).astype(np.float32)
    draws = np.broadcast_to(np.arange(1 << k, dtype=np.uint32), (x.size, 1 << k))
    y = np.asarray(fpemu.quantize(jnp.asarray(np.repeat(x[:, None], 1 << k, axis=1)), "e4m3fn", rounding="stochastic",
                                  random=draws, random_bits=k, stochastic_variant=variant))  # fmt: skip
    gap = 0.125  # e4m3fn's spacing in [1, 2)
    assert np.max(np.abs(y.mean(axis=1) - x)) <= gap * 2.0 ** -(k + 1) + 1e-7


# -- P3109 beyond 8 bits -------------------------------------------------------------------------------


_OTHER_WIDTHS = [
    (k, p, signed, extended)
    for k, p in [(3, 1), (5, 5), (11, 4), (12, 12)]
    for signed in (True, False)
    for extended in (True, False)
    if not (signed and p == k)  # outside P3109 (tests/testing/test_reference.py pins fpemu's reading)
]


@pytest.mark.parametrize(("k", "p", "signed", "extended"), _OTHER_WIDTHS)
def test_other_widths_decode_and_round_like_the_reference(k, p, signed, extended):
    fmt = p3109_format(k, p, signed=signed, extended=extended)
    codes = np.arange(fmt.num_codes)
    values = np.asarray(fpemu.decode(codes.astype(fmt.code_dtype), fmt))
    expected = np.array([reference.decode_scalar(int(c), fmt) for c in codes])
    np.testing.assert_array_equal(values, expected.astype(np.float32))
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: +-inf inputs, wanted too
        x = np.concatenate([expected, (expected[:-1] + expected[1:]) / 2, expected * 1.3]).astype(np.float32)
    x = x[~np.isnan(x)]
    for rounding, saturate in [("nearest_even", False), ("to_odd", "ovf_inf"), ("toward_negative", "sat_propagate")]:
        got = np.asarray(fpemu.encode(jnp.asarray(x), fmt, rounding=rounding, saturate=saturate))
        np.testing.assert_array_equal(got, reference.encode_array(x, fmt, rounding=rounding, saturate=saturate))


@pytest.mark.slow
@pytest.mark.parametrize("k", range(3, 17))
def test_every_p3109_format_every_16_bit_input(k):
    """Every P3109 format K = 3..16 that fpemu can hold, every float16/bfloat16 pattern, nearest-even
    and stochastic rounding, against the reference."""
    h = np.arange(1 << 16, dtype=np.uint16)
    x = np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])
    random = np.asarray(_keyed_bits(jax.random.key(k), x.shape, 32))
    for p in range(1, k + 1):
        for signed in (True, False):
            for extended in (True, False):
                try:
                    fmt = p3109_format(k, p, signed=signed, extended=extended)
                except ValueError:
                    continue
                if not fpemu._core.format.fits(fmt, fpemu.get_format("fp32")):
                    continue
                for opts in [dict(), dict(rounding="stochastic", random=random, saturate="ovf_inf")]:
                    codes = np.asarray(fpemu.encode(jnp.asarray(x), fmt, **opts))
                    ref_opts = dict(opts, random=random.astype(np.uint64)) if opts else opts
                    np.testing.assert_array_equal(codes, reference.encode_array(x, fmt, **ref_opts), err_msg=fmt.name)


# -- random P3109 formats, boundary inputs ------------------------------------------------------------


def _boundary_inputs(fmt, dtype, seed: int) -> np.ndarray:
    """Every kind of boundary of ``fmt`` in ``dtype``: values, ties and one input-ulp either side, max
    and the overflow tie, the smallest values, zeros, infinities, NaN; both signs."""
    rng = np.random.default_rng(seed)
    top = fmt.max_code
    codes = np.unique(np.concatenate([rng.integers(0, top + 1, 24), [0, 1, top - 1, top, 1 << fmt.mantissa_bits]]))
    codes = codes[(codes >= 0) & (codes <= top)]
    lo = np.array([fmt.magnitude_value(int(c)) for c in codes])
    hi = np.array([fmt.magnitude_value(int(c) + 1) if c < top else 2 * fmt.max - fmt.magnitude_value(top - 1)
                   for c in codes])  # fmt: skip
    finfo = np.finfo(dtype)
    with np.errstate(over="ignore"):
        points = np.concatenate([lo, lo + (hi - lo) / 2, hi, [fmt.min_subnormal / 2, 0.0]])
        points = points[np.abs(points) <= finfo.max].astype(dtype)
        near = np.concatenate([points, np.nextafter(points, dtype(np.inf)), np.nextafter(points, dtype(0))])
    values = np.concatenate([near, [np.inf, np.nan, finfo.smallest_subnormal, finfo.max]]).astype(dtype)
    return np.concatenate([values, -values])


@pytest.mark.long
@settings(max_examples=15, deadline=None)
@given(
    k=st.integers(3, 16), p_frac=st.floats(0, 1), signed=st.booleans(), extended=st.booleans(),
    rounding=st.sampled_from(fpemu.ROUNDING_MODES), saturate=st.sampled_from(SATURATIONS), subnormals=st.booleans(),
    seed=st.integers(0, 2**16),
)  # fmt: skip
def test_random_p3109_formats_match_the_reference(k, p_frac, signed, extended, rounding, saturate, subnormals, seed):
    p = 1 + int(p_frac * (k - 1))
    try:
        fmt = p3109_format(k, p, signed=signed, extended=extended)
    except ValueError:
        assume(False)
    f64 = not fpemu._core.format.fits(fmt, fpemu.get_format("fp32"))
    with jax.enable_x64(f64):
        x = _boundary_inputs(fmt, np.float64 if f64 else np.float32, seed)
        opts = dict(
            rounding=rounding, saturate=saturate, subnormals=subnormals, exponent_ties=("away", "even")[seed % 2]
        )
        ref_opts = dict(opts)
        if rounding == "stochastic":
            random = np.random.default_rng(seed).integers(0, 8, x.shape)
            variant = VARIANTS[seed % 4]
            opts.update(random=random, random_bits=3, stochastic_variant=variant)
            ref_opts.update(random=random.astype(np.uint64), random_bits=3, stochastic_variant=variant)
        codes, values = reference.round_and_encode_array(x, fmt, **ref_opts)
        np.testing.assert_array_equal(np.asarray(fpemu.encode(jnp.asarray(x), fmt, **opts)), codes, err_msg=fmt.name)
        y = np.asarray(fpemu.quantize(jnp.asarray(x), fmt, **opts)).astype(np.float64)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(values))
        finite = ~np.isnan(values)
        np.testing.assert_array_equal(y[finite], values[finite])
        np.testing.assert_array_equal(np.signbit(y[finite]), np.signbit(values[finite]))
