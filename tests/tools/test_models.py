"""`fpemu.tools.models`: the steps ``fpemu sweep`` times, checked against the libraries they stand for."""

from __future__ import annotations

import collections
import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.tools import models


def _bits(tree) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("policy", [None, "bf16"], ids=["fp32", "emulated bf16"])
def test_the_mlp_step_is_optax_adam_bit_for_bit(policy):
    """The MLP's hand-written Adam step and cross-entropy take optax's operations in optax's order: the
    loss, the parameters and the Adam state have optax's bits, unemulated and under emulate (which
    rounds each operation to bf16, so that any other order or operation would show)."""
    optax = pytest.importorskip("optax")
    step, (params, state, x, labels) = models.mlp_model()
    opt = optax.adam(1e-3)

    def optax_step(p, s, x, labels):
        def loss(p):
            h = x
            for layer in p[:-1]:
                h = jax.nn.relu(h @ layer["w"] + jnp.expand_dims(layer["b"], 0))
            logits = h @ p[-1]["w"] + jnp.expand_dims(p[-1]["b"], 0)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        value, grads = jax.value_and_grad(loss)(p)
        updates, s = opt.update(grads, s, p)
        return value, optax.apply_updates(p, updates), s

    def run(fn, s, promotion):
        fn = fn if policy is None else fpemu.emulate(fn, policy)
        with jax.numpy_dtype_promotion(promotion):
            with pytest.warns(fpemu.PrecisionWarning, match="0.999") if policy else contextlib.nullcontext():
                out = jax.jit(fn)(params, s, x, labels)
        return jax.tree_util.tree_map(np.asarray, out)

    # optax's bias correction raises a float to an int32 power, which strict promotion refuses
    ours, theirs = run(step, state, "strict"), run(optax_step, opt.init(params), "standard")
    value, new_params, new_state = ours
    assert _bits((value, new_params)) == _bits(theirs[:2])
    adam_state = theirs[2][0]  # (ScaleByAdamState, EmptyState)
    assert _bits((new_state["count"], new_state["mu"], new_state["nu"])) == _bits(
        (adam_state.count, adam_state.mu, adam_state.nu)
    )
    assert int(new_state["count"]) == 1
    assert not np.array_equal(new_params[0]["w"], params[0]["w"])  # the step moved the weights


def test_adam_count_stops_at_the_int32_maximum():
    """optax's ``safe_increment``: the step count saturates instead of wrapping to a negative count."""
    params = {"w": np.ones(3, np.float32)}
    state = models.adam_init(params)
    state["count"] = np.int32(np.iinfo(np.int32).max)
    _, new_state = models.adam_update({"w": np.ones(3, np.float32)}, state, params)
    assert int(new_state["count"]) == np.iinfo(np.int32).max


def test_transformer_block_sizes_shape_its_inputs_and_step():
    """A `TransformerBlock` of other sizes draws its inputs and runs its step at those sizes."""
    model = models.TransformerBlock(batch=2, seq=8, d=16, heads=2)
    params, x = model.make_inputs()
    assert x.shape == (2, 8, 16) and params["w_1"].shape == (16, 64) and params["w_qkv"].shape == (16, 48)
    value, new_params = jax.jit(model.step)(params, x)
    assert value.shape == () and np.isfinite(value)
    assert jax.tree_util.tree_structure(new_params) == jax.tree_util.tree_structure(params)
    # SGD: the same gradient from another program (XLA may fuse it otherwise: not the same bits)
    expected = params["w_o"] - model.lr * jax.jit(jax.grad(model.loss))(params, x)["w_o"]
    np.testing.assert_allclose(new_params["w_o"], expected, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(new_params["w_o"], params["w_o"])


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"d": 0}, "TransformerBlock d must be a positive integer, got 0"),
        ({"heads": 2.0}, "TransformerBlock heads must be a positive integer, got 2.0"),
        ({"batch": True}, "TransformerBlock batch must be a positive integer, got True"),
        ({"d": 10, "heads": 4}, "TransformerBlock d must be a multiple of heads, got d=10, heads=4"),
    ],
)
def test_transformer_block_refuses_bad_sizes(sizes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        models.TransformerBlock(**sizes)


def test_a_stack_of_one_block_is_the_transformer_block_step():
    """`transformer_stack_model(1)` is `transformer_model`'s step over a list of one block: the same bits."""
    step, (params, x) = models.transformer_model()
    stack_step, (stack, stack_x) = models.transformer_stack_model(1)
    assert len(stack) == 1 and _bits((stack[0], stack_x)) == _bits((params, x))
    value, new_params = jax.jit(step)(params, x)
    stack_value, new_stack = jax.jit(stack_step)(stack, stack_x)
    assert _bits((stack_value, new_stack[0])) == _bits((value, new_params))


def test_a_stack_runs_its_blocks_in_a_row():
    """The 4-block stack's loss is that of the blocks applied one after the other (each block's own
    parameters, here all equal at the start), and its step updates every block."""
    step, (stack, x) = models.transformer_stack_model()
    model = models.TransformerBlock()
    value, new_stack = jax.jit(step)(stack, x)
    assert len(new_stack) == 4 and all(p is not q for p, q in zip(stack, stack[1:]))

    def chained(x):
        for params in stack:
            x = model.block(params, x)
        return jnp.mean(jnp.square(x))

    # the same value from another program (XLA may fuse it otherwise: not the same bits)
    np.testing.assert_allclose(value, jax.jit(chained)(x), rtol=1e-6)
    assert not np.allclose(value, jax.jit(model.loss)(stack[0], x), rtol=1e-3)  # not one block's loss
    for old, new in zip(stack, new_stack, strict=True):
        assert not np.array_equal(new["w_o"], old["w_o"])


def test_the_scanned_stack_starts_where_the_stack_starts():
    """`transformer_scan_model`'s arguments: each parameter of the four blocks stacked along a new leading
    axis, bit for bit `transformer_stack_model`'s, and the same input."""
    _, (stacked, x) = models.transformer_scan_model()
    _, (stack, stack_x) = models.transformer_stack_model()
    assert sorted(stacked) == sorted(stack[0]) and _bits(x) == _bits(stack_x)
    for name, leaf in stacked.items():
        assert leaf.shape == (4, *stack[0][name].shape)
        assert _bits([leaf[i] for i in range(4)]) == _bits([block[name] for block in stack])


def test_the_scanned_stack_is_the_stack_run_by_scan():
    """The scanned stack's step is the unrolled stack's: the same loss and the same SGD step of every block.
    Two programs (a loop and straight-line code that XLA may fuse otherwise): close, not the same bits."""
    step, (stacked, x) = models.transformer_scan_model()
    stack_step, (stack, stack_x) = models.transformer_stack_model()
    value, new_stacked = jax.jit(step)(stacked, x)
    stack_value, new_stack = jax.jit(stack_step)(stack, stack_x)
    np.testing.assert_allclose(value, stack_value, rtol=1e-6)
    for name, leaf in new_stacked.items():
        unrolled = np.stack([np.asarray(block[name]) for block in new_stack])
        np.testing.assert_allclose(leaf, unrolled, rtol=1e-6, atol=1e-7)  # updates of about 1e-3
        assert not np.array_equal(leaf, stacked[name])  # every block stepped
    assert "while" in jax.jit(step).lower(stacked, x).as_text()  # one block in the program, in a loop


def test_every_dot_of_the_scanned_stack_is_a_recipe_gemm():
    """Under a training recipe, the loop body's dots are classified as the unrolled blocks' are: each block
    has six forward GEMMs, six dgrad and six wgrad, and the scanned program holds one block's."""
    step, args = models.transformer_scan_model(2)
    stack_step, stack_args = models.transformer_stack_model(2)
    scanned = collections.Counter(gemm for _, gemm, _ in fpemu.gemm_roles(step, *args))
    unrolled = collections.Counter(gemm for _, gemm, _ in fpemu.gemm_roles(stack_step, *stack_args))
    assert scanned == {"forward": 6, "dgrad": 6, "wgrad": 6}
    assert unrolled == {gemm: 2 * count for gemm, count in scanned.items()}


@pytest.mark.parametrize("model", [models.transformer_stack_model, models.transformer_scan_model])
@pytest.mark.parametrize("blocks", [0, True, 2.0])
def test_a_stack_refuses_a_bad_number_of_blocks(model, blocks):
    message = f"{model.__name__} blocks must be a positive integer, got {blocks!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        model(blocks)
