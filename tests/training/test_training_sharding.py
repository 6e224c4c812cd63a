"""An emulated training step on 8 simulated CPU devices gives what one device gives, bit for bit.

``jax.jit(fpemu.emulate(jax.value_and_grad(loss), Policy(default="bf16", dot=recipe), key=key))``
runs with its inputs placed by `jax.device_put` with a `NamedSharding` (jit partitions the step
itself): the batch split over a 1-D mesh of 8 devices (data parallelism), or the weights split
along their output features over the ``model`` axis of a 2 x 4 mesh (tensor parallelism). The
loss, the gradients and, for ``fp8_delayed``, the new amax histories must equal the single-device
step's bits. What fpemu decides must not depend on the sharding: per-tensor amaxes over a sharded
axis, blocks and 2-D tiles that span devices (wgrad's blocks along the sharded batch, dgrad's along
the sharded output features), the stochastic-rounding bits of the gradients and the Hadamard signs
(counter hashes of global element indices), the delayed-scaling histories.

Bitwise equality is only defined where XLA computes the same float32 sums: a sum split across
devices (a contraction over the sharded batch, a mean over it) is added in another order, as in
any sharded program, and so is, on XLA:CPU, a float32 dot whose per-device output has fewer than 32
columns (another kernel). The model is built so that neither happens, and the unemulated gradients
check it: a one-hot input with distinct tokens (an embedding lookup) and a loss that reads each
example's own target logit (distinct targets), no bias, 32 columns per device. Every sum over the
sharded batch or output features then has one nonzero term, while every quantized operand but the
one-hot input and the target gradient is dense. NVFP4's random Hadamard transform mixes the 16
examples of a block into every wgrad product: it runs with the batch replicated (tensor
parallelism); the data-parallel step uses ``nvfp4_recipe(disable_rht=True)``.

The device count is fixed when JAX starts, so the steps run in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Compilation dominates (three programs per
recipe, 3-10 s of CPU each recipe), so the default run takes ``mxfp8``, the slow run the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.long  # run first (tests/conftest.py)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import fpemu

    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "raise")
    assert jax.device_count() == 8, jax.devices()

    B, V, H, C = 16, 128, 128, 128  # batch, vocabulary, hidden, classes
    rng = np.random.default_rng(0)
    tokens, targets = rng.permutation(V)[:B], rng.permutation(C)[:B]  # distinct
    x = jnp.asarray(np.eye(V, dtype=np.float32)[tokens] * rng.standard_normal((B, 1)).astype(np.float32))
    t = jnp.asarray(np.eye(C, dtype=np.float32)[targets])
    params = {
        "w0": jnp.asarray(rng.standard_normal((V, H)).astype(np.float32)),
        "w1": jnp.asarray(rng.standard_normal((H, C)).astype(np.float32) * np.float32(0.1)),
    }

    def loss(params, x, t):
        with jax.named_scope("embed"):
            h = jax.nn.gelu(x @ params["w0"])
        with jax.named_scope("head"):
            y = h @ params["w1"]
        # the per-example losses (bf16 under the policy, in [0.32, 1.12]) add up exactly in float32
        return jnp.mean(jax.nn.softplus(-jnp.sum(y * t, axis=-1)))

    def differ(actual, expected):
        # the paths of the leaves whose bits differ
        out = []
        for (path, a), e in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree_util.tree_leaves(expected)):
            a, e = np.asarray(a), np.asarray(e)
            if a.dtype != e.dtype or a.shape != e.shape or not np.array_equal(a.view(np.uint32), e.view(np.uint32)):
                out.append(jax.tree_util.keystr(path))
        return out

    data = Mesh(np.array(jax.devices()), ("data",))
    grid = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    put = lambda tree, mesh, spec: jax.device_put(tree, NamedSharding(mesh, spec))
    layouts = {  # (params, x, t, mesh)
        "data parallel": (put(params, data, P()), put(x, data, P("data")), put(t, data, P("data")), data),
        "tensor parallel": (put(params, grid, P(None, "model")), put(x, grid, P()), put(t, grid, P()), grid),
    }
    assert layouts["data parallel"][1].addressable_shards[0].data.shape == (B // 8, V)
    assert layouts["tensor parallel"][0]["w1"].addressable_shards[0].data.shape == (H, C // 4)

    plain = jax.jit(jax.value_and_grad(loss))
    single_plain = plain(params, x, t)
    # The premise: no float32 sum of the step is computed otherwise, so the unemulated gradients
    # agree too (its float32 mean loss does not: its per-example losses have 24 significant bits).
    report = {name: {"unemulated gradients": differ(plain(*a[:3])[1], single_plain[1])} for name, a in layouts.items()}

    key = jax.random.key(7)
    fn = jax.value_and_grad(loss)
    steps = {}  # policy -> (jitted step, single-device result, first state or None)

    def single_device(policy):
        if policy not in steps:
            kw = {"key": key} if policy.stochastic else {}
            if policy.dot.stateful:  # two steps: the second scales from the first one's amaxes
                step = jax.jit(fpemu.emulate(fn, policy, state=True, **kw))
                state = fpemu.init_training_state(fn, policy, params, x, t)
                steps[policy] = step, step(step(state, params, x, t)[1], params, x, t), state
            else:
                step = jax.jit(fpemu.emulate(fn, policy, **kw))
                steps[policy] = step, step(params, x, t), None
            value = steps[policy][1][0] if policy.dot.stateful else steps[policy][1]
            assert differ(value, single_plain), f"{policy.dot.name} left the step as it was"
        return steps[policy]

    for name in sys.argv[1:]:
        for layout, (p, xs, ts, mesh) in layouts.items():
            rht_off = name == "nvfp4" and layout == "data parallel"
            policy = fpemu.Policy(default="bf16", dot=fpemu.nvfp4_recipe(disable_rht=True) if rht_off else name)
            step, single, state = single_device(policy)
            if state is None:
                sharded = step(p, xs, ts)
            else:
                sharded_state = put(state, mesh, P())
                sharded = step(step(sharded_state, p, xs, ts)[1], p, xs, ts)
            report[layout][policy.dot.name] = differ(sharded, single)
    print(json.dumps(report))
    """
)


def run(recipes: list[str]) -> dict:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, *recipes], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def check(recipes: list[str]) -> None:
    report = run(recipes)
    differing = {layout: {k: v for k, v in rows.items() if v} for layout, rows in report.items()}
    assert not any(differing.values()), f"leaves whose bits differ from one device's: {differing}"
    for layout, rows in report.items():  # every recipe ran in both layouts
        assert len(rows) == 1 + len(recipes), (layout, sorted(rows))


def test_sharded_training_step_equals_single_device():
    check(["mxfp8"])


@pytest.mark.slow
def test_sharded_training_step_equals_single_device_for_every_scaled_recipe():
    check(["fp8_current", "nvfp4", "fp8_blockwise", "fp8_delayed"])
