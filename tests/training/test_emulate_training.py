"""Training recipes under fpemu.emulate: every GEMM of a training step, bit for bit against the
`custom_vjp` a researcher writes by hand from `quantized_dot_general`.

The reference of a linear layer ``y = x . W`` (``ref_linear``) computes the forward GEMM with the
recipe's ``forward``, and its VJP computes ``dx = g . W^T`` with ``dgrad`` and ``dW = x^T . g`` with
``wgrad``, each operand quantized along that GEMM's contraction by `quantized_dot_general`. Both
``emulate(jax.value_and_grad(loss), Policy(dot=recipe))`` (the backward dots recognised in the
traced program) and ``jax.value_and_grad(emulate(loss, policy))`` (the forward dots' own VJP) must
give the reference's loss and gradients, bit for bit. Stochastic recipes draw, for GEMM ``g`` of
the forward dot number ``i`` (program order), from ``gemm_key(key, i, g)`` (docs/training.md).
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
import fpemu._training.gemm_vjp as gemm_vjp
from fpemu._emulate.gemm import gemm_key
from fpemu._emulate.interpreter import Context
from fpemu._emulate.policy import Policy
from fpemu._emulate.training_state import init_training_state
from fpemu._emulate.transform import emulate
from fpemu._engine.rng import seeds_from_key
from fpemu._training import (
    TRAINING_RECIPES,
    GemmRecipe,
    Quantizer,
    TrainingRecipe,
    amax_of,
    quantize_operand,
    quantized_dot_general,
    training_recipe,
)
from fpemu._training.quantize_operand import quantize_operand_split
from fpemu.testing import assert_bit_exact

GEMMS = ("forward", "dgrad", "wgrad")
STATELESS = [name for name in TRAINING_RECIPES if not training_recipe(name).stateful]
KEY = jax.random.key(7)


def recipes(fast: tuple[str, ...]) -> list:
    return [name if name in fast else pytest.param(name, marks=pytest.mark.slow) for name in STATELESS]


def assert_tree_bits(actual, expected) -> None:
    flat_a, tree_a = jax.tree_util.tree_flatten(actual)
    flat_e, tree_e = jax.tree_util.tree_flatten(expected)
    assert tree_a == tree_e
    for a, e in zip(flat_a, flat_e, strict=True):
        assert_bit_exact(a, e)


def ref_linear(recipe, keys):
    """``x @ W`` (x: [..., k], W: [k, n]) with the recipe's three GEMMs, written by hand."""
    contract_last = lambda a: (a.ndim - 1,)

    @jax.custom_vjp
    def linear(x, w):
        return quantized_dot_general(x, w, ((contract_last(x), (0,)), ((), ())), recipe.forward, key=keys["forward"])

    def fwd(x, w):
        return linear(x, w), (x, w)

    def bwd(res, g):
        x, w = res
        dx = quantized_dot_general(g, w, ((contract_last(g), (1,)), ((), ())), recipe.dgrad, key=keys["dgrad"])
        tokens = tuple(range(x.ndim - 1))
        dw = quantized_dot_general(x, g, ((tokens, tokens), ((), ())), recipe.wgrad, key=keys["wgrad"])
        return dx, dw

    linear.defvjp(fwd, bwd)
    return linear


def reference_matmul(name: str, stochastic: bool):
    """``mm(i, x, W)``: the i-th forward dot of the program (program order) as ``ref_linear``."""
    recipe, root = training_recipe(name), seeds_from_key(KEY)

    def mm(i, x, w):
        keys = {g: gemm_key(root, i, g) if stochastic else None for g in GEMMS}
        return ref_linear(recipe, keys)(x, w)

    return mm


def plain(i, x, w):
    return x @ w


# -- the programs ------------------------------------------------------------------------------------------


def mlp(params, x, mm=plain):
    with jax.named_scope("layer0"):
        h = jax.nn.gelu(mm(0, x, params["w0"]) + params["b0"])
    with jax.named_scope("layer1"):
        logits = mm(1, h, params["w1"])
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[:, 0])


def attention_block(params, x, mm=plain):
    """A single-head self-attention block on x: [batch, tokens, d]: q, k, v, o projections (dots 0-2
    and 5, batched: wgrad contracts batch and tokens), the score and value products under
    jax.named_scope("attention") (dots 3 and 4, kept in high precision)."""
    q, k, v = (mm(i, x, params[n]) for i, n in enumerate("qkv"))
    with jax.named_scope("attention"):
        scores = jnp.einsum("btd,bsd->bts", q, k) * 0.25
        o = jnp.einsum("bts,bsd->btd", jax.nn.softmax(scores, axis=-1), v)
    return jnp.sum((mm(5, o, params["o"]) + x) ** 2)


def normal(seed: int, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * np.float32(scale))


MLP_PARAMS = {"w0": normal(0, 24, 40, scale=0.5), "b0": normal(1, 1, 40, scale=0.5), "w1": normal(2, 40, 12, scale=0.5)}
MLP_X = normal(3, 10, 24)
ATTN_PARAMS = {n: normal(4 + i, 16, 16, scale=0.5) for i, n in enumerate("qkvo")}
ATTN_X = normal(8, 2, 6, 16)


def _check_against_reference(program, params, x, name: str) -> None:
    policy = Policy(dot=name)
    key = KEY if policy.stochastic else None
    mm = reference_matmul(name, policy.stochastic)
    step = jax.value_and_grad(program, argnums=(0, 1))
    expected = jax.jit(jax.value_and_grad(lambda p, v: program(p, v, mm), argnums=(0, 1)))(params, x)
    inside = jax.jit(emulate(step, policy, key=key))(params, x)
    assert_tree_bits(inside, expected)
    outside = jax.jit(jax.value_and_grad(emulate(program, policy, key=key), argnums=(0, 1)))(params, x)
    assert_tree_bits(outside, expected)
    # the checks above would pass vacuously if emulate and the reference both ignored the recipe
    exact = step(params, x)
    for a, e in zip(jax.tree_util.tree_leaves(inside), jax.tree_util.tree_leaves(exact), strict=True):
        assert not np.array_equal(np.asarray(a), np.asarray(e))


# Each named recipe compiles its own quantizers (seconds each): one fast case per program, the
# others with -m slow.
@pytest.mark.long
@pytest.mark.parametrize("name", recipes(("mxfp8",)))
def test_mlp_every_gemm_matches_the_hand_written_custom_vjp(name):
    _check_against_reference(mlp, MLP_PARAMS, MLP_X, name)


@pytest.mark.long
@pytest.mark.parametrize("name", recipes(("fp8_current",)))
def test_attention_block_matches_the_reference_and_keeps_attention_high(name):
    _check_against_reference(attention_block, ATTN_PARAMS, ATTN_X, name)


@pytest.mark.long
def test_only_the_dots_change_with_default_none():
    def f(x, w):
        return jnp.exp(x) @ w * 3.0 + jnp.sin(x).sum()

    x, w = MLP_X[:, :8], jnp.linspace(-2.0, 2.0, 64).reshape(8, 8)
    got = jax.jit(emulate(f, Policy(default=None, dot="fp8_current")))(x, w)
    dims = (((1,), (0,)), ((), ()))
    recipe = training_recipe("fp8_current")
    expected = jax.jit(lambda x, w: quantized_dot_general(jnp.exp(x), w, dims, recipe.forward) * 3.0 + jnp.sin(x).sum())
    assert_bit_exact(got, expected(x, w))


def test_a_recipe_object_and_its_name_are_one_policy():
    recipe = training_recipe("mxfp8")
    assert Policy(dot="mxfp8") == Policy(dot=recipe)
    assert hash(Policy(dot="mxfp8")) == hash(Policy(dot=recipe))
    custom = dataclasses.replace(recipe, name="mxfp8-no-keep", keep_scopes=())
    assert Policy(conv=custom).conv is custom


# -- transforms: nested jit, scan, remat, vmap ------------------------------------------------------------


def _layers(mm, ws, w_out, x):
    """A scan over stacked layers inside a checkpointed function inside a nested jit."""

    def layer(h, w):
        return jnp.tanh(mm(0, h, w)), None

    @jax.jit
    @jax.checkpoint
    def body(ws, h):
        return jax.lax.scan(layer, h, ws)[0]

    return jnp.sum(mm(1, body(ws, x), w_out) ** 2)


@pytest.mark.long
def test_nested_jit_remat_and_scan_match_the_reference():
    ws, w_out, x = normal(9, 2, 16, 16, scale=0.4), normal(10, 16, 8, scale=0.4), normal(11, 4, 16)
    mm = reference_matmul("fp8_current", stochastic=False)
    expected = jax.jit(jax.value_and_grad(lambda *a: _layers(mm, *a), argnums=(0, 1, 2)))(ws, w_out, x)
    step = jax.value_and_grad(lambda *a: _layers(plain, *a), argnums=(0, 1, 2))
    got = jax.jit(emulate(step, Policy(dot="fp8_current")))(ws, w_out, x)
    assert_tree_bits(got, expected)


@pytest.mark.long
@pytest.mark.parametrize("form", ["emulate(value_and_grad)", "value_and_grad(emulate)"])
def test_a_value_two_gemms_read_is_computed_once(monkeypatch, form):
    """A cotangent is read by dgrad and by wgrad, a layer's input by its forward GEMM and by wgrad.
    Each GEMM materializes what it quantizes (an identity `lax.cond`, `fpemu._ops.fusion`), and XLA
    computes the value's producers inside each materialization: once per GEMM (under
    `Policy(default="bf16", dot="nvfp4")` the transformer block's step took 1.50x emulated bf16, and
    1.35x with the values shared, bench/RESULTS_training.md). Here the second layer's cotangent is
    the ``cos`` of its output: one computation of the compiled step computes it, and two when each
    GEMM materializes its own operands (NVFP4's wgrad materializes it for its Hadamard transform);
    the bits are the same."""
    if jax.default_backend() != "cpu":
        pytest.skip("the materializing conditional is XLA:CPU's")
    x = jnp.linspace(-3.0, 3.0, 8 * 32 * 256, dtype=jnp.float32).reshape(8, 32, 256)  # 2**16: materialized
    ws = jnp.linspace(-0.1, 0.1, 2 * 256 * 256, dtype=jnp.float32).reshape(2, 256, 256).transpose(0, 2, 1)

    def loss(ws, x):  # two layers: the second one's cotangent is the cosine
        h = jax.nn.gelu(jnp.einsum("bsd,de->bse", x, ws[0]))
        return jnp.sum(jnp.sin(jnp.einsum("bsd,de->bse", h, ws[1])))

    policy = Policy(default="bf16", dot="nvfp4")
    if form == "emulate(value_and_grad)":
        step = emulate(jax.value_and_grad(loss), policy, key=KEY)
    else:
        step = jax.value_and_grad(emulate(loss, policy, key=KEY))

    def build():
        jax.clear_caches()  # the GEMMs' traces are cached across builds
        compiled = jax.jit(lambda ws, x: step(ws, x)).lower(ws, x).compile()
        whole = [c for c in compiled.as_text().split("\n\n") if not re.search(r"-> \w+\[\] ", c)]
        return sum(" cosine(" in c for c in whole), compiled(ws, x)  # not the conditional's 1-element probe

    shared, result = build()
    monkeypatch.setattr(Context, "computed_once", lambda self, value: value)  # each GEMM its own
    monkeypatch.setattr(gemm_vjp, "computed_once", lambda value, probe=None: value)
    separate, separate_result = build()
    assert (shared, separate) == (1, 2)
    assert_tree_bits(result, separate_result)


@pytest.mark.long
def test_vmap_of_per_example_gradients_is_per_example():
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    w, xs = normal(12, 16, 8), normal(13, 3, 4, 16)
    grad = jax.jit(emulate(jax.grad(loss), Policy(dot="fp8_current")))
    batched = jax.jit(jax.vmap(grad, in_axes=(None, 0)))(w, xs)
    for i in range(xs.shape[0]):
        assert_bit_exact(batched[i], grad(w, xs[i]))


def _conv(x, w):
    return jax.lax.conv(x, w, (1, 1), "SAME")


def _conv_loss(x, w):
    return 0.5 * jnp.sum(_conv(x, w) ** 2)


def _small_integers(seed: int) -> tuple[jax.Array, jax.Array]:
    """A (2, 2, 5, 5) input and a (3, 2, 3, 3) kernel of integers in [-2, 2]."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.integers(-2, 3, (2, 2, 5, 5)).astype(np.float32))
    return x, jnp.asarray(rng.integers(-2, 3, (3, 2, 3, 3)).astype(np.float32))


@pytest.mark.long
def test_convolutions_compute_their_three_gemms_with_the_recipe():
    # power-of-two per-tensor scales on small integers: every product and sum below is exact, so the
    # convolutions of emulate (fpemu.conv_general_dilated) and of the reference (lax) agree bit for bit
    q8 = Quantizer(format="e4m3fn", scaling="tensor", scale_rule="ceil")
    q5 = Quantizer(format="e5m2", scaling="tensor", scale_rule="ceil")
    recipe = TrainingRecipe(
        name="pow2-tensor",
        forward=GemmRecipe(lhs=q8, rhs=q8),
        dgrad=GemmRecipe(lhs=q5, rhs=q8),
        wgrad=GemmRecipe(lhs=q8, rhs=q5),
    )

    x, w = _small_integers(16)

    @jax.jit
    def expected(x, w):
        qx, qw = quantize_operand(x, (1,), q8), quantize_operand(w, (1,), q8)
        y, pullback = jax.vjp(_conv, qx, qw)
        g = quantize_operand(y, (1,), q5)  # the cotangent of 0.5 * sum(y**2) is y
        dx, _ = pullback(g)
        _, dw = pullback(g)
        return 0.5 * jnp.sum(y**2), (dx, dw)

    got = jax.jit(emulate(jax.value_and_grad(_conv_loss, argnums=(0, 1)), Policy(conv=recipe)))(x, w)
    assert_tree_bits(got, expected(x, w))


@pytest.mark.long
def test_convolutions_apply_per_tensor_float_scales_to_their_result():
    # fp8_current: scales amax / max (2 / 448 and so on, not powers of two) multiply each convolution's
    # result, not its operands; small integers keep every product and sum exact
    recipe = training_recipe("fp8_current")

    x, w = _small_integers(17)

    def split(v, q):
        return quantize_operand_split(v, (1,), q, key=None, amax=None, margin=0)

    @jax.jit
    def expected(x, w):
        (bx, tx), (bw, tw) = split(x, recipe.forward.lhs), split(w, recipe.forward.rhs)
        raw, pullback = jax.vjp(_conv, bx, bw)
        y = raw * (tx * tw)
        bg, tg = split(y, recipe.dgrad.lhs)  # the cotangent of 0.5 * sum(y**2) is y
        dx, _ = pullback(bg)
        bg_w, tg_w = split(y, recipe.wgrad.rhs)
        _, dw = pullback(bg_w)
        return 0.5 * jnp.sum(y**2), (dx * (tg * tw), dw * (tx * tg_w))

    got = jax.jit(emulate(jax.value_and_grad(_conv_loss, argnums=(0, 1)), Policy(conv=recipe)))(x, w)
    assert_tree_bits(got, expected(x, w))


# -- statistics ------------------------------------------------------------------------------------------


@pytest.mark.long
def test_statistics_name_the_role_of_every_quantized_operand():
    def loss(w, x):
        with jax.named_scope("proj"):
            return jnp.sum(jnp.tanh(x @ w))

    w = jnp.linspace(-1.0, 1.0, 32 * 8).reshape(32, 8)
    x = jnp.linspace(-3.0, 3.0, 4 * 32).reshape(4, 32) * jnp.float32(2.0**-20)  # tiny: e4m3/e5m2 scaled
    _, stats = jax.jit(emulate(jax.value_and_grad(loss, argnums=(0, 1)), Policy(dot="fp8_current"), with_stats=True))(
        w, x
    )
    sides = {f"proj/dot_general.{g}.{s}" for g in GEMMS for s in ("lhs", "rhs")}
    assert sides <= set(stats)
    recipe = training_recipe("fp8_current")
    fwd = stats["proj/dot_general.forward.lhs"]
    assert float(fwd["amax"]) == float(amax_of(x))  # the amax its per-tensor scale came from
    q = quantize_operand(x, (1,), recipe.forward.lhs)
    assert int(fwd["underflow"]) == int(jnp.sum((x != 0) & (q == 0)))
    assert int(fwd["elements"]) == x.size
    # the gradient operand of dgrad (lhs) and wgrad (rhs): g = 1 - tanh(xw)^2, in e5m2
    g = 1.0 - jnp.tanh(x @ w) ** 2
    assert float(stats["proj/dot_general.dgrad.lhs"]["amax"]) == float(amax_of(g))
    assert float(stats["proj/dot_general.wgrad.rhs"]["amax"]) == float(amax_of(g))
    assert int(stats["proj/dot_general.wgrad.rhs"]["elements"]) == g.size


@pytest.mark.long
def test_statistics_count_subnormal_elements_in_the_scaled_domain():
    # one per-tensor scale, amax / 448 = 1: the elements are the values themselves
    x = jnp.array([[448.0, 2.0**-8, 2.0**-12, 0.0]])
    w = jnp.ones((4, 1))
    _, stats = jax.jit(emulate(lambda a, b: a @ b, Policy(dot="fp8_current"), with_stats=True))(x, w)
    counts = stats["dot_general.forward.lhs"]
    e = quantize_operand(x, (1,), training_recipe("fp8_current").forward.lhs)  # the scale is 1 here
    assert float(e[0, 0]) == 448.0
    # e4m3fn: smallest normal 2**-6, smallest subnormal 2**-9: 2**-8 is subnormal, 2**-12 underflows to 0
    assert int(counts["subnormal"]) == 1 and int(counts["underflow"]) == 1


# -- delayed scaling: functional state ---------------------------------------------------------------------


@pytest.mark.long
def test_delayed_scaling_histories_advance_as_transformer_engine_documents():
    recipe = dataclasses.replace(training_recipe("fp8_delayed"), amax_history_len=3)
    policy = Policy(dot=recipe)

    def loss(w, x):
        return jnp.sum(x @ w)

    w = jnp.full((4, 2), 0.5)
    xs = [jnp.full((3, 4), v) for v in (1.0, 8.0, 2.0, 0.25)]
    step = jax.jit(emulate(jax.value_and_grad(loss, argnums=(0, 1)), policy, state=True))
    state = init_training_state(jax.value_and_grad(loss, argnums=(0, 1)), policy, w, xs[0])
    assert sorted(state) == ["dot_general.g", "dot_general.w", "dot_general.x"]  # one history per tensor
    expected_history = [0.0, 0.0, 0.0]
    for x in xs:
        history = state["dot_general.x"]
        np.testing.assert_array_equal(np.asarray(history), np.array(expected_history, np.float32))
        (value, _), state = step(state, w, x)
        # this step's x was quantized with the scale of max(history) (0: scale 1, TE's initial scale)
        y = quantized_dot_general(
            x, w, (((1,), (0,)), ((), ())), recipe.forward, lhs_amax=jnp.max(history), rhs_amax=jnp.float32(0.5)
        )
        if max(expected_history) > 0:
            assert_bit_exact(value, jnp.sum(y))
        expected_history = [float(np.abs(np.asarray(x)).max()), *expected_history[:2]]  # roll, newest in row 0
    np.testing.assert_array_equal(np.asarray(state["dot_general.x"]), np.array(expected_history, np.float32))
    # the gradient's history is recorded in the backward pass: g = 1 everywhere
    assert float(state["dot_general.g"][0]) == 1.0


@pytest.mark.long
def test_a_tensor_has_one_history_which_every_gemm_quantizing_it_reads_with_its_own_format():
    # x: current scaling in the forward GEMM, delayed (E5M2) in wgrad; W: delayed in both, E4M3 forward
    # and E5M2 in dgrad; g: delayed E5M2 in both backward GEMMs. One history per tensor, recorded by
    # the forward dot even where its own GEMM does not read it; each GEMM's scale comes from the
    # shared history's amax and its own format.
    base = training_recipe("fp8_delayed")
    e5m2 = Quantizer(format="e5m2", scaling="delayed")
    recipe = dataclasses.replace(
        base,
        name="mixed_delayed",
        forward=dataclasses.replace(base.forward, lhs=Quantizer(format="e4m3fn", scaling="tensor")),
        dgrad=dataclasses.replace(base.dgrad, rhs=e5m2),
        wgrad=dataclasses.replace(base.wgrad, lhs=e5m2),
    )
    policy = Policy(dot=recipe, default=None)

    def loss(w, x):
        return jnp.sum(jnp.sin(x @ w))

    x = jnp.linspace(-3.0, 2.7, 12, dtype=jnp.float32).reshape(3, 4)
    w = jnp.linspace(0.1, 0.9, 8, dtype=jnp.float32).reshape(4, 2) ** 3
    grad = jax.value_and_grad(loss, argnums=(0, 1))
    state = init_training_state(grad, policy, w, x)
    assert sorted(state) == ["dot_general.g", "dot_general.w", "dot_general.x"]
    step = jax.jit(emulate(grad, policy, state=True))
    _, state = step(state, w, x)
    amax = {t: float(state[f"dot_general.{t}"][0]) for t in ("x", "w", "g")}
    assert (amax["x"], amax["w"]) == (3.0, float(jnp.max(w)))
    (_, (dw, dx)), _ = step(state, w, x)
    # the second step, by hand: the same GEMMs with each operand's amax from its tensor's history
    y = quantized_dot_general(x, w, (((1,), (0,)), ((), ())), recipe.forward, rhs_amax=jnp.float32(amax["w"]))
    g = jnp.cos(y)
    hist = {t: jnp.float32(a) for t, a in amax.items()}
    expected_dx = quantized_dot_general(
        g, w, (((1,), (1,)), ((), ())), recipe.dgrad, lhs_amax=hist["g"], rhs_amax=hist["w"]
    )
    expected_dw = quantized_dot_general(
        x, g, (((0,), (0,)), ((), ())), recipe.wgrad, lhs_amax=hist["x"], rhs_amax=hist["g"]
    )
    assert_bit_exact(dx, expected_dx)
    assert_bit_exact(dw, expected_dw)
    # and the formats differ where the history is shared: W in E4M3 (forward) and E5M2 (dgrad) differ
    assert not np.array_equal(
        np.asarray(quantize_operand(w, (0,), recipe.forward.rhs, amax=hist["w"])),
        np.asarray(quantize_operand(w, (1,), recipe.dgrad.rhs, amax=hist["w"])),
    )


@pytest.mark.long
def test_delayed_scaling_needs_state_and_keeps_one_history_per_tensor_in_loops():
    policy = Policy(dot="fp8_delayed")
    with pytest.raises(ValueError, match="state=True"):
        emulate(lambda x, w: x @ w, policy)
    step = emulate(lambda x, w: x @ w, policy, state=True)
    with pytest.raises(ValueError, match="no amax history 'dot_general.x'"):
        step({}, jnp.ones((2, 2)), jnp.ones((2, 2)))
    with pytest.raises(TypeError, match="init_training_state"):
        step([], jnp.ones((2, 2)), jnp.ones((2, 2)))

    def scanned(ws, x):
        return jax.lax.scan(lambda h, w: (h @ w, None), x, ws)[0]

    # a dot in a scan body: one history per tensor, recording the max over the iterations
    # (tests/training/test_emulate_delayed_loops.py); a forward dot also keeps its VJP's weight and activation
    state = init_training_state(scanned, policy, jnp.ones((2, 4, 4)), jnp.ones((3, 4)))
    assert sorted(state) == ["dot_general.w", "dot_general.x"]
    ws = jnp.stack([jnp.full((4, 4), 2.0), jnp.full((4, 4), 0.25)])
    _, state = jax.jit(emulate(scanned, policy, state=True))(state, ws, jnp.ones((3, 4)))
    # iteration 0 reads x = 1 and W = 2, iteration 1 reads h = x @ W = 8 and W = 0.25 (exact in e4m3fn)
    assert [float(state[f"dot_general.{t}"][0]) for t in ("x", "w")] == [8.0, 2.0]
    with pytest.raises(ValueError, match="stateful|delayed"):
        init_training_state(scanned, Policy(dot="mxfp8"), jnp.ones((2, 4, 4)), jnp.ones((3, 4)))


# -- round_inputs per argument ------------------------------------------------------------------------------


def _inputs_rounded(policy: Policy, *args, **kwargs) -> list[bool]:
    """Which leaves of the arguments came out rounded to bf16 (the function returns them unchanged)."""
    out = emulate(lambda *a, **k: (a, k), policy)(*args, **kwargs)
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    return [
        not np.array_equal(np.asarray(o), np.asarray(v))
        for o, v in zip(jax.tree_util.tree_leaves(out), leaves, strict=True)
    ]


ODD = jnp.float32(1.0 + 2.0**-12)  # not a bf16 value: rounding it shows


@pytest.mark.parametrize(
    ("round_inputs", "expected"),
    [
        (True, [True, True, True, True]),
        (False, [False, False, False, False]),
        ((0, 2), [True, False, False, True]),
        (1, [False, True, True, False]),
        ((True, {"m": False, "v": True}, False), [True, False, True, False]),
        (lambda path, leaf: jax.tree_util.keystr(path) != "[0][1]['v']", [True, True, False, True]),
    ],
)
def test_round_inputs_names_the_arguments_to_round(round_inputs, expected):
    params, opt, batch = ODD * jnp.ones(2), {"m": ODD * jnp.ones(2), "v": ODD * jnp.ones(2)}, ODD * jnp.ones(3)
    policy = Policy(default="bf16", round_inputs=round_inputs)
    assert _inputs_rounded(policy, params, opt, batch) == expected


def test_round_inputs_keyword_arguments_follow_predicates_only():
    x = ODD * jnp.ones(2)
    assert _inputs_rounded(Policy(default="bf16", round_inputs=(0,)), x, y=x) == [True, False]
    by_name = Policy(default="bf16", round_inputs=lambda path, leaf: "'y'" in jax.tree_util.keystr(path))
    assert _inputs_rounded(by_name, x, y=x) == [False, True]


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("params", TypeError, "Policy.round_inputs must be True"),
        ((0, "x"), TypeError, "argument numbers"),
        ((-1,), ValueError, ">= 0"),
        ((True, 1.5), TypeError, "pytree of bools"),
    ],
)
def test_round_inputs_refuses_what_it_cannot_read(value, error, match):
    with pytest.raises(error, match=match):
        Policy(round_inputs=value)


def test_round_inputs_checks_against_the_call():
    with pytest.raises(ValueError, match="positional argument"):
        emulate(lambda x: x, Policy(default="bf16", round_inputs=(3,)))(jnp.ones(2))
    with pytest.raises(ValueError, match="prefix of the positional arguments"):
        emulate(lambda x, y: x, Policy(default="bf16", round_inputs=(True, True, True)))(jnp.ones(2), jnp.ones(2))
    with pytest.raises(TypeError, match="must return a bool"):
        emulate(lambda x: x, Policy(default="bf16", round_inputs=lambda p, v: "yes"))(jnp.ones(2))


# -- bad inputs ---------------------------------------------------------------------------------------------


def test_a_recipe_name_as_an_element_format_points_to_policy_dot():
    with pytest.raises(fpemu.UnknownFormatError, match=r"Policy\(dot='mxfp8'\)"):
        fpemu.DotPolicy(lhs="mxfp8")


def test_an_unknown_recipe_lists_the_recipes_and_the_format_hint():
    with pytest.raises(ValueError, match="training recipes: fp8_current.*nvfp4") as err:
        Policy(dot="mxfp9")
    # the closest recipes, and the element-format door; not the format registry's hints (fpemu.scaled's
    # block recipes are another thing: #33)
    assert "did you mean 'mxfp8' or 'mxfp6' or 'mxfp4'?" in str(err.value)
    assert "fpemu.DotPolicy(lhs=..., rhs=...)" in str(err.value) and "fpemu.scaled" not in str(err.value)
    with pytest.raises(TypeError, match=r"DotPolicy\(lhs='e4m3fn', rhs='e4m3fn'\)"):
        Policy(dot="e4m3fn")
    with pytest.raises(TypeError, match="Policy.conv must be"):
        Policy(conv=3)
    with pytest.raises(TypeError, match=r"Policy\(dot='nvfp4'\)"):
        emulate(lambda x: x, "nvfp4")


def test_stochastic_recipes_need_a_key():
    assert Policy(dot="nvfp4").stochastic and not Policy(dot="mxfp8").stochastic
    with pytest.raises(ValueError, match="needs emulate"):
        emulate(lambda x, w: x @ w, Policy(dot="nvfp4"))
    with pytest.raises(ValueError, match="only used with stochastic"):
        emulate(lambda x, w: x @ w, Policy(dot="mxfp8"), key=KEY)


@pytest.mark.long
def test_a_key_passed_through_jit_compiles_once_for_every_seed():
    """docs/training.md, "Sweeps": ``emulate(..., key=key)`` built inside a jitted function whose
    argument is the key is traced once for every seed, and each seed gives the bits of the emulated
    function built with that key directly (whose key is a constant of its program)."""
    policy, loss = Policy(dot="nvfp4"), jax.value_and_grad(mlp)
    traces = []

    @jax.jit
    def step(key, params, x):
        traces.append(key)
        return emulate(loss, policy, key=key)(params, x)

    results = []
    for seed in (0, 1, 2):
        key = jax.random.key(seed)
        results.append(step(key, MLP_PARAMS, MLP_X))
        assert_tree_bits(results[-1], jax.jit(emulate(loss, policy, key=key))(MLP_PARAMS, MLP_X))
    assert len(traces) == 1
    grads = [np.asarray(r[1]["w0"]) for r in results]
    assert not np.array_equal(grads[0], grads[1])  # the key is used: another seed, other stochastic bits


@pytest.mark.parametrize(
    "policy",
    [
        Policy(dot="nvfp4"),
        Policy(dot=fpemu.DotPolicy(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_rounding="stochastic")),
    ],
)
def test_the_default_prng_implementation_does_not_change_the_keys_fpemu_derives(policy):
    # the user's key is an "rbg" key either way; fpemu's keys derived from it (a GEMM's, split in three) are
    # Threefry keys, so the bits do not depend on jax_default_prng_impl (JAX reads a raw key of two words as a
    # key of the default implementation, and refused it under "rbg")
    key, loss = jax.random.key(5, impl="rbg"), jax.value_and_grad(mlp)
    jax.clear_caches()  # fpemu's jitted cores traced afresh under each implementation
    with jax.default_prng_impl("rbg"):
        rbg = jax.jit(emulate(loss, policy, key=key))(MLP_PARAMS, MLP_X)
    jax.clear_caches()
    threefry = jax.jit(emulate(loss, policy, key=key))(MLP_PARAMS, MLP_X)
    assert_tree_bits(rbg, threefry)
