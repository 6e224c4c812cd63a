"""Convolutions under ``jax.grad(emulate(loss, Policy(dot=recipe)))``: the backward GEMMs quantized too.

With emulate outside the gradient, ``emulate(jax.grad(loss))`` sees JAX's transposed convolutions
(``conv(g, rev(W))``: dgrad; ``conv(x, g)``: wgrad) and quantizes each as its GEMM. With emulate
inside, the forward convolution is a ``custom_vjp`` whose backward pass computes the same transposed
convolutions the same way, so both orders give the same gradients bit for bit (with
``Policy(default=None)``, where the cotangents reaching the convolutions agree), stochastic
rounding and the Hadamard transform of NVFP4 included (the same key).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from fpemu import Policy, emulate, init_training_state
from fpemu._training import quantized_conv_general, training_recipe
from tests.training.test_emulate_training import assert_tree_bits

KEY = jax.random.key(11)
DN = ("NHWC", "HWIO", "NHWC")


def normal(seed: int, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * np.float32(scale))


def conv(x, w):
    """NHWC / HWIO, a stride and asymmetric explicit padding."""
    with jax.named_scope("conv"):
        return lax.conv_general_dilated(x, w, (2, 1), ((1, 1), (0, 2)), dimension_numbers=DN)


def model(w, x):
    return jnp.sum(jnp.tanh(conv(x, w)) ** 2)


W = normal(0, 3, 3, 32, 16, scale=0.3)
X = normal(1, 2, 5, 4, 32)


# Each recipe compiles its quantized convolutions (seconds each; nvfp4's transform and stochastic
# rounding most): nvfp4 runs with -m slow.
@pytest.mark.long
@pytest.mark.parametrize("name", ["fp8_current", "mxfp8", pytest.param("nvfp4", marks=pytest.mark.slow)])
def test_grad_of_emulate_equals_emulate_of_grad_for_convolutions(name):
    policy = Policy(dot=name)
    key = KEY if policy.stochastic else None  # nvfp4: the same key for both orders

    @jax.jit
    def both(w, x):
        outside = jax.value_and_grad(emulate(model, policy, key=key), argnums=(0, 1))(w, x)
        inside = emulate(jax.value_and_grad(model, argnums=(0, 1)), policy, key=key)(w, x)
        return outside, inside

    outside, inside = both(W, X)
    assert_tree_bits(outside, inside)
    # not vacuous: the unquantized gradients differ (the backward convolutions were quantized)
    exact = jax.value_and_grad(model, argnums=(0, 1))(W, X)
    for a, e in zip(jax.tree_util.tree_leaves(outside), jax.tree_util.tree_leaves(exact), strict=True):
        assert not np.array_equal(np.asarray(a), np.asarray(e))


@pytest.mark.long
def test_delayed_scaling_histories_of_a_convolution_under_grad_of_emulate():
    policy = Policy(dot="fp8_delayed")

    def loss(w, x, c):
        return jnp.sum(conv(x, w) * c)  # the cotangent of the convolution is c, whatever the scales

    w, x, c = W, X, normal(3, 2, 3, 4, 16, scale=3.0)
    grad_inside = jax.jit(emulate(jax.grad(loss, argnums=(0, 1)), policy, state=True))
    grad_outside = jax.jit(jax.grad(emulate(loss, policy, state=True), argnums=(1, 2), has_aux=True))
    inside_state = init_training_state(jax.grad(loss, argnums=(0, 1)), policy, w, x, c)
    outside_state = init_training_state(loss, policy, w, x, c)
    # one history per tensor (x, W, g), shared by the GEMMs that read it; emulate outside: the forward
    # convolution's VJP keeps those of x and W, which its dgrad and wgrad read too (no history of g)
    assert sorted(inside_state) == [f"conv/conv_general_dilated.{t}" for t in ("g", "w", "x")]
    assert sorted(outside_state) == ["conv/conv_general_dilated.w", "conv/conv_general_dilated.x"]
    _, inside_state = grad_inside(inside_state, w, x, c)
    _, outside_state = grad_outside(outside_state, w, x, c)
    amax = {"x": np.abs(np.asarray(x)).max(), "w": np.abs(np.asarray(w)).max(), "g": np.abs(np.asarray(c)).max()}
    for t, expected in amax.items():
        assert float(inside_state[f"conv/conv_general_dilated.{t}"][0]) == expected, t
        if t != "g":
            assert float(outside_state[f"conv/conv_general_dilated.{t}"][0]) == expected, t
    # the second step: both read the same histories of x and W; the gradient operand's history
    # (inside) holds amax(c), the amax its current scaling (outside) finds: the same gradients
    inside, _ = grad_inside(inside_state, w, x, c)
    outside, _ = grad_outside(outside_state, w, x, c)
    assert_tree_bits(outside, inside)


@pytest.mark.long
@pytest.mark.parametrize("name", ["fp8_current", "mxfp8"])
def test_quantized_conv_general_is_the_forward_convolution_of_emulate(name):
    """`fpemu._training.quantized_conv_general` with the recipe's forward GEMM gives the bits of the
    forward convolution under ``emulate(..., Policy(dot=recipe))`` (the same core)."""
    expected = emulate(conv, Policy(dot=name, default=None))(X, W)
    actual = quantized_conv_general(X, W, (2, 1), ((1, 1), (0, 2)), training_recipe(name).forward, dimension_numbers=DN)
    assert_tree_bits(actual, expected)
