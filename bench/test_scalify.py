"""Speed of `fpemu.scalify`: a transformer block's training step, scalified vs plain float16.

The step is ``jax.value_and_grad`` of a scalar loss of a pre-LayerNorm block (4-head attention,
GELU MLP of width 4d; batch 8, sequence 128, d 256) followed by an SGD update of every parameter.
Rows (one pytest-benchmark group):

| row | what is timed |
|---|---|
| ``fp16`` | ``jax.jit(step)`` on float16 parameters and input |
| ``scalify-fp16`` | ``jax.jit(scalify(step))`` on `ScaledArray`s with float16 data and float32 scales |

Every row is compiled and run once before timing; each timed call ends in ``block_until_ready``.
The issue's target: ``scalify-fp16`` at most 1.2x ``fp16``. ``test_interleaved`` times the rows
round-robin (the ratio least disturbed by load drift) and prints the summary.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu.scalify as jsa
from fpemu.tools.bench import machine_line

BATCH, SEQ, D, HEADS = 8, 128, 256, 4
TARGET = 1.2
LR = 0.01


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def block(params, x):
    h = layer_norm(x, params["ln1_g"], params["ln1_b"])
    qkv = jnp.einsum("bsd,de->bse", h, params["w_qkv"])
    q, k, v = jnp.split(qkv.reshape(BATCH, SEQ, 3, HEADS, D // HEADS), 3, axis=2)
    q, k, v = (t[:, :, 0].transpose(0, 2, 1, 3) for t in (q, k, v))
    att = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(D // HEADS)).astype(x.dtype), axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", att, v).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D)
    x = x + jnp.einsum("bsd,de->bse", o, params["w_o"])
    h = layer_norm(x, params["ln2_g"], params["ln2_b"])
    h = jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, params["w_1"]))
    return x + jnp.einsum("bsf,fd->bsd", h, params["w_2"])


def loss(params, x):
    return jnp.mean(jnp.square(block(params, x)))


def step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return value, jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)


def make_inputs():
    rng = np.random.default_rng(0)
    shapes = {"w_qkv": (D, 3 * D), "w_o": (D, D), "w_1": (D, 4 * D), "w_2": (4 * D, D)}
    params = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for k, s in shapes.items()}
    for name in ("ln1", "ln2"):
        params[f"{name}_g"], params[f"{name}_b"] = np.ones(D, np.float32), np.zeros(D, np.float32)
    return params, rng.standard_normal((BATCH, SEQ, D)).astype(np.float32)


def rows():
    params, x = make_inputs()
    plain = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float16), (params, x))
    scaled = jsa.tree.astype(jsa.as_scaled_array((params, x), scale=np.float32(1)), jnp.float16)
    return {"fp16": (jax.jit(step), plain), "scalify-fp16": (jax.jit(jsa.scalify(step)), scaled)}


_ROWS = rows()
_TIMES: dict[str, float] = {}


def _call(name):
    fn, args = _ROWS[name]
    return jax.block_until_ready(fn(*args))


@pytest.mark.parametrize("name", list(_ROWS))
def test_step(benchmark, name):
    benchmark.group = "scalify: transformer block training step"
    out = _call(name)  # compile
    value = float(jsa.asarray(out[0], jnp.float32))
    assert np.isfinite(value)
    benchmark(_call, name)


def test_interleaved():
    for name in _ROWS:
        _call(name)
    times = {name: [] for name in _ROWS}
    for _ in range(7):
        for name in _ROWS:
            start = time.perf_counter()
            _call(name)
            times[name].append(time.perf_counter() - start)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    ratio = medians["scalify-fp16"] / medians["fp16"]
    print(f"\n{machine_line()}")
    for name, median in medians.items():
        print(f"{name:14s} median {1e3 * median:8.2f} ms")
    print(f"scalify-fp16 / fp16 = {ratio:.2f} (target <= {TARGET}): {'met' if ratio <= TARGET else 'NOT met'}")
