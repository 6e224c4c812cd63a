"""The ``rounded`` rule's identities (`fpemu._emulate.rules_plain.identity_operand`): ``x ** 1``, ``x * 1``,
``x / 1``, ``x + 0``, ``x - 0`` and a sum over axes of size 1, of a value already rounded to the format, are not
rounded again, with the bits of rounding them (NaN payloads, signalling NaNs, ±inf, ±0 and subnormals included,
eagerly and under jit)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
from fpemu._emulate import rules_plain
from fpemu.testing import assert_bit_exact
from fpemu.tools.models import mlp_model
from tests.emulate.jaxprs import named_calls

# Each returns its input as it is (``one`` 1.0, ``zero`` 0.0, ``minus_zero`` -0.0); each is one equation of the rule
# under test, with a literal of the program beside x.
IDENTITIES = {
    "x ** 1": lambda x, one, zero, minus_zero: x**1,
    "x * 1": lambda x, one, zero, minus_zero: x * one,
    "1 * x": lambda x, one, zero, minus_zero: one * x,
    "x / 1": lambda x, one, zero, minus_zero: x / one,
    "x + 0": lambda x, one, zero, minus_zero: x + zero,
    "x + -0": lambda x, one, zero, minus_zero: x + minus_zero,
    "0 + x": lambda x, one, zero, minus_zero: zero + x,
    "x - 0": lambda x, one, zero, minus_zero: x - zero,
    "sum over an axis of size 1": lambda x, one, zero, minus_zero: jnp.sum(x[None], axis=0),
}
LITERALS = (1.0, 0.0, -0.0)

FLOAT32_FORMATS = [f for f in fpemu.formats() if f.bits < 32]


def _inputs(fmt: fpemu.Format) -> jax.Array:
    """float32 values around every special case: NaNs (payloads, signalling, negative), ±inf, ±0, float32's
    subnormals (XLA:CPU's arithmetic flushes them), the format's smallest values, its max and beyond."""
    bits = np.array(
        [0x7FC00000, 0x7FC12345, 0xFFC00001, 0x7F800001, 0x7FA00000, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
         0x00000001, 0x80000001, 0x00200000, 0x80400000, 0x00800000, 0x3F800000, 0xBFC00000, 0x40490FDB, 0x7F7FFFFF],
        np.uint32,
    )  # fmt: skip
    special = bits.view(np.float32)
    big = np.finfo(np.float32).max
    points = np.array([fmt.min_subnormal, fmt.min_normal, fmt.max, -fmt.max, 2 * fmt.max, fmt.min_subnormal / 3])
    return jnp.asarray(np.concatenate([special, np.clip(points, -big, big).astype(np.float32)]))


def _emulated(fmt, **options):
    """Every identity of `IDENTITIES` under ``emulate``, with the literals as Python numbers."""
    policy = fpemu.Policy(default=fmt, **options)
    return fpemu.emulate(lambda v: tuple(f(v, *LITERALS) for f in IDENTITIES.values()), policy)


def _rounded_twice(fmt, **options):
    """The oracle: each identity of the input rounded to ``fmt``, rounded to ``fmt`` again (`fpemu.quantize`), with
    the literals rounded to ``fmt`` as emulate rounds them (E8M0 has no zero: its 0.0 is NaN)."""
    literals = [np.float32(fpemu.quantize(np.float32(c), fmt, **options)) for c in LITERALS]

    def rounded(x):
        q = fpemu.quantize(x, fmt, **options)
        return tuple(fpemu.quantize(f(q, *literals), fmt, **options) for f in IDENTITIES.values())

    return rounded


def _compare(actual, expected, how):
    for got, want, identity in zip(actual, expected, IDENTITIES, strict=True):
        assert_bit_exact(got, want, nan_payload=True, err_msg=f"{identity}, {how}")


@pytest.mark.parametrize("fmt", FLOAT32_FORMATS, ids=lambda f: f.name)
def test_an_identity_of_a_rounded_value_has_the_bits_of_rounding_it_again(fmt):
    x = _inputs(fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fpemu.PrecisionWarning)  # E8M0's 0.0 becomes NaN
        eager, jitted = _emulated(fmt)(x), jax.jit(_emulated(fmt))(x)
    _compare(eager, _rounded_twice(fmt)(x), "eager")
    _compare(jitted, jax.jit(_rounded_twice(fmt))(x), "jit")


@pytest.mark.parametrize(
    "options",
    [
        dict(saturate=False),
        dict(saturate=True),
        dict(subnormals=False),
        dict(rounding="toward_zero"),
        dict(rounding="toward_negative"),
        dict(rounding="toward_positive"),
    ],
    ids=str,
)
@pytest.mark.parametrize("fmt", ["bf16", "e4m3fn", "e5m2", "e2m1fn", "p3109_k8p3se", "e4m3fnuz"])
def test_the_bits_are_those_of_rounding_again_under_every_policy_option(fmt, options):
    x = _inputs(fpemu.get_format(fmt))
    _compare(jax.jit(_emulated(fmt, **options))(x), jax.jit(_rounded_twice(fmt, **options))(x), "jit")


def _roundings(jaxpr) -> int:
    """How many roundings (calls of the rounding function, ``_quantize_ste``) a jaxpr makes, in its bodies too."""
    return named_calls(jaxpr, "_quantize_ste")


def test_an_identity_of_a_rounded_value_is_not_rounded_again():
    """optax's Adam rounds ``g ** 1``, ``b2 * t`` (b2 = 0.999, 1.0 in bf16) and ``v + 0.0``: no rounding is
    compiled for them; an operand not known to be rounded, and a constant that is not the identity's, are."""
    x = jnp.linspace(-2.0, 2.0, 8, dtype=jnp.float32)
    count = lambda f, policy: _roundings(jax.make_jaxpr(fpemu.emulate(f, policy))(x).jaxpr)
    bf16 = fpemu.Policy(default="bf16")
    assert count(lambda v: v, bf16) == 1  # the input
    assert count(lambda v: ((v**1 * 1.0 + 0.0) / 1.0 - 0.0) * 1.0, bf16) == 1
    assert count(lambda v: jnp.sum(jnp.sum(v[None, :, None], axis=0), axis=(1,)), bf16) == 1  # axes of size 1
    assert count(lambda v: jnp.sum(v.reshape(2, 4), axis=0), bf16) == 2  # an axis of 2: a sum
    assert count(lambda v: jnp.sqrt(v * v + 0.0), bf16) == 3  # the input, v * v and sqrt
    assert count(lambda v: v * 1.5, bf16) == 2
    assert count(lambda v: v + 1.0, bf16) == 2
    assert count(lambda v: v**2, bf16) == 2
    assert count(lambda v: 1.0 / v, bf16) == 2
    assert count(lambda v: 0.0 - v, bf16) == 2
    assert count(lambda v: v * 1.0, fpemu.Policy(default="bf16", round_inputs=False)) == 1  # v is not rounded
    assert count(lambda v: v * 1.0, fpemu.Policy(default="bf16", overrides={"mul": "fp16"})) == 2  # another format
    ones = jnp.ones(8, jnp.float32)  # a device array: not a literal of the program
    assert count(lambda v: v * ones, bf16) == 3  # the input, the closed-over constant, the product


def test_a_value_the_backend_may_flush_is_rounded_again_in_e8m0():
    """E8M0's 2**-127 is a float32 subnormal: XLA:CPU computes ``x * 1`` as 0 eagerly, which is not an E8M0
    value; rounded again it is one (as without this rule), so the identity is rounded there."""
    assert not rules_plain.survives_flush(fpemu.get_format("e8m0fnu"), jnp.float32)
    assert rules_plain.survives_flush(fpemu.get_format("bf16"), jnp.float32)  # its subnormals flush to ±0
    assert rules_plain.survives_flush(fpemu.get_format("e4m3fnuz"), jnp.float32)  # no float32 subnormal in it
    no_minus_zero = fpemu.Format(name="e8m3_no_minus_zero", exponent_bits=8, mantissa_bits=3, specials="fnuz")
    assert not rules_plain.survives_flush(no_minus_zero, jnp.float32)  # -2**-130 would flush to -0, not a value
    x = jnp.asarray(np.float32(2.0**-127))
    emulated = fpemu.emulate(lambda v: v * 1.0, fpemu.Policy(default="e8m0fnu"))(x)
    assert_bit_exact(emulated, _rounded_twice("e8m0fnu")(x)[1], nan_payload=True)
    assert fpemu.quantize(emulated, "e8m0fnu").tobytes() == np.asarray(emulated).tobytes()  # a value of E8M0


def test_stochastic_rounding_keys_of_later_sites_do_not_move():
    """The identity's site still takes its index: the sites after it draw the bits they drew when it was
    rounded (here, beside a product that is rounded and takes one index too)."""
    x = jnp.full((64,), 1.0 + 2.0**-10, jnp.float32)
    policy = fpemu.Policy(default="bf16", rounding="stochastic")
    key = jax.random.key(3)
    kept, later = jax.jit(fpemu.emulate(lambda v: (v * 1.0, v * 0.3), policy, key=key))(x)
    _, later_too = jax.jit(fpemu.emulate(lambda v: (v * 1.5, v * 0.3), policy, key=key))(x)
    rounded_input = jax.jit(fpemu.emulate(lambda v: v, policy, key=key))(x)
    assert_bit_exact(kept, rounded_input)
    assert_bit_exact(later, later_too)
    assert len(np.unique(np.asarray(later))) > 1  # stochastic rounding, drawn per element


def test_counted_roundings_are_made_and_counted():
    """With ``with_stats`` every site is rounded and counted, identities included (the same counts as before)."""
    x = jnp.asarray(np.array([1.0, 2.0**-140, np.inf, np.nan], np.float32))
    _, stats = fpemu.emulate(lambda v: v * 1.0, "bf16", with_stats=True)(x)
    assert int(stats["inputs"]["underflow"]) == 1  # 2**-140 is below bf16's smallest subnormal: 0
    expected = dict(elements=4, overflow=0, saturated=0, underflow=0, subnormal=0, inf=1, nan=1)
    assert {k: int(v) for k, v in stats["mul"].items()} == expected  # the product's site, counted
    counted = jax.make_jaxpr(fpemu.emulate(lambda v: v * 1.0, "bf16", with_stats=True))(x).jaxpr
    assert _roundings(counted) == 2


def test_complex_data_is_rounded_again():
    """``(a + bj) * 1`` is NaN where b is infinite: not an identity, so complex products are rounded."""
    x = jnp.asarray(np.array([1 + 1j, complex(1.0, np.inf)], np.complex64))
    jaxpr = jax.make_jaxpr(fpemu.emulate(lambda v: v * (1 + 0j), "bf16"))(x).jaxpr
    assert _roundings(jaxpr) == 4  # the input's two parts, the product's two parts


def test_the_rule_rounds_through_lax_calls_with_the_same_bits():
    x = _inputs(fpemu.get_format("bf16"))
    emulated = jax.jit(fpemu.emulate(lambda v: lax.integer_pow(lax.mul(v, np.float32(1.0)), 1), "bf16"))(x)
    assert_bit_exact(emulated, fpemu.quantize(x, "bf16"), nan_payload=True)


def test_an_adam_step_has_the_bits_of_rounding_every_identity(monkeypatch):
    """The digits MLP's Adam step (`fpemu.tools.models`: optax's operations, with ``g ** 1``, ``b2 * t`` and
    ``v + 0.0``, and the bias gradients' sums over an axis of size 1), with the identities left unrounded and
    with every one of them rounded: the same bits, and fewer roundings."""
    step, args = mlp_model()

    def run():
        emulated = fpemu.emulate(step, "bf16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fpemu.PrecisionWarning)  # b2 = 0.999 is 1.0 in bf16
            roundings = _roundings(jax.make_jaxpr(emulated)(*args).jaxpr)
            return jax.tree_util.tree_leaves(jax.jit(emulated)(*args)), roundings

    kept, fewer = run()
    monkeypatch.setattr(rules_plain, "identity_operand", lambda eqn, invals: None)
    rounded, every = run()
    assert every - fewer == 21  # per parameter g ** 1, b2 * t, v + 0.0 (6 parameters), and 3 bias sums
    for got, want in zip(kept, rounded, strict=True):
        assert_bit_exact(got, want, nan_payload=True)
