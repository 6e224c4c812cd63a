"""fpemu.emulate on arrays sharded over 8 simulated CPU devices gives what one device gives, bit for bit.

Bitwise equality holds when no floating-point reduction is split across devices (data parallelism
over examples, tensor parallelism over output features) and XLA computes every float32 dot with the
same kernel: a float32 sum split over devices is added in another order, as in any sharded program,
and XLA:CPU picks another dot kernel when a device's output has fewer than 32 columns. Here the
FP8 rounding of the results hides such last-bit differences. Statistics are integer sums and always
agree.

The device count is fixed when JAX starts, so the check runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (nothing leaks into the other tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.long  # run first (tests/conftest.py)

SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import fpemu

    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "raise")
    assert jax.device_count() == 8, jax.devices()

    def same(a, b, what):
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, what
            if x.dtype.kind == "f":
                x, y = x.view(np.uint32), y.view(np.uint32)
            assert np.array_equal(x, y), (what, x, y)

    keys = jax.random.split(jax.random.key(0), 4)
    params = {
        "w1": jax.random.normal(keys[0], (32, 64)) * 0.2,
        "w2": jax.random.normal(keys[1], (64, 16)) * 0.2,
        "g": jnp.ones((1, 64)),
    }
    x = jax.random.normal(keys[2], (32, 32))

    def model(params, x):
        # per-example losses: every floating-point reduction runs within one example
        with jax.named_scope("hidden"):
            h = jax.nn.gelu(x @ params["w1"])
            h = h * lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6) * params["g"]
        h = lax.fori_loop(0, 2, lambda i, t: jnp.tanh(t) * 1.5, h)
        return jnp.sum(jax.nn.log_softmax(h @ params["w2"]), axis=-1)

    data = Mesh(np.array(jax.devices()), ("data",))
    sharded_x = jax.device_put(x, NamedSharding(data, P("data", None)))
    replicated = jax.device_put(params, NamedSharding(data, P()))
    assert len(sharded_x.sharding.device_set) == 8

    # Stochastic rounding (a counter hash of the global element index), FP8 dot operands.
    policy = fpemu.Policy(default="bf16", rounding="stochastic", dot=fpemu.DotPolicy(lhs="e4m3fn", rhs="e5m2"))
    key = jax.random.key(7)
    emulated = fpemu.emulate(model, policy, key=key)
    single = jax.jit(emulated)(params, x)
    sharded = jax.jit(emulated)(replicated, sharded_x)
    same(sharded, single, "values")
    assert len(sharded.sharding.device_set) == 8, sharded.sharding

    grad_x = jax.jit(jax.grad(lambda p, v: fpemu.emulate(model, policy, key=key)(p, v).sum(), argnums=1))
    same(grad_x(replicated, sharded_x), grad_x(params, x), "grad of emulate")
    emulated_grad = jax.jit(fpemu.emulate(jax.grad(lambda p, v: model(p, v).sum(), argnums=1), "bf16"))
    same(emulated_grad(replicated, sharded_x), emulated_grad(params, x), "emulate of grad")

    # Tensor parallelism over output features (2 x 4 mesh): no reduction crosses devices either.
    two_d = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    w1 = jax.device_put(params["w1"], NamedSharding(two_d, P(None, "model")))
    x2 = jax.device_put(x, NamedSharding(two_d, P("data", None)))
    # Statistics: integer sums over the devices, the same counts as one device's.
    layer = fpemu.emulate(
        lambda v, w: jnp.tanh(v @ w) * 3.0, fpemu.Policy(default="e4m3fn", saturate=True), with_stats=True
    )
    out = jax.jit(layer)(x2, w1)
    assert len(out[0].sharding.device_set) == 8
    same(out, jax.jit(layer)(x, params["w1"]), "tensor parallel: values and counts")
    assert int(out[1]["dot_general"]["elements"]) == 32 * 64, out[1]
    assert int(out[1]["inputs"]["subnormal"]) > 0, out[1]  # not all counts are zero

    mesh = two_d
    # shard_map inside the emulated function: each shard rounds its own values; the psum adds four
    # e4m3fn values (exact in float32 in any order), then rounds once, as the hand-written version.
    def local(xb, w):
        return lax.psum(jnp.tanh(xb @ w) * 0.5, "model")

    mapped = jax.shard_map(local, mesh=mesh, in_specs=(P("data", "model"), P("model", None)), out_specs=P("data", None))
    sharded_x = jax.device_put(x, NamedSharding(mesh, P("data", "model")))
    w = jax.random.normal(keys[3], (32, 16))
    got, stats = jax.jit(fpemu.emulate(mapped, "e4m3fn", with_stats=True))(sharded_x, w)
    assert int(stats["tanh"]["elements"]) == 32 * 16 * 4, stats["tanh"]  # per device, summed over the 8
    r = lambda v: fpemu.quantize(v, "e4m3fn")
    bf16 = jnp.bfloat16
    mm = lambda a, b: r(jnp.matmul(a.astype(bf16), b.astype(bf16), preferred_element_type=jnp.float32))
    xr, wr = r(x), r(w)
    parts = [r(r(jnp.tanh(mm(xr[:, 8 * i : 8 * (i + 1)], wr[8 * i : 8 * (i + 1)]))) * 0.5) for i in range(4)]
    expected = r(parts[0] + parts[1] + parts[2] + parts[3])  # sums of e4m3fn values: exact in float32
    same(got, expected, "shard_map")
    print("OK")
    """
)


def test_sharded_emulate_equals_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout[-3000:] + result.stderr[-6000:]
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), output
