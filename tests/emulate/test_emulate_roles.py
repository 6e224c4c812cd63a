"""How emulate classifies the dots of a training step: forward, dgrad, wgrad (docs/training.md).

Pure jaxpr analysis, nothing compiled: each case traces a program with ``jax.make_jaxpr`` and
checks the role of every dot, in program order, against what the program computes (written out
by hand from the math of the backward pass, not read from the classifier).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from fpemu._emulate.gemm_roles import classify
from fpemu._emulate.training_state import gemm_roles

W = jnp.ones((4, 8))
X = jnp.ones((2, 4))


def roles(fn, *args) -> list[tuple[str, str | None]]:
    return [(name, gemm) for name, gemm, _ in gemm_roles(fn, *args)]


def gradients(fn, *args) -> list[int | None]:
    """The operand (0 lhs, 1 rhs) that carries the cotangent, per dot."""
    return [e.role.gradient if e.role else None for e in classify(jax.make_jaxpr(fn)(*args)).entries]


def mlp(params, x):
    with jax.named_scope("l0"):
        h = jnp.tanh(x @ params["w0"])
    with jax.named_scope("l1"):
        return jnp.sum(h @ params["w1"])


PARAMS = {"w0": jnp.ones((4, 8)), "w1": jnp.ones((8, 3))}


def test_a_two_layer_mlp_has_three_gemms_per_layer_in_transposition_order():
    assert roles(jax.value_and_grad(mlp, argnums=(0, 1)), PARAMS, X) == [
        ("l0/dot_general", "forward"),
        ("l1/dot_general", "forward"),
        ("l1/dot_general", "wgrad"),  # dW1 = h^T . g
        ("l1/dot_general", "dgrad"),  # dh = g . W1^T
        ("l0/dot_general", "wgrad"),
        ("l0/dot_general", "dgrad"),  # dx: x is differentiated (argnums 1)
    ]
    # JAX's transpose rule puts the cotangent on the left of both backward dots
    assert gradients(jax.value_and_grad(mlp, argnums=(0, 1)), PARAMS, X) == [None, None, 0, 0, 0, 0]


def test_without_gradients_every_dot_is_forward():
    assert roles(mlp, PARAMS, X) == [("l0/dot_general", "forward"), ("l1/dot_general", "forward")]


def test_the_input_gets_no_dgrad_unless_differentiated():
    assert [g for _, g in roles(jax.grad(mlp), PARAMS, X)] == ["forward", "forward", "wgrad", "dgrad", "wgrad"]


def test_batched_einsum_and_batch_dimensions():
    def loss(w, x):
        return jnp.sum(jnp.einsum("btd,de->bte", x, w) ** 2)

    assert [g for _, g in roles(jax.grad(loss, argnums=(0, 1)), W, jnp.ones((3, 2, 4)))] == [
        "forward",
        "wgrad",
        "dgrad",
    ]

    def bmm(a, b):  # a batch dimension on both sides: the right operand plays the weight
        return jnp.sum(jnp.einsum("bij,bjk->bik", a, b))

    assert [g for _, g in roles(jax.grad(bmm, argnums=(0, 1)), jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5)))] == [
        "forward",
        "wgrad",  # d b = a^T . g
        "dgrad",  # d a = g . b^T
    ]


def test_nested_jit_bodies_inherit_the_transposition():
    layer = jax.jit(lambda w, x: jnp.tanh(x @ w))

    def loss(p, x):
        return jnp.sum(layer(p["w1"], layer(p["w0"], x)))

    p = {"w0": jnp.ones((4, 8)), "w1": jnp.ones((8, 8))}
    # both calls share one jitted body: its dot is named once per call site
    assert roles(jax.grad(loss), p, X) == [
        ("dot_general", "forward"),
        ("dot_general#1", "forward"),
        ("dot_general#1", "wgrad"),
        ("dot_general#1", "dgrad"),
        ("dot_general", "wgrad"),
    ]


def test_remat_recomputation_is_forward():
    layer = jax.checkpoint(lambda w, x: jnp.tanh(x @ w))

    def loss(p, x):
        return jnp.sum(layer(p["w1"], layer(p["w0"], x)))

    p = {"w0": jnp.ones((4, 8)), "w1": jnp.ones((8, 8))}
    found = gemm_roles(jax.grad(loss), p, X)
    assert [(n, g) for n, g, _ in found] == [
        ("dot_general", "forward"),
        ("dot_general#1", "forward"),
        ("dot_general#1", "forward"),  # recomputed in the backward pass: the forward GEMM again
        ("dot_general#1", "wgrad"),
        ("dot_general#1", "dgrad"),
        ("dot_general", "forward"),
        ("dot_general", "wgrad"),
    ]
    assert "recomputation" in found[2][2]


def test_scan_over_layers_pairs_the_body_dots():
    def loss(ws, x):
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
        return jnp.sum(h)

    assert roles(jax.grad(loss, argnums=(0, 1)), jnp.ones((3, 4, 4)), X) == [
        ("dot_general", "forward"),
        ("dot_general", "wgrad"),
        ("dot_general", "dgrad"),
    ]


def test_vmap_of_grad_per_example():
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    per_example = jax.vmap(jax.grad(loss), in_axes=(None, 0))
    assert [g for _, g in roles(per_example, W, jnp.ones((5, 2, 4)))] == ["forward", "wgrad"]


def test_convolutions_are_classified_like_dots():
    def loss(x, w):
        return jnp.sum(jax.lax.conv(x, w, (1, 1), "SAME"))

    x, w = jnp.ones((1, 2, 5, 5)), jnp.ones((3, 2, 3, 3))
    assert [g for _, g in roles(jax.grad(loss, argnums=(0, 1)), x, w)] == ["forward", "wgrad", "dgrad"]
    # wgrad is conv(x, g): the cotangent on the right; dgrad is conv(g, rev(w)): on the left
    assert gradients(jax.grad(loss, argnums=(0, 1)), x, w) == [None, 1, 0]


def test_a_cotangent_given_to_vjp_is_a_gradient():
    def f(w, x):
        return jnp.tanh(x @ w)

    def pullback(w, x, g):
        return jax.vjp(f, w, x)[1](g)

    assert [g for _, g in roles(pullback, W, X, jnp.ones((2, 8)))] == ["forward", "wgrad", "dgrad"]


@pytest.mark.parametrize(
    "loss",
    [
        lambda x, w: jnp.vdot(x @ w, x @ w) * 0.5,  # a dot of two activations downstream
        lambda x, w: jnp.tanh(x @ w)[0, 0] * w[0, 0],  # a scalar cotangent seed (a literal 1.0)
        lambda x, w: jnp.mean(x @ w),  # the seed 1/6 computed from literals
    ],
)
def test_seeds_from_literals_carry_the_cotangent(loss):
    found = [g for _, g in roles(jax.grad(loss, argnums=(0, 1)), X, W)]
    assert found.count("dgrad") >= 1 and found.count("wgrad") >= 1


def test_a_dot_of_two_cotangents_has_no_role():
    @jax.custom_vjp
    def f(h, w):
        return h * jnp.sum(w)

    f.defvjp(lambda h, w: (f(h, w), None), lambda res, g: (g, g.T @ g))  # a backward dot of g with itself

    def loss(w, x):
        return jnp.sum(jnp.tanh(f(x, w)))

    found = gemm_roles(jax.grad(loss), jnp.ones((4, 4)), X)
    assert [(g, reason) for _, g, reason in found] == [(None, "both operands carry cotangents")]


def test_the_residual_fallback_names_an_argument_a_weight():
    # a custom_vjp whose forward pass has no dot: its backward dots' residuals alias no forward
    # operand, so the fallback decides: an argument of the function (w) is a weight (dgrad), a
    # computed value (h = tanh(x)) an activation (wgrad)
    @jax.custom_vjp
    def f(h, w):
        return h * jnp.sum(w)

    f.defvjp(lambda h, w: (f(h, w), (h, w)), lambda res, g: (g @ res[1], res[0].T @ g))

    def loss(w, x):
        return jnp.sum(f(jnp.tanh(x), w))

    found = gemm_roles(jax.grad(loss, argnums=(0, 1)), jnp.ones((4, 4)), X)
    assert [g for _, g, _ in found] == ["wgrad", "dgrad"] or [g for _, g, _ in found] == ["dgrad", "wgrad"]
    by_role = {g: reason for _, g, reason in found}
    assert "fallback" in by_role["dgrad"] and "argument" in by_role["dgrad"]
    assert "fallback" in by_role["wgrad"] and "computed" in by_role["wgrad"]


def test_a_seed_passed_into_a_backward_scan_as_a_literal_carries_the_cotangent():
    # a scalar carry: the backward scan receives the seed 1.0 as a literal operand of its body
    def loss(ws, x):
        def body(c, w):
            return c + jnp.sum(x @ w), None

        c, _ = jax.lax.scan(body, jnp.float32(0.0), ws)
        return c

    assert roles(jax.grad(loss, argnums=(0, 1)), jnp.ones((3, 4, 8)), X) == [
        ("dot_general", "forward"),
        ("dot_general", "wgrad"),
        ("dot_general", "dgrad"),
    ]


def test_a_seed_moved_onto_the_mesh_outside_the_backward_pass_carries_the_cotangent():
    # with check_vma (the default), JAX makes the seed 1.0 as `pvary 1.0` outside `transpose`
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("data",))
    spec = jax.sharding.PartitionSpec

    def local(w, x):
        return jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w)), argnums=(0, 1))(w, x)

    sharded = jax.shard_map(local, mesh=mesh, in_specs=(spec(), spec("data")), out_specs=(spec(), spec("data")))
    assert [g for _, g in roles(sharded, W, X)] == ["forward", "wgrad", "dgrad"]
