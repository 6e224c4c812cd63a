"""Delayed scaling (``fp8_delayed``) of dots inside ``lax.scan`` and ``jax.shard_map``.

Transformer Engine keeps one amax per module and step: a layer applied several times records the
maximum of its amaxes, and data-parallel devices all-reduce theirs by maximum, so every device
reads the same scale. Under ``emulate`` a dot in a ``scan`` body records, for the step, the maximum
of its operand's amax over the iterations; a dot in a ``shard_map`` body, the maximum over the
devices. The expected histories below are computed with NumPy from the inputs; the results are
compared bit for bit with the same computation unrolled (scan) or on one device (shard_map).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from fpemu import Policy, emulate, init_training_state
from tests.training.test_emulate_training import assert_tree_bits

POLICY = Policy(dot="fp8_delayed")
TENSORS = ["x", "w", "g"]  # one history per tensor of a layer, read by every GEMM that quantizes it


def normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def layer(c, xwm):
    x, w, m = xwm
    with jax.named_scope("layer"):
        y = x @ w
    return c + jnp.sum(y * m, axis=0), y  # the cotangent of y is m


# The loss and the forward GEMMs' results y (aux).
def scanned(ws, xs, ms):
    c, ys = lax.scan(layer, jnp.zeros(8), (xs, ws, ms))
    return jnp.sum(c), ys


def unrolled(ws, xs, ms):
    c, ys = jnp.zeros(8), []
    for i in range(ws.shape[0]):
        c, y = layer(c, (xs[i], ws[i], ms[i]))
        ys.append(y)
    return jnp.sum(c), tuple(ys)


# Three iterations whose operands peak in different ones: x in the 2nd, W in the 1st, m in the 3rd.
XS = jnp.asarray(normal(0, 3, 4, 16) * np.float32([1.0, 4.0, 0.5])[:, None, None])
WS = jnp.asarray(normal(1, 3, 16, 8) * np.float32([2.0, 0.5, 1.0])[:, None, None])
MS = jnp.asarray(normal(2, 3, 4, 8) * np.float32([0.25, 1.0, 8.0])[:, None, None])


def amax_per_iteration(a: jax.Array) -> np.ndarray:
    return np.abs(np.asarray(a)).max(axis=(1, 2))


@pytest.mark.long
def test_a_scanned_dot_records_the_max_over_iterations_and_equals_the_unrolled_loop():
    step = jax.value_and_grad(scanned, argnums=(0, 1), has_aux=True)
    state = init_training_state(step, POLICY, WS, XS, MS)
    assert sorted(state) == sorted(f"layer/dot_general.{t}" for t in TENSORS)
    emulated = jax.jit(emulate(step, POLICY, state=True, with_stats=True))
    (_, stats), state = emulated(state, WS, XS, MS)

    x, w, g = (amax_per_iteration(a) for a in (XS, WS, MS))
    assert len({int(np.argmax(a)) for a in (x, w, g)}) == 3  # each peaks in another iteration
    for t, amaxes in {"x": x, "w": w, "g": g}.items():
        history = np.asarray(state[f"layer/dot_general.{t}"])
        assert history[0] == amaxes.max() and not history[1:].any(), t
    # statistics: counts summed over the iterations; the amax the scales came from (a zero history)
    assert int(stats["layer/dot_general.forward.lhs"]["elements"]) == XS.size
    assert float(stats["layer/dot_general.forward.lhs"]["amax"]) == 0.0

    # the next step reads those histories; the unrolled loop (three dots, three sets of histories)
    # given the same histories computes the same GEMMs bit for bit: the forward products (aux) and the
    # gradients (the loss itself is a float sum, which XLA may fuse differently in the two programs)
    sites = ["layer/dot_general", "layer/dot_general#1", "layer/dot_general#2"]
    flat = jax.value_and_grad(unrolled, argnums=(0, 1), has_aux=True)
    assert sorted(init_training_state(flat, POLICY, WS, XS, MS)) == sorted(f"{s}.{t}" for s in sites for t in TENSORS)
    flat_state = {f"{s}.{t}": state[f"layer/dot_general.{t}"] for s in sites for t in TENSORS}
    (((_, ys), grads), stats), new_state = emulated(state, WS, XS, MS)
    ((_, flat_ys), flat_grads), new_flat_state = jax.jit(emulate(flat, POLICY, state=True))(flat_state, WS, XS, MS)
    assert_tree_bits((tuple(ys), grads), (flat_ys, flat_grads))
    for t in TENSORS:  # the scan's history records the max of the unrolled dots' amaxes
        rows = np.stack([np.asarray(new_flat_state[f"{s}.{t}"]) for s in sites])
        np.testing.assert_array_equal(np.asarray(new_state[f"layer/dot_general.{t}"]), rows.max(axis=0))
    assert float(stats["layer/dot_general.dgrad.lhs"]["amax"]) == g.max()  # the reduced history it read
    (_, exact_ys), exact_grads = step(WS, XS, MS)  # the checks above would pass vacuously unquantized
    for a, e in zip(jax.tree_util.tree_leaves((ys, grads)), jax.tree_util.tree_leaves((exact_ys, exact_grads))):
        assert not np.array_equal(np.asarray(a), np.asarray(e))


@pytest.mark.long
def test_grad_of_an_emulated_scan_records_the_forward_histories():
    # jax.grad outside emulate: the forward dot's custom_vjp keeps the histories of x and W, which
    # its wgrad and dgrad read too (its gradients are scaled from their current amax: no history of g)
    state = init_training_state(scanned, POLICY, WS, XS, MS)
    assert sorted(state) == ["layer/dot_general.w", "layer/dot_general.x"]
    loss = emulate(lambda *a: scanned(*a)[0], POLICY, state=True)
    (_, state), grads = jax.jit(jax.value_and_grad(loss, argnums=(1, 2), has_aux=True))(state, WS, XS, MS)
    x, w = amax_per_iteration(XS), amax_per_iteration(WS)
    for t, amax in {"x": x, "w": w}.items():
        assert float(state[f"layer/dot_general.{t}"][0]) == amax.max(), t
    assert all(bool(jnp.isfinite(g).all()) for g in grads)


SHARD_MAP_SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P
    from fpemu import Policy, emulate, init_training_state

    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "raise")
    assert jax.device_count() == 8, jax.devices()

    def same(a, b, what):
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, what
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), (what, x, y)

    policy = Policy(dot="fp8_delayed")

    def loss(w, x, c):
        with jax.named_scope("layer"):
            y = x @ w
        return jnp.sum(jnp.tanh(y) * c), y

    step = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)

    def local(w, x, c):
        # data parallel: each device differentiates its examples; its own wgrad comes out unreduced,
        # so that the comparison below needs no float sum across devices
        (_, y), (dw, dx) = step(w, x, c)
        return y, dx, dw[None]

    mesh = Mesh(np.array(jax.devices()), ("data",))
    # check_vma=False: with it, the gradient of the replicated w would be summed over the devices
    # (pvary transposes to psum), a float sum across devices that this comparison avoids
    sharded = jax.shard_map(
        local, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P("data"), P("data"), P("data")),
        check_vma=False,
    )
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((16, 8)).astype(np.float32))
    x = jnp.asarray(rng.standard_normal((32, 16)).astype(np.float32) * np.repeat(np.arange(1, 9), 4)[:, None])
    c = jnp.asarray(rng.standard_normal((32, 8)).astype(np.float32) * np.repeat(np.arange(8, 0, -1), 4)[:, None])

    state = init_training_state(sharded, policy, w, x, c)
    assert sorted(state) == sorted(init_training_state(step, policy, w, x, c)) and len(state) == 3, sorted(state)
    run = jax.jit(emulate(sharded, policy, state=True))
    single = jax.jit(emulate(step, policy, state=True))  # one device, on one device's examples
    for it in range(2):  # the second step reads the histories of the first
        (y, dx, dws), new_state = run(state, w, x, c)
        shard_states = []
        for d in range(8):  # every device quantized with the scales of the same histories
            rows = slice(4 * d, 4 * d + 4)
            ((_, y1), (dw1, dx1)), shard_state = single(state, w, x[rows], c[rows])
            same((y[rows], dx[rows], dws[d]), (y1, dx1, dw1), f"device {d}, step {it}")
            shard_states.append(shard_state)
        # the step's amax is the max over the devices, as one device would record for the whole batch
        expected = jax.tree.map(lambda *h: np.max(np.stack(h), axis=0), *shard_states)
        same(new_state, expected, "histories: the amax all-reduced by max")
        state = new_state
    # by hand: the amax of the whole batch (x peaks on the last device, c on the first)
    assert float(state["layer/dot_general.x"][0]) == float(np.abs(np.asarray(x)).max())
    assert float(state["layer/dot_general.w"][0]) == float(np.abs(np.asarray(w)).max())
    g = np.asarray(c) * (1 - np.tanh(np.asarray(y)) ** 2)  # the cotangent of y = x @ w
    assert np.isclose(float(state["layer/dot_general.g"][0]), np.abs(g).max(), rtol=1e-6)
    print("OK")
    """
)


@pytest.mark.long
def test_a_dot_in_shard_map_all_reduces_its_amax_by_max():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", SHARD_MAP_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    output = result.stdout[-3000:] + result.stderr[-6000:]
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), output
