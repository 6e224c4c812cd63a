"""fpemu.emulate with the rounding options of fpemu.quantize: IEEE P3109's saturation modes, the
stochastic-rounding variants and ``exponent_ties``, in results, literals and DotPolicy dots.

Each check compares emulate with the program rounded by hand (`fpemu.quantize` / `fpemu.dot_general`
with the same options and the same site key), bit for bit.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._emulate import rules_dot
from fpemu._emulate.rounding import fold_key
from fpemu._engine.rng import seeds_from_key

SATURATIONS = [False, True, "sat_finite", "sat_propagate", "ovf_inf"]
VARIANTS = ["floor", "nearest_even", "nearest_odd", "nearest_away"]
SPECIALS = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e6, -1e6, 3.0e4, 1.3, -2.7, 2.0**-20]


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def assert_same_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float32)), nan)
    np.testing.assert_array_equal(_bits(actual)[~nan], _bits(expected)[~nan])


def _site_key(key, site: int = 1):
    """The key of emulate's ``site``-th rounding site (sites are numbered from 1 in program order)."""
    return fold_key(seeds_from_key(key), site)


X = jnp.asarray(np.concatenate([SPECIALS, np.random.default_rng(0).standard_normal(53) * 300]), jnp.float32)


# -- saturation: every mode of fpemu.quantize ---------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "rounding"), [("p3109_k8p3se", "to_odd"), ("e5m2", "nearest_even")])
@pytest.mark.parametrize("saturate", SATURATIONS, ids=str)
def test_saturation_modes_equal_hand_inserted_quantize(saturate, fmt, rounding):
    r = lambda t: fpemu.quantize(t, fmt, rounding=rounding, saturate=saturate)
    policy = fpemu.Policy(default=fmt, rounding=rounding, saturate=saturate)
    got = fpemu.emulate(lambda v: v * 2.0 + 1.0, policy)(X)
    assert_same_bits(got, r(r(r(X) * 2.0) + 1.0))


def test_saturation_modes_differ_under_emulate():
    """The modes reach the rounding: infinities (sat_propagate keeps them, sat_finite clamps) and
    to_odd overflow (ovf_inf overflows, False does not) give different results."""
    run = lambda fmt, mode, rounding="nearest_even": np.asarray(
        fpemu.emulate(lambda v: v * 1.0, fpemu.Policy(default=fmt, saturate=mode, rounding=rounding))(X)
    )
    assert np.isinf(run("e5m2", "sat_propagate")[0]) and run("e5m2", "sat_finite")[0] == 57344.0
    assert run("p3109_k8p3se", False, "to_odd")[5] != run("p3109_k8p3se", "ovf_inf", "to_odd")[5]


@pytest.mark.parametrize("saturate", SATURATIONS, ids=str)
def test_saturation_of_data_already_in_the_format(saturate):
    """bf16 data under a bf16 policy: a no-op unless the mode clamps infinities (True, sat_finite)."""
    x = jnp.asarray([np.inf, -np.inf, 1.5, np.nan], jnp.bfloat16)
    got = fpemu.emulate(lambda v: -v, fpemu.Policy(default="bf16", saturate=saturate))(x)
    assert_same_bits(got, -fpemu.quantize(x, "bf16", saturate=saturate))
    clamps = saturate in (True, "sat_finite")
    assert np.isinf(np.asarray(got, np.float32)[0]) != clamps


def test_literals_use_the_saturation_mode():
    """A literal beyond the format's range is rounded on the host with the policy's mode."""
    for mode in SATURATIONS:
        policy = fpemu.Policy(default="e5m2", saturate=mode, round_inputs=False)
        lit = fpemu.quantize(jnp.float32(1e6), "e5m2", saturate=mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", fpemu.PrecisionWarning)
            got = fpemu.emulate(lambda v: v + 1e6, policy)(jnp.zeros((1,), jnp.float32))
        # a literal that overflows to ±inf or NaN changes meaning (a PrecisionWarning); one clamped to max does not
        warned = [str(w.message) for w in caught if issubclass(w.category, fpemu.PrecisionWarning)]
        assert len(warned) == (0 if np.isfinite(float(lit)) else 1), (mode, warned)
        assert_same_bits(got, fpemu.quantize(jnp.zeros((1,), jnp.float32) + lit, "e5m2", saturate=mode))


# -- stochastic variants: the same key stream as fpemu.quantize ------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("random_bits", [3])
def test_stochastic_variant_equals_quantize_with_the_site_key(variant, random_bits):
    key = jax.random.key(11)
    policy = fpemu.Policy(
        default="e4m3fn", rounding="stochastic", random_bits=random_bits, stochastic_variant=variant, round_inputs=False
    )
    x = X[11:]
    got = jax.jit(fpemu.emulate(lambda v: v * 3.0, policy, key=key))(x)
    expected = fpemu.quantize(
        x * 3.0, "e4m3fn", rounding="stochastic", key=_site_key(key), random_bits=random_bits,
        stochastic_variant=variant,
    )  # fmt: skip
    assert_same_bits(got, expected)


def test_stochastic_variants_differ_under_emulate():
    """278 = 256 + 0.6875 * 32 (e4m3fn's step at 256): with 3 random bits r, 8 * 0.6875 = 5.5 is a tie, so
    floor and nearest_odd round up iff r >= 3, nearest_even and nearest_away iff r >= 2 (the same r:
    the same key and site)."""
    x = jnp.full((4096,), 278.0, jnp.float32)
    ups = {}
    for variant in VARIANTS:
        policy = fpemu.Policy(default="e4m3fn", rounding="stochastic", random_bits=3, stochastic_variant=variant)
        y = np.asarray(fpemu.emulate(lambda v: v, policy, key=jax.random.key(0))(x))
        assert set(np.unique(y)) <= {256.0, 288.0}
        ups[variant] = int(np.sum(y == 288.0))
    assert ups["floor"] == ups["nearest_odd"] < ups["nearest_even"] == ups["nearest_away"], ups
    assert abs(ups["floor"] / 4096 - 5 / 8) < 0.05 and abs(ups["nearest_even"] / 4096 - 6 / 8) < 0.05, ups


# -- exponent_ties -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ties", ["away", "even"])
def test_exponent_ties_equal_quantize(ties):
    x = jnp.asarray([3.0, 6.0, 12.0, -3.0, 0.75, 1.5, 5.0], jnp.float32)  # ties between powers of two
    policy = fpemu.Policy(default="p3109_k8p1se", exponent_ties=ties)
    got = fpemu.emulate(lambda v: v * 2.0, policy)(x)
    r = lambda t: fpemu.quantize(t, "p3109_k8p1se", exponent_ties=ties)
    assert_same_bits(got, r(r(x) * 2.0))
    if ties == "even":
        away = fpemu.emulate(lambda v: v * 2.0, fpemu.Policy(default="p3109_k8p1se"))(x)
        assert not np.array_equal(np.asarray(got), np.asarray(away))


# -- DotPolicy dots: fpemu.dot_general with the same options -------------------------------------------------


DOT_OPTIONS = [
    ("sat_finite", "nearest_odd", "even"),
    ("sat_propagate", "nearest_away", "away"),
    ("ovf_inf", "nearest_even", "even"),
]


@pytest.mark.long
@pytest.mark.parametrize(("saturate", "variant", "ties"), DOT_OPTIONS, ids=str)
def test_dot_policy_passes_the_options_to_dot_general(saturate, variant, ties):
    rng = np.random.default_rng(3)
    a = jnp.asarray(rng.standard_normal((4, 16)) * 40, jnp.float32).at[0, 0].set(3.0e5).at[1, 1].set(jnp.inf)
    b = jnp.asarray(rng.standard_normal((16, 5)) * 3, jnp.float32).at[2, 0].set(3.0)
    dot = fpemu.DotPolicy(lhs="e4m3fn", rhs="p3109_k8p1se", accumulate="bf16", accumulate_rounding="stochastic")
    policy = fpemu.Policy(dot=dot, saturate=saturate, stochastic_variant=variant, exponent_ties=ties)
    key = jax.random.key(5)
    got = fpemu.emulate(lambda u, v: u @ v, policy, key=key)(a, b)
    expected = fpemu.dot_general(
        a, b, (((1,), (0,)), ((), ())), lhs="e4m3fn", rhs="p3109_k8p1se", accumulate="bf16",
        accumulate_rounding="stochastic", saturate=saturate, stochastic_variant=variant, exponent_ties=ties,
        key=_site_key(key), preferred_element_type=jnp.float32,
    )  # fmt: skip
    assert_same_bits(got, expected)
    if saturate in (True, "sat_finite"):  # the infinity in a was clamped: a finite row
        assert np.all(np.isfinite(np.asarray(got)[1]))


@pytest.mark.long
def test_dot_policy_hands_every_option_to_dot_general(monkeypatch):
    """With 32 random bits (fpemu.dot_general's) the variants rarely differ on a dot's sums: check the
    options handed over, including "floor" where no rounding of the dot is stochastic."""
    seen = []
    real = rules_dot.options_config  # the options fpemu.dot_general's checks are made on, once
    monkeypatch.setattr(rules_dot, "options_config", lambda *a: seen.append(dataclasses.asdict(a[2])) or real(*a))
    a, b = jnp.ones((2, 4), jnp.float32), jnp.ones((4, 3), jnp.float32)
    stochastic = fpemu.DotPolicy(lhs="e4m3fn", accumulate="bf16", accumulate_rounding="stochastic")
    policy = fpemu.Policy(dot=stochastic, saturate="ovf_inf", stochastic_variant="nearest_odd", exponent_ties="even")
    fpemu.emulate(lambda u, v: u @ v, policy, key=jax.random.key(0))(a, b)
    plain = fpemu.Policy(dot=fpemu.DotPolicy(lhs="e4m3fn"), saturate="sat_propagate", exponent_ties="even")
    fpemu.emulate(lambda u, v: u @ v, plain)(a, b)
    picked = [(kw["saturate"], kw["stochastic_variant"], kw["exponent_ties"]) for kw in seen]
    assert picked == [("ovf_inf", "nearest_odd", "even"), ("sat_propagate", "floor", "even")]


# -- the fields: validation, repr, hash ----------------------------------------------------------------------


def test_policy_fields_are_normalised_hashable_and_shown():
    p = fpemu.Policy(default="bf16", saturate="sat_propagate", rounding="stochastic", stochastic_variant="nearest_odd")
    q = fpemu.Policy(
        default="bfloat16", saturate="sat_propagate", rounding="stochastic", stochastic_variant="nearest_odd"
    )
    assert p == q and hash(p) == hash(q)
    assert p != fpemu.Policy(default="bf16", saturate="sat_finite", rounding="stochastic")
    text = repr(fpemu.Policy(default="bf16", saturate="ovf_inf", exponent_ties="even"))
    assert "saturate='ovf_inf'" in text and "stochastic_variant='floor'" in text and "exponent_ties='even'" in text
    assert "saturate=False" in repr(fpemu.Policy())
    assert fpemu.Policy(saturate=np.bool_(True)).saturate is True
    # a DotPolicy's stochastic accumulator is a stochastic rounding the variant governs
    dot = fpemu.DotPolicy(accumulate="bf16", accumulate_rounding="stochastic")
    assert fpemu.Policy(dot=dot, stochastic_variant="nearest_away").stochastic_variant == "nearest_away"


def test_bad_values_name_the_field_and_the_choices():
    with pytest.raises(TypeError, match=r"Policy.saturate must be a bool .* 'sat_finite', 'sat_propagate', 'ovf_inf'"):
        fpemu.Policy(saturate="sat_finit")
    with pytest.raises(TypeError, match="Policy.saturate"):
        fpemu.Policy(saturate=1)
    with pytest.raises(ValueError, match=r"Policy.stochastic_variant must be one of 'floor', 'nearest_even'"):
        fpemu.Policy(rounding="stochastic", stochastic_variant="ceil")
    with pytest.raises(ValueError, match="Policy.stochastic_variant is only used with rounding='stochastic'"):
        fpemu.Policy(stochastic_variant="nearest_even")
    with pytest.raises(ValueError, match="Policy.stochastic_variant is only used"):
        fpemu.Policy(dot="nvfp4", stochastic_variant="nearest_even")  # a recipe's quantizers have their own
    with pytest.raises(ValueError, match=r"Policy.exponent_ties must be one of 'away', 'even'"):
        fpemu.Policy(exponent_ties="odd")


def _float32_bitcasts(jaxpr) -> int:
    """The roundings of float32 values in ``jaxpr``: each starts by reading the float32 bits."""
    found = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "bitcast_convert_type" and eqn.invars[0].aval.dtype == np.float32:
            found += 1
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", None)
            if inner is not None:
                found += _float32_bitcasts(inner)
    return found


@pytest.mark.long
def test_a_value_already_rounded_is_not_rounded_again_as_a_dot_operand():
    # tanh and exp round their results to e4m3fn; the dot's operands are those values (the transpose
    # between moves bits only), so the only other rounding is the dot's result: 3, not 5
    f = lambda a, b: jnp.tanh(a) @ jnp.exp(b).T
    a, b = jnp.linspace(-2.0, 2.0, 6).reshape(2, 3), jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    emulated = fpemu.emulate(f, fpemu.Policy(default="e4m3fn", round_inputs=False))
    assert _float32_bitcasts(jax.make_jaxpr(emulated)(a, b).jaxpr) == 3
    q = lambda v: fpemu.quantize(v, "e4m3fn")
    expected = q(q(jnp.tanh(a)) @ q(jnp.exp(b)).T)
    np.testing.assert_array_equal(np.asarray(emulated(a, b)).view(np.uint32), np.asarray(expected).view(np.uint32))


# -- explicit random bits: emulate(random=source) -------------------------------------------------------


@pytest.mark.long
def test_a_bit_source_of_the_keys_own_bits_gives_the_keyed_result():
    f = lambda a, b: jnp.tanh(a @ b) * 3.0 + jnp.exp(a).sum()
    a, b = jnp.linspace(-2.0, 2.0, 12).reshape(3, 4), jnp.linspace(-1.0, 1.0, 20).reshape(4, 5)
    key = jax.random.key(3)
    policies = [
        fpemu.Policy(default="e4m3fn", rounding="stochastic"),
        fpemu.Policy(
            default="bf16", rounding="stochastic", random_bits=5, dot=fpemu.DotPolicy(lhs="e4m3fn", rhs="e5m2")
        ),
    ]
    for policy in policies:
        keyed = jax.jit(fpemu.emulate(f, policy, key=key))(a, b)
        sourced = jax.jit(fpemu.emulate(f, policy, key=key, random=fpemu.stochastic_bits))(a, b)
        np.testing.assert_array_equal(np.asarray(sourced).view(np.uint32), np.asarray(keyed).view(np.uint32))


def test_a_bit_source_gives_every_stochastic_rounding_its_bits():
    # all-zero bits: every inexact value rounds toward zero (the bits are added to the discarded
    # fraction, then truncated), computed by hand with fpemu.quantize(random=...) at each rounding
    calls = []

    def zeros(key, shape, random_bits):
        calls.append((tuple(shape), random_bits))
        return jnp.zeros(shape, jnp.uint32)

    x = jnp.array([0.1, 1.3, 2.9, -5.1])
    emulated = fpemu.emulate(lambda v: jnp.exp(v) * 3.0, fpemu.Policy(default="e4m3fn", rounding="stochastic"),
                             key=jax.random.key(0), random=zeros)  # fmt: skip
    down = lambda v: fpemu.quantize(v, "e4m3fn", rounding="stochastic", random=jnp.zeros(v.shape, jnp.uint32))
    expected = down(down(jnp.exp(down(x))) * 3.0)
    np.testing.assert_array_equal(np.asarray(emulated(x)).view(np.uint32), np.asarray(expected).view(np.uint32))
    assert calls == [((4,), 32)] * 3  # the input, exp, mul
    nearest = fpemu.emulate(lambda v: jnp.exp(v) * 3.0, "e4m3fn")(x)
    assert not np.array_equal(np.asarray(emulated(x)), np.asarray(nearest))


@pytest.mark.long
def test_a_bit_source_of_a_dot_policy_draws_each_operand_stream():
    calls = []

    def source(key, shape, random_bits):
        calls.append((tuple(shape), random_bits))
        return fpemu.stochastic_bits(key, shape, random_bits)

    policy = fpemu.Policy(default="bf16", rounding="stochastic", random_bits=5, round_inputs=False,
                          dot=fpemu.DotPolicy(lhs="e4m3fn", rhs="e5m2"))  # fmt: skip
    fpemu.emulate(lambda a, b: a @ b, policy, key=jax.random.key(1), random=source)(jnp.ones((3, 4)), jnp.ones((4, 5)))
    assert calls == [((3, 4), 32), ((4, 5), 32), ((3, 5), 5)]  # lhs, rhs streams; the result in bf16


@pytest.mark.parametrize(
    "policy, kwargs, error, match",
    [
        ("e4m3fn", dict(random=fpemu.stochastic_bits), ValueError, "random= is only used with a stochastic"),
        (fpemu.Policy(default="e4m3fn", rounding="stochastic"), dict(random=fpemu.stochastic_bits), ValueError,
         "needs emulate"),
        (fpemu.Policy(default="e4m3fn", rounding="stochastic"), dict(key=jax.random.key(0), random=3), TypeError,
         "random must be a function"),
        (fpemu.Policy(dot="nvfp4"), dict(key=jax.random.key(0), random=fpemu.stochastic_bits), ValueError,
         "training recipe 'nvfp4'"),
    ],
)  # fmt: skip
def test_bad_bit_sources(policy, kwargs, error, match):
    with pytest.raises(error, match=match):
        fpemu.emulate(lambda v: v * 3.0, policy, **kwargs)


@pytest.mark.long
def test_a_bit_source_reaches_a_stochastic_accumulator_once_per_chunk():
    calls = []

    def source(key, shape, random_bits):
        calls.append((tuple(shape), random_bits))
        return fpemu.stochastic_bits(key, shape, random_bits)

    dot = fpemu.DotPolicy(
        lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=4, accumulate_rounding="stochastic"
    )
    policy = fpemu.Policy(dot=dot)
    a, b = jnp.linspace(-3.0, 3.0, 30).reshape(3, 10), jnp.linspace(0.5, 2.0, 20).reshape(10, 2)
    key = jax.random.key(4)
    keyed = fpemu.emulate(lambda x, y: x @ y, policy, key=key)(a, b)
    sourced = fpemu.emulate(lambda x, y: x @ y, policy, key=key, random=source)(a, b)
    np.testing.assert_array_equal(np.asarray(sourced).view(np.uint32), np.asarray(keyed).view(np.uint32))
    assert calls == [((3, 2), 32)]  # one call, vmapped over the 3 chunks of 10 products
    # the bits matter: a source of zeros truncates every chunk's sum
    zeros = fpemu.emulate(lambda x, y: x @ y, policy, key=key, random=lambda k, s, n: jnp.zeros(s, jnp.uint32))(a, b)
    expected = fpemu.dot_general(
        a, b, (((1,), (0,)), ((), ())), lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=4,
        accumulate_rounding="stochastic", random={"accumulate": jnp.zeros((3, 3, 2), jnp.uint32)},
    )  # fmt: skip
    np.testing.assert_array_equal(np.asarray(zeros).view(np.uint32), np.asarray(expected).view(np.uint32))


def test_a_bit_source_refuses_a_convolutions_stochastic_accumulator():
    dot = fpemu.DotPolicy(accumulate="bf16", accumulate_every=2, accumulate_rounding="stochastic")
    conv = lambda x, w: jax.lax.conv(x, w, (1, 1), "VALID")
    emulated = fpemu.emulate(conv, fpemu.Policy(dot=dot), key=jax.random.key(0), random=fpemu.stochastic_bits)
    with pytest.raises(ValueError, match="stochastic accumulator of a convolution"):
        emulated(jnp.ones((1, 2, 4, 4)), jnp.ones((3, 2, 2, 2)))
