"""The transformer block the training-step benchmarks time (bench/test_scalify.py, bench/test_training.py).

A pre-LayerNorm block: 4-head attention, GELU MLP of width 4d; batch 8, sequence 128, d 256. ``step`` is
``jax.value_and_grad`` of a scalar loss followed by an SGD update of every parameter.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

BATCH, SEQ, D, HEADS = 8, 128, 256, 4
LR = 0.01


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def block(params, x, attention_scope=None):
    """The block; ``attention_scope``: a ``jax.named_scope`` around the attention score and value
    products (``"attention"``: the scope the training recipes keep in high precision)."""
    h = layer_norm(x, params["ln1_g"], params["ln1_b"])
    qkv = jnp.einsum("bsd,de->bse", h, params["w_qkv"])
    q, k, v = jnp.split(qkv.reshape(BATCH, SEQ, 3, HEADS, D // HEADS), 3, axis=2)
    q, k, v = (t[:, :, 0].transpose(0, 2, 1, 3) for t in (q, k, v))
    with jax.named_scope(attention_scope) if attention_scope else contextlib.nullcontext():
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(D // HEADS)).astype(x.dtype)
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
    o = o.transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D)
    x = x + jnp.einsum("bsd,de->bse", o, params["w_o"])
    h = layer_norm(x, params["ln2_g"], params["ln2_b"])
    h = jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, params["w_1"]))
    return x + jnp.einsum("bsf,fd->bsd", h, params["w_2"])


def loss(params, x, attention_scope=None):
    return jnp.mean(jnp.square(block(params, x, attention_scope)))


def step(params, x):
    """Every dot of the block unscoped: a training recipe quantizes the attention products too."""
    value, grads = jax.value_and_grad(loss)(params, x)
    return value, jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)


def step_attention_kept(params, x):
    """`step` with the attention products under ``jax.named_scope("attention")``, as docs/training.md
    and Transformer Engine have them: a training recipe leaves them in high precision."""
    value, grads = jax.value_and_grad(loss)(params, x, "attention")
    return value, jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)


def make_inputs():
    rng = np.random.default_rng(0)
    shapes = {"w_qkv": (D, 3 * D), "w_o": (D, D), "w_1": (D, 4 * D), "w_2": (4 * D, D)}
    params = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for k, s in shapes.items()}
    for name in ("ln1", "ln2"):
        params[f"{name}_g"], params[f"{name}_b"] = np.ones(D, np.float32), np.zeros(D, np.float32)
    return params, rng.standard_normal((BATCH, SEQ, D)).astype(np.float32)
