"""Training recipes under fpemu.emulate on Flax models (linen ``apply`` and nnx ``split``/``merge``).

Flax's layers trace to the program a researcher writes by hand (``lax.conv_general_dilated``,
``dot_general``, a reshaped bias), so the emulated step of a Flax model must equal, bit for bit,
the emulated step of the same model written with ``jnp`` and ``lax`` and the same parameters:
how `emulate` classifies a dot (forward, dgrad, wgrad) and numbers it (which key it draws) must
not depend on Flax's modules, variable collections or `nnx.State`. tests/training/test_emulate_training.py
checks the plain model's GEMMs against a hand-written ``custom_vjp`` reference.

The steps run without `jax.jit` (the second of two equal programs then reuses every compiled
helper, where ``jit`` compiles the whole step twice). Slow: ``nvfp4``, and the convolution model's
steps under recipes other than ``mxfp8``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
from tests.training.test_emulate_training import assert_tree_bits

nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")

# mxfp8: 1 x 32 blocks, E8M0 scales; fp8_current: per-tensor float scales; nvfp4 (slow): two-level
# scales, 2-D weight tiles, stochastic rounding of the gradients (keys numbered by the dots' program
# order) and the Hadamard transform on wgrad.
SLOW = pytest.mark.slow
KEY = jax.random.key(3)


def step(loss, recipe: str):
    """The emulated value_and_grad step of ``loss`` under ``Policy(default="bf16", dot=recipe)``."""
    policy = fpemu.Policy(default="bf16", dot=recipe)
    return fpemu.emulate(jax.value_and_grad(loss), policy, key=KEY if policy.stochastic else None)


def assert_some_leaf_differs(actual, expected) -> None:
    pairs = zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected), strict=True)
    assert any(not np.array_equal(np.asarray(a).view(np.uint32), np.asarray(e).view(np.uint32)) for a, e in pairs)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def normal(seed: int, *shape: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def filled(shapes):
    """Parameters of the given shapes (Flax's own tree, from ``eval_shape``: initialisers run eagerly
    and cost seconds): kernels with unit-variance outputs, small biases."""
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    scale = lambda shape: np.float32(0.1 if len(shape) == 1 else 1 / np.sqrt(np.prod(shape[:-1])))
    return jax.tree_util.tree_unflatten(tree, [normal(10 + i, *a.shape) * scale(a.shape) for i, a in enumerate(leaves)])


X_SEQ = normal(0, 8, 6, 3)  # batch, length, channels
X_FLAT = normal(1, 8, 12)
LABELS = jnp.asarray(np.arange(8, dtype=np.int32) % 4)


class LinenNet(nn.Module):
    """A 1-D convolution, then two dense layers."""

    @nn.compact
    def __call__(self, x):
        h = jax.nn.gelu(nn.Conv(8, kernel_size=(3,), name="conv")(x))
        h = jax.nn.gelu(nn.Dense(16, name="hidden")(h.reshape(h.shape[0], -1)))
        return nn.Dense(4, name="out")(h)


def linen_by_hand(variables, x):
    """`LinenNet` written with lax and jnp."""
    p = variables["params"]
    dims = ("NWC", "WIO", "NWC")
    h = lax.conv_general_dilated(x, p["conv"]["kernel"], (1,), ((1, 1),), dimension_numbers=dims)
    h = jax.nn.gelu(h + p["conv"]["bias"].reshape(1, 1, -1))
    h = jax.nn.gelu(h.reshape(h.shape[0], -1) @ p["hidden"]["kernel"] + p["hidden"]["bias"].reshape(1, -1))
    return h @ p["out"]["kernel"] + p["out"]["bias"].reshape(1, -1)


@pytest.mark.long
@pytest.mark.parametrize(
    "recipe", ["mxfp8", pytest.param("fp8_current", marks=SLOW), pytest.param("nvfp4", marks=SLOW)]
)
def test_linen_apply_trains_as_the_same_model_by_hand(recipe):
    variables = filled(jax.eval_shape(LinenNet().init, jax.random.key(0), X_SEQ))
    flax_loss = lambda v, x, y: cross_entropy(LinenNet().apply(v, x), y)
    hand_loss = lambda v, x, y: cross_entropy(linen_by_hand(v, x), y)
    expected = step(hand_loss, recipe)(variables, X_SEQ, LABELS)
    assert_tree_bits(step(flax_loss, recipe)(variables, X_SEQ, LABELS), expected)
    assert_some_leaf_differs(expected[1], jax.jit(jax.grad(hand_loss))(variables, X_SEQ, LABELS))
    roles = lambda loss: [gemm for _, gemm, _ in fpemu.gemm_roles(jax.value_and_grad(loss), variables, X_SEQ, LABELS)]
    assert roles(flax_loss) == roles(hand_loss)
    assert sorted(roles(flax_loss)) == ["dgrad", "dgrad", "forward", "forward", "forward", "wgrad", "wgrad", "wgrad"]


class NnxNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.l0 = nnx.Linear(12, 16, rngs=rngs)
        self.l1 = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, x):
        return self.l1(jax.nn.gelu(self.l0(x)))


def nnx_by_hand(p, x):
    h = jax.nn.gelu(x @ p["l0"]["kernel"] + p["l0"]["bias"].reshape(1, -1))
    return h @ p["l1"]["kernel"] + p["l1"]["bias"].reshape(1, -1)


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["mxfp8", "fp8_current", pytest.param("nvfp4", marks=SLOW)])
def test_nnx_split_merge_trains_as_the_same_model_by_hand(recipe):
    graphdef, state = nnx.split(nnx.eval_shape(lambda: NnxNet(nnx.Rngs(0))))
    nnx.replace_by_pure_dict(state, filled(nnx.to_pure_dict(state)))
    flax_loss = lambda s, x, y: cross_entropy(nnx.merge(graphdef, s)(x), y)
    hand_loss = lambda p, x, y: cross_entropy(nnx_by_hand(p, x), y)
    params = nnx.to_pure_dict(state)
    value, grads = step(flax_loss, recipe)(state, X_FLAT, LABELS)
    assert isinstance(grads, nnx.State)
    expected = step(hand_loss, recipe)(params, X_FLAT, LABELS)
    assert_tree_bits((value, nnx.to_pure_dict(grads)), expected)
    assert_some_leaf_differs(expected[1], jax.jit(jax.grad(hand_loss))(params, X_FLAT, LABELS))
