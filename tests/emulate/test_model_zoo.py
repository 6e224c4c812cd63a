"""A zoo of common model code, forward and backward, under `fpemu.emulate` on the installed JAX.

Each model is a loss ``f(params, x)`` built from what researchers write: the ``jax.nn`` activations,
normalizations, ``dot_product_attention``, ``scan``/``fori_loop``/``map``/``cond``/``switch``/
``while_loop``, ``checkpoint``, ``shard_map``, ``custom_jvp``/``custom_vjp``, a Flax linen and an nnx
model with gelu and tanh, and an optax adamw step. Every model runs in three forms:

- ``emulate(value_and_grad(f), "bf16")``: every result of the forward and backward pass is a bf16
  value (checked bit for bit) and near the float32 step;
- ``value_and_grad(emulate(f, "bf16"))``: the straight-through form, its value a bf16 value (the
  models beyond single activations: control flow, custom derivatives, Flax);
- ``emulate(value_and_grad(f), Policy(dot="mxfp8"))``: the training recipe's GEMMs, near float32
  and not equal to it (the recipe quantized something).

"Near" is a relative error of the whole result (the norm of the error over the norm of the float32
result) below a bound per form: these are low-precision computations, not exact ones. Each JAX
release can emit new primitives or parameters for the same code (jax 0.11 and 0.12 did); a model
that breaks under a new release fails here, in CI, before a user meets it. The while loop is not
reverse-differentiable in JAX itself, so its model is differentiated forward (``jax.jvp``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu

nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")

BATCH, WIDTH = 8, 32  # a contraction of 32: one MX block


def normal(seed: int, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray((np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32))


X = normal(0, BATCH, WIDTH)
W = {"w1": normal(1, WIDTH, WIDTH, scale=WIDTH**-0.5), "w2": normal(2, WIDTH, WIDTH, scale=WIDTH**-0.5)}


def dense(act: Callable) -> Callable:
    """Two layers with ``act`` between them, a mean-square loss."""
    return lambda p, x: jnp.mean((act(x @ p["w1"]) @ p["w2"]) ** 2)


# -- the jax.nn activations -------------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True),
    "gelu_erf": lambda v: jax.nn.gelu(v, approximate=False),
    "silu": jax.nn.silu,
    "sigmoid": jax.nn.sigmoid,
    "tanh": jnp.tanh,
    "softplus": jax.nn.softplus,
    "elu": jax.nn.elu,
    "selu": jax.nn.selu,
    "celu": jax.nn.celu,
    "leaky_relu": jax.nn.leaky_relu,
    "mish": jax.nn.mish,
    "hard_tanh": lambda v: jax.nn.hard_tanh(v * 0.75),  # no pre-activation within a bf16 rounding of the kinks
    "glu": lambda v: jnp.concatenate([jax.nn.glu(v), jax.nn.glu(v)], axis=-1),
    "softmax": lambda v: jax.nn.softmax(v, axis=-1),
    "log_softmax": lambda v: jax.nn.log_softmax(v, axis=-1),
    "erf_sinc": lambda v: jax.scipy.special.erf(v) + jnp.sinc(v),
    "asin_atanh": lambda v: jnp.arcsin(jnp.tanh(v) * 0.9) + jnp.arctanh(jax.nn.sigmoid(v) - 0.5),
}


# -- normalizations and attention -----------------------------------------------------------------------


def layer_norm(v, eps=1e-5):
    mean = jnp.mean(v, axis=-1, keepdims=True)
    return (v - mean) * lax.rsqrt(jnp.var(v, axis=-1, keepdims=True) + eps)


def rms_norm(v, eps=1e-6):
    return v * lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)


def attention(p, x):
    heads = lambda v: v.reshape(2, 4, 4, 8)  # batch 2, sequence 4, 4 heads of 8
    q, k, v = (heads(x @ p[name]) for name in ("w1", "w2", "w1"))
    return jnp.mean(jax.nn.dot_product_attention(q, k, v, is_causal=True) ** 2)


# -- control flow ---------------------------------------------------------------------------------------


def rnn(p, x):
    def cell(h, xt):
        h = jnp.tanh(xt @ p["w1"] + h @ p["w2"])
        return h, jnp.sum(h)

    h, ys = lax.scan(cell, jnp.zeros((2, WIDTH)), x.reshape(4, 2, WIDTH))
    return jnp.mean(h**2) + jnp.mean(ys)


def fori(p, x):
    return jnp.mean(lax.fori_loop(0, 3, lambda i, h: jax.nn.gelu(h @ p["w1"]), x) ** 2)


def mapped(p, x):
    return jnp.mean(lax.map(lambda row: jnp.tanh(row @ p["w1"]), x) ** 2)


def cond(p, x):
    h = x @ p["w1"]
    return jnp.mean(lax.cond(jnp.sum(h) > 0, jnp.sin, jnp.cos, h) ** 2)


def switch(p, x):
    h = x @ p["w1"]
    index = jnp.argmax(jnp.sum(h, axis=0)) % 3
    return jnp.mean(lax.switch(index, [jnp.tanh, jax.nn.relu, jax.nn.gelu], h) ** 2)


def while_loop(p, x):
    def body(state):
        i, h = state
        return i + 1, jnp.tanh(h @ p["w1"])

    return jnp.mean(lax.while_loop(lambda s: s[0] < 3, body, (0, x))[1] ** 2)


def checkpointed(p, x):
    layer = jax.checkpoint(lambda h: jax.nn.gelu(h @ p["w1"]))
    return jnp.mean(layer(layer(x)) ** 2)


def jit_checkpoint_scan(p, x):
    """A jitted, checkpointed scan over layers (its gradient holds ``eval_jaxpr`` from jax 0.11.1)."""

    @jax.jit
    @jax.checkpoint
    def layers(h):
        return lax.scan(lambda h, w: (jnp.tanh(h @ w), None), h, jnp.stack([p["w1"], p["w2"]]))[0]

    return jnp.mean(layers(x) ** 2)


def sharded(p, x):
    """A data-parallel layer in ``jax.shard_map`` (one device: CI's CPU); its manual axes are a parameter
    whose name changed in jax 0.10.2."""
    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    P = jax.sharding.PartitionSpec
    layer = jax.shard_map(lambda xs, w: jnp.tanh(xs @ w), mesh=mesh, in_specs=(P("data"), P()), out_specs=P("data"))
    return jnp.mean(layer(x, p["w1"]) ** 2)


@jax.custom_jvp
def soft_clip(v):
    return jnp.tanh(v) * 2.0


@soft_clip.defjvp
def _soft_clip_jvp(primals, tangents):
    (v,), (dv,) = primals, tangents
    return soft_clip(v), dv * 2.0 * (1.0 - jnp.tanh(v) ** 2)


@jax.custom_vjp
def scaled_gelu(v):
    return jax.nn.gelu(v) * 0.5


def _scaled_gelu_fwd(v):
    return scaled_gelu(v), v


def _scaled_gelu_bwd(v, g):
    return (g * 0.5 * jax.grad(lambda u: jnp.sum(jax.nn.gelu(u)))(v),)


scaled_gelu.defvjp(_scaled_gelu_fwd, _scaled_gelu_bwd)


def survey(p, x):
    """Common jnp and linalg code in one loss: reductions, sorts, gathers, cumulative sums, norms, solves."""
    h = x @ p["w1"]
    a = h[:4, :4] @ h[:4, :4].T + 4.0 * jnp.eye(4)
    parts = [
        jax.nn.logsumexp(h, axis=-1).mean(),
        jnp.sort(h, axis=-1)[:, -1].mean(),
        jnp.take_along_axis(h, jnp.argmax(h, axis=-1)[:, None], axis=-1).mean(),
        jnp.cumsum(h, axis=-1).mean() * 0.01,
        jnp.linalg.norm(h, axis=-1).mean(),
        jnp.linalg.solve(a, h[:4, :1]).sum(),
        jnp.where(h > 0, h, 0.1 * h).mean(),
        jnp.einsum("bi,bi->b", h, x).mean() * 0.01,
        jnp.max(jnp.abs(h)) * 0.01,
    ]
    return sum(parts[1:], parts[0])


# -- Flax and optax -------------------------------------------------------------------------------------


class LinenMlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(jax.nn.gelu(nn.Dense(WIDTH)(x)))
        return nn.Dense(4)(jnp.tanh(nn.Dense(WIDTH)(h)))


class NnxMlp(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.l0 = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.norm = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.l1 = nnx.Linear(WIDTH, 4, rngs=rngs)

    def __call__(self, x):
        return self.l1(jnp.tanh(self.norm(jax.nn.gelu(self.l0(x)))))


def linen_model():
    variables = jax.jit(LinenMlp().init)(jax.random.key(0), X)
    return (lambda v, x: jnp.mean(LinenMlp().apply(v, x) ** 2)), variables


def nnx_model():
    graphdef, state = nnx.split(NnxMlp(nnx.Rngs(0)))
    return (lambda s, x: jnp.mean(nnx.merge(graphdef, s)(x) ** 2)), state


ADAMW = optax.adamw(1e-2)


def adamw_step(state, x):
    """One training step: the gradient, then AdamW's update in float32 (its scope excluded: AdamW's
    b2 = 0.999 is 1.0 in bf16, and its bias correction would divide by zero)."""
    params, opt_state = state
    grads = jax.grad(dense(jax.nn.gelu))(params, x)
    with jax.named_scope("optimizer"):
        updates, opt_state = ADAMW.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return jnp.mean(dense(jax.nn.gelu)(params, x)), (params, opt_state)


# -- the zoo --------------------------------------------------------------------------------------------

# name -> () -> (loss(params, x), params)
MODELS: dict[str, Callable[[], tuple[Callable, object]]] = {
    **{f"act_{name}": (lambda act=act: (dense(act), W)) for name, act in ACTIVATIONS.items()},
    "layer_norm": lambda: (dense(layer_norm), W),
    "rms_norm": lambda: (dense(rms_norm), W),
    "standardize": lambda: ((lambda p, x: jnp.mean(jax.nn.standardize(x @ p["w1"], axis=-1) ** 3)), W),
    "attention": lambda: (attention, W),
    "scan_rnn": lambda: (rnn, W),
    "fori_loop": lambda: (fori, W),
    "map": lambda: (mapped, W),
    "cond": lambda: (cond, W),
    "switch": lambda: (switch, W),
    "checkpoint": lambda: (checkpointed, W),
    "jit_checkpoint_scan": lambda: (jit_checkpoint_scan, W),
    "shard_map": lambda: (sharded, W),
    "custom_jvp": lambda: (dense(soft_clip), W),
    "custom_vjp": lambda: (dense(scaled_gelu), W),
    "jnp_survey": lambda: (survey, W),
    "flax_linen": linen_model,
    "flax_nnx": nnx_model,
}
FORWARD_ONLY = {"while_loop": lambda: (while_loop, W)}  # differentiated forward: jax.jvp

MXFP8 = fpemu.Policy(dot="mxfp8")
# Bounds of the relative error against the float32 step: measured on jax 0.10.2 and 0.12.0.1, at most
# 0.012 in bf16 and 0.14 under mxfp8 (e4m3fn elements: 3 mantissa bits).
BF16_ERROR, MXFP8_ERROR = 0.03, 0.3


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.result_type(v), jnp.floating)]


def relative_error(actual, expected) -> float:
    a, e = (np.concatenate([v.astype(np.float64).ravel() for v in _leaves(t)]) for t in (actual, expected))
    assert np.isfinite(a).all(), "the emulated result has a NaN or an infinity"
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))


def assert_bf16_values(tree) -> None:
    for v in _leaves(tree):
        np.testing.assert_array_equal(np.asarray(fpemu.quantize(v, "bf16")).view(np.uint32), v.view(np.uint32))


def _forward_mode(loss: Callable) -> Callable:
    def step(params, x):
        ones = jax.tree_util.tree_map(jnp.ones_like, params)
        return jax.jvp(lambda p: loss(p, x), (params,), (ones,))

    return step


@functools.cache
def _float32_step(name: str):
    """The float32 result of the model's step (value and gradient), computed once per test process."""
    step, _, params = _step_and_reference(name)
    return jax.jit(step)(params, X)


def _step_and_reference(name: str) -> tuple[Callable, Callable, object]:
    """(the step, its loss, its parameters)."""
    if name in FORWARD_ONLY:
        loss, params = FORWARD_ONLY[name]()
        return _forward_mode(loss), loss, params
    loss, params = MODELS[name]()
    return jax.value_and_grad(loss), loss, params


@pytest.mark.long
@pytest.mark.parametrize("name", [*MODELS, *FORWARD_ONLY])
def test_backward_pass_emulated_in_bf16(name):
    step, _, params = _step_and_reference(name)
    expected = _float32_step(name)
    got = jax.jit(fpemu.emulate(step, "bf16"))(params, X)
    assert_bf16_values(got)
    assert relative_error(got, expected) < BF16_ERROR


@pytest.mark.long
@pytest.mark.parametrize("name", [name for name in MODELS if not name.startswith("act_")])
def test_straight_through_gradient_of_bf16_forward(name):
    _, loss, params = _step_and_reference(name)
    expected = _float32_step(name)
    value, grads = jax.jit(jax.value_and_grad(fpemu.emulate(loss, "bf16")))(params, X)
    assert_bf16_values(value)
    assert relative_error((value, grads), expected) < BF16_ERROR


@pytest.mark.long
@pytest.mark.parametrize("name", list(MODELS))
def test_training_recipe_quantizes_the_gemms(name):
    step, _, params = _step_and_reference(name)
    expected = _float32_step(name)
    got = jax.jit(fpemu.emulate(step, MXFP8))(params, X)
    assert relative_error(got, expected) < MXFP8_ERROR
    assert any(not np.array_equal(a, e) for a, e in zip(_leaves(got), _leaves(expected), strict=True))


@pytest.mark.long
def test_adamw_step_in_bf16_with_the_optimizer_in_float32():
    state = (W, ADAMW.init(W))
    policy = fpemu.Policy(default="bf16", exclude=("optimizer",), round_inputs=(1,))  # the data, not the state
    with jax.numpy_dtype_promotion("standard"):  # optax raises a float to an int32 power
        expected_loss, (expected_params, _) = jax.jit(adamw_step)(state, X)
        loss, (params, opt_state) = jax.jit(fpemu.emulate(adamw_step, policy))(state, X)
    assert_bf16_values(loss)
    assert relative_error(params, expected_params) < BF16_ERROR
    assert relative_error(loss, expected_loss) < BF16_ERROR
    assert int(opt_state[0].count) == 1
    for new, old in zip(_leaves(params), _leaves(W), strict=True):
        step = np.abs(new - old)  # AdamW's first step: about the learning rate, for every weight
        assert np.all((step > 0.009) & (step < 0.011))
        assert not np.array_equal(np.asarray(fpemu.quantize(new, "bf16")), new)  # updated in float32
