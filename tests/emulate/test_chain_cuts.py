"""fpemu.emulate cuts the chains of rounded sums (`fpemu._emulate.interpreter.Context.cut_chain`): every
second link of a chain of rounded ``add``/``add_any``/``sub`` is materialized (`fpemu._ops.fusion.materialize`),
with the same bits as without the cut."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._emulate import interpreter, readers
from fpemu._jax.compat import Literal
from fpemu.testing import assert_bit_exact
from tests.emulate.jaxprs import bodies, named_calls


def _cuts(jaxpr) -> int:
    """How many materializations a jaxpr makes, in its bodies too (cuts, and a recipe's GEMM operands)."""
    return named_calls(jaxpr, "_materialized")


def _sum_chain(x, ys):
    h = x
    for i, y in enumerate(ys):
        h = h + y if i % 2 else h - y  # each link reads the one before: depth 1, 2 (cut), 1, 2 (cut)...
    return h


def _inputs():
    x = jnp.asarray(np.linspace(-3.0, 3.0, 24, dtype=np.float32).reshape(4, 6) / 7)
    ys = [jnp.asarray(np.full((4, 6), 1.0 + 2.0**-9 * (i + 1), np.float32)) for i in range(6)]
    return x, ys


def test_every_second_link_of_a_chain_of_rounded_sums_is_cut():
    x, ys = _inputs()
    emulated = fpemu.emulate(_sum_chain, fpemu.Policy(default="bf16"))
    assert interpreter.CHAIN_CUT_DEPTH == 2
    assert _cuts(jax.make_jaxpr(emulated)(x, ys).jaxpr) == 3
    assert _cuts(jax.make_jaxpr(emulated)(x, ys[:5]).jaxpr) == 2


@pytest.mark.parametrize(
    "policy",
    [
        fpemu.Policy(default="fp32"),  # the rounding leaves float32 sums as they are
        fpemu.Policy(default="bf16", exclude=("add",)),  # the sums are not rounded
        fpemu.Policy(default="bf16", overrides={"add": None}),
    ],
    ids=["fp32", "add excluded", "add not rounded"],
)
def test_sums_that_are_not_rounded_are_not_cut(policy):
    x, ys = _inputs()
    assert _cuts(jax.make_jaxpr(fpemu.emulate(_sum_chain, policy))(x, ys).jaxpr) == 0


def test_a_chain_is_sums_of_sums_only():
    """A sum whose operands come through another primitive (here ``tanh``) starts a new chain."""

    def through_tanh(x, ys):
        h = x
        for y in ys:
            h = jnp.tanh(h) + y
        return h

    x, ys = _inputs()
    assert _cuts(jax.make_jaxpr(fpemu.emulate(through_tanh, fpemu.Policy(default="bf16")))(x, ys).jaxpr) == 0


@pytest.mark.parametrize(
    ("reader", "cuts"),
    [
        (jnp.exp, 0),  # read in one loop: exp's own (XLA does not compute an exponential again in its readers)
        (jnp.sum, 0),
        (lambda h: jnp.max(h, axis=0), 0),
        (jnp.sin, 1),  # an elementwise reader that XLA fuses into its own readers
        (lambda h: jnp.exp(h) + jnp.sum(h), 1),  # two readers
        (lambda h: (jnp.exp(h), h), 1),  # read by exp and by the caller
    ],
    ids=["exp", "sum", "max", "sin", "two readers", "an output"],
)
def test_a_link_read_by_one_reduction_or_exponential_alone_is_not_cut(reader, cuts):
    """The chain's second link is cut unless one reduction or exponential alone reads it: then it is computed
    in that one loop anyway (a cross-entropy's ``logits - max``, read by ``exp``)."""
    x, ys = _inputs()
    emulated = fpemu.emulate(lambda x, ys: reader(x + ys[0] - ys[1]), fpemu.Policy(default="bf16"))
    assert _cuts(jax.make_jaxpr(emulated)(x, ys).jaxpr) == cuts


def test_a_cross_entropy_and_its_gradient_are_not_cut_and_keep_their_bits(monkeypatch):
    """``logsumexp(logits) - label_logit`` and its gradient: the links (``logits - max``, read by ``exp``; the
    loss, read by the mean) were cut, uselessly; the bits are those of the program without cuts."""
    logits = jnp.asarray(np.linspace(-3.0, 5.0, 4 * 10, dtype=np.float32).reshape(4, 10))
    labels = jnp.asarray(np.array([0, 3, 9, 9], np.int32))

    def loss(z):
        picked = jnp.take_along_axis(z, labels[:, None], axis=1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(z + 0.5, axis=1) - picked)

    def step():
        return fpemu.emulate(jax.value_and_grad(loss), fpemu.Policy(default="bf16"))

    assert _cuts(jax.make_jaxpr(step())(logits).jaxpr) == 0
    kept = jax.jit(step())(logits)
    monkeypatch.setattr(readers, "READ_IN_ONE_LOOP", frozenset())
    assert _cuts(jax.make_jaxpr(step())(logits).jaxpr) >= 1
    for a, b in zip(kept, jax.jit(step())(logits), strict=True):
        assert_bit_exact(a, b, nan_payload=True)


def _residual_stack(x, ws):
    for w in ws:
        x = x + jnp.tanh(x @ w)  # the residual stream; its gradient is a chain of add_any
    return jnp.sum(x * x)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3"])
def test_a_cut_chain_has_the_bits_of_the_uncut_one(fmt, monkeypatch):
    """The value and the gradient of a residual stack (-0 and subnormals among the inputs), and a chain of
    sums through NaNs (their payloads), ±inf, -0 and subnormals, bit for bit as with the cuts switched off."""
    values = np.linspace(-2.0, 2.0, 8 * 16, dtype=np.float32).reshape(8, 16) * 1.37
    values[0, :3] = [-0.0, 2.0**-20, 1e-39]  # subnormal in fp16; in bf16 and float32
    x = jnp.asarray(values)
    specials = np.array([0x7FC01234, 0xFFC00001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x3F800000], np.uint32)
    chain_x = jnp.asarray(np.tile(specials.view(np.float32), (4, 1)))
    chain_ys = [jnp.asarray(np.full((4, 7), v, np.float32)) for v in (-0.0, 2.0**-20, 1e-39, 3.0, -1.0, 0.5)]
    ws = [jnp.asarray(np.cos(np.arange(256, dtype=np.float32) * (k + 1)).reshape(16, 16) / 4) for k in range(4)]

    def step():  # a fresh function each time: traced again, with the cut depth of the moment
        return fpemu.emulate(jax.value_and_grad(_residual_stack, argnums=(0, 1)), fpemu.Policy(default=fmt))

    def chain():
        return fpemu.emulate(_sum_chain, fpemu.Policy(default=fmt))

    assert _cuts(jax.make_jaxpr(step())(x, ws).jaxpr) >= 4
    cut = jax.jit(step())(x, ws), jax.jit(chain())(chain_x, chain_ys)
    monkeypatch.setattr(interpreter, "CHAIN_CUT_DEPTH", 10**6)
    assert _cuts(jax.make_jaxpr(step())(x, ws).jaxpr) == 0
    uncut = jax.jit(step())(x, ws), jax.jit(chain())(chain_x, chain_ys)
    assert not np.isnan(np.asarray(cut[0][0]))  # the stack's loss: the comparison is of numbers
    for a, b in zip(jax.tree_util.tree_leaves(cut), jax.tree_util.tree_leaves(uncut), strict=True):
        assert_bit_exact(a, b, nan_payload=True)


def _deep_stack(x, ws):
    for w in ws:
        x = x + jnp.tanh(x @ w)
        x = x - 0.25 * jnp.sin(x)  # two links a block
    return jnp.sum(x * x)


def test_a_deep_stack_of_small_arrays_compiles_with_the_bits_of_the_uncut_one(monkeypatch):
    """Small links are cut too: uncut, jax 0.12's XLA:CPU did not compile this stack of three 8 x 16 blocks
    in a minute (nor, cut by divisions in place of the conditionals, a stack of such links fused in one
    loop); jax 0.10.2 compiles it in half a second either way. Its value and gradient, jitted, are
    those of the uncut program run one operation at a time (no fusion, nothing to compile at once)."""
    x = jnp.asarray(np.linspace(-2.0, 2.0, 8 * 16, dtype=np.float32).reshape(8, 16))
    ws = [jnp.asarray(np.cos(np.arange(256, dtype=np.float32) * (k + 1)).reshape(16, 16) / 4) for k in range(3)]

    def step():
        return fpemu.emulate(jax.value_and_grad(_deep_stack, argnums=(0, 1)), fpemu.Policy(default="bf16"))

    assert _cuts(jax.make_jaxpr(step())(x, ws).jaxpr) >= 6
    cut = jax.jit(step())(x, ws)
    monkeypatch.setattr(interpreter, "CHAIN_CUT_DEPTH", 10**6)
    with jax.disable_jit():
        uncut = step()(x, ws)
    assert np.isfinite(np.asarray(cut[0]))
    for a, b in zip(jax.tree_util.tree_leaves(cut), jax.tree_util.tree_leaves(uncut), strict=True):
        assert_bit_exact(a, b)


def _materialized_twice(jaxpr) -> int:
    """How many materializations of a jaxpr (its bodies too) read the output of another one."""
    made, twice = set(), 0
    for eqn in jaxpr.eqns:
        if eqn.params.get("name") == "_materialized":
            twice += any(v in made for v in eqn.invars if not isinstance(v, Literal))
            made.update(eqn.outvars)
        twice += sum(_materialized_twice(body) for body in bodies(eqn))
    return twice


def test_a_recipe_gemm_does_not_materialize_a_cut_link_again():
    """A recipe GEMM materializes the operands it quantizes (arrays of 2**16 elements or more); a cut link is
    one already, and is read as it is."""

    def chain_into_a_gemm(x, ys, w):
        h = x
        for y in ys:
            h = h + y  # the second link is cut, and is the GEMM's operand
        return jnp.sum(jnp.square(h @ w))

    x = jnp.asarray(np.linspace(-1.0, 1.0, 256 * 256, dtype=np.float32).reshape(256, 256))
    ys, w = [x * 0.5, x * 0.25], jnp.eye(256, dtype=jnp.float32)
    policy = fpemu.Policy(default="bf16", dot="mxfp8")
    jaxpr = jax.make_jaxpr(fpemu.emulate(jax.grad(chain_into_a_gemm, argnums=(0, 2)), policy))(x, ys, w).jaxpr
    assert _cuts(jaxpr) > 1
    assert _materialized_twice(jaxpr) == 0


def test_cuts_compose_with_vmap_and_grad():
    x, ys = _inputs()
    emulated = fpemu.emulate(_sum_chain, fpemu.Policy(default="bf16"))
    batched = jax.vmap(emulated, in_axes=(0, None))(jnp.stack([x, -x]), ys)
    assert_bit_exact(batched[0], emulated(x, ys))
    assert_bit_exact(batched[1], emulated(-x, ys))
    grad = jax.grad(lambda v: jnp.sum(emulated(v, ys)))(x)  # emulate's straight-through derivative
    assert_bit_exact(grad, np.ones((4, 6), np.float32))
