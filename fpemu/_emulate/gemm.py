"""A dot under a training recipe: computed as the forward, dgrad or wgrad GEMM its role says.

`fpemu._emulate.gemm_roles` classifies the dots of the program; `recipe_dot` (called by the
``dot_general`` and ``conv_general_dilated`` rules of `fpemu._emulate.rules_dot`) computes one:

- operands in *role order*: the recipe's GEMMs are written ``forward = x . W``, ``dgrad = g . W^T``,
  ``wgrad = x^T . g``. JAX's transpose rule emits ``dot_general(g, x)`` for wgrad, so a dot whose
  cotangent sits on the other side is computed with its operands swapped (and the swapped dimension
  numbers) and its result transposed back: each operand is quantized by the quantizer of its role,
  along its own contracting dimensions, exactly as `quantized_dot_general(x, g, ...)` would;
- a forward dot or convolution is a `jax.custom_vjp` whose backward pass computes dgrad and wgrad
  with the same functions (a convolution's: the transposed convolutions JAX's own VJP emits), so
  ``jax.grad(emulate(loss))`` quantizes the backward GEMMs too;
- keys: GEMM ``which`` of the forward dot number ``i`` draws from `gemm_key` ``(key, i, which)``,
  whichever of ``emulate(jax.grad(f))`` or ``jax.grad(emulate(f))`` computes it;
- delayed scaling reads the amax histories of the state and sends each quantized operand's amax out
  through the statistics channel (`fpemu._emulate.stats.STATE`, reduced by maximum over the
  iterations of ``scan`` and the devices of ``shard_map``);
- with statistics, each quantized operand's counts (on its element values) and amax.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._emulate import stats as _stats
from fpemu._emulate.gemm_roles import Entry, kept
from fpemu._emulate.interpreter import Context
from fpemu._emulate.policy import gemm_needs_key
from fpemu._emulate.rounding import fold_key
from fpemu._jax.compat import Literal, bind
from fpemu._ops.accumulate import times_tensor_scales
from fpemu._ops.fusion import computed_once
from fpemu._ops.matmul import conv_general_dilated as emulated_conv
from fpemu._ops.quantize import quantize as element_quantize
from fpemu._training.dot import quantized_dot_general
from fpemu._training.hadamard import hadamard_along
from fpemu._training.quantizer import (
    Quantizer,
    amax_of,
    operand_view,
    quantize_operand_split,
    scaled_operand,
    scaled_recipe,
)
from fpemu._training.recipes import GEMMS, GemmRecipe, TrainingRecipe

GEMM_KEY_TAG = 0x47454D4D  # "GEMM": the keys of recipe GEMMs, apart from the rounding sites' keys
SIDES = ("lhs", "rhs")
_OPERAND_DTYPES = ("float16", "bfloat16", "float32")
F32 = jnp.float32


def gemm_key(root: Any, ordinal: int, which: str) -> Any:
    """The uint32[2] key of GEMM ``which`` of the forward dot number ``ordinal`` (None without a root key).

    Example:
      >>> import jax
      >>> from fpemu._engine.rng import seeds_from_key
      >>> gemm_key(seeds_from_key(jax.random.key(0)), 0, "wgrad").shape
      (2,)
    """
    return None if root is None else fold_key(root, GEMM_KEY_TAG, ordinal, GEMMS.index(which))


def split_key(key: Any) -> tuple[Any, Any, Any]:
    """(lhs key, rhs key, Hadamard key), split as `quantized_dot_general` splits its key."""
    if key is None:
        return None, None, None
    split = jax.random.split(key, 3)
    return split[0], split[1], split[2]


def swapped(which: str, gradient: int | None) -> bool:
    """Whether the cotangent sits on the other side than the recipe writes it (dgrad: lhs; wgrad: rhs)."""
    return (which == "dgrad" and gradient == 1) or (which == "wgrad" and gradient == 0)


def _amax_args(gemm: GemmRecipe, which: str, amaxes: dict) -> dict:
    return {f"{side}_amax": amaxes.get(f"{which}.{side}") for side in SIDES}


# -- one GEMM, operands in role order ------------------------------------------------------------------


def role_dot(
    recipe: TrainingRecipe,
    which: str,
    a: Any,
    b: Any,
    dims: Any,
    gradient: int | None,
    key: Any,
    amaxes: dict,
    out: Any,
) -> jax.Array:
    """``dot_general(a, b, dims)`` as GEMM ``which`` of ``recipe`` (``gradient``: the operand that
    carries the cotangent), in the layout of ``dot_general(a, b, dims)``."""
    gemm = recipe.gemm(which)
    options = dict(key=key, preferred_element_type=out, margin=recipe.margin, **_amax_args(gemm, which, amaxes))
    if not swapped(which, gradient):
        return quantized_dot_general(a, b, dims, gemm, **options)
    (lc, rc), (lb, rb) = dims
    y = quantized_dot_general(b, a, ((rc, lc), (rb, lb)), gemm, **options)
    nb, na, nr = len(lb), a.ndim - len(lc) - len(lb), b.ndim - len(rc) - len(rb)
    return lax.transpose(y, (*range(nb), *range(nb + nr, nb + nr + na), *range(nb, nb + nr)))


def role_conv(
    recipe: TrainingRecipe,
    which: str,
    a: Any,
    b: Any,
    params: dict,
    gradient: int | None,
    key: Any,
    amaxes: dict,
    out: Any,
) -> jax.Array:
    """``conv_general_dilated(a, b, **params)`` as GEMM ``which``: each operand quantized by its role's
    quantizer along the dimension the convolution contracts as its input feature (with the Hadamard
    transform there), then `fpemu.conv_general_dilated` with the GEMM's accumulator."""
    gemm = recipe.gemm(which)
    dn = params["dimension_numbers"]
    dims = ((dn.lhs_spec[1],), (dn.rhs_spec[1],))
    flip = swapped(which, gradient)
    quantizers = (gemm.rhs, gemm.lhs) if flip else (gemm.lhs, gemm.rhs)
    sides = ("rhs", "lhs") if flip else SIDES
    k_lhs, k_rhs, k_had = split_key(key)
    keys = (k_rhs, k_lhs) if flip else (k_lhs, k_rhs)
    xs = [a, b]
    if gemm.hadamard is not None:
        xs = [hadamard_along(x.astype(F32), d, gemm.hadamard, k_had) for x, d in zip(xs, dims, strict=True)]
    scales: list[Any] = [None, None]
    for i in range(2):
        q = quantizers[i]
        if q is not None:
            amax = amaxes.get(f"{which}.{sides[i]}")
            k = keys[i] if q.rounding == "stochastic" else None
            xs[i], scales[i] = quantize_operand_split(
                xs[i].astype(F32), dims[i], q, key=k, amax=amax, margin=recipe.margin
            )
    scaled = scales != [None, None]
    y = emulated_conv(
        xs[0], xs[1], params["window_strides"], params["padding"], lhs_dilation=params["lhs_dilation"],
        rhs_dilation=params["rhs_dilation"], dimension_numbers=dn, feature_group_count=params["feature_group_count"],
        batch_group_count=params["batch_group_count"], accumulate=gemm.accumulate,
        accumulate_every=gemm.accumulate_every, preferred_element_type=F32 if scaled else out,
    )  # fmt: skip
    return times_tensor_scales(y, *scales).astype(F32 if out is None else out) if scaled else y


# -- the custom_vjp of a forward dot -------------------------------------------------------------------


def _remaining(n: int, *removed: Sequence[int]) -> list[int]:
    gone = set(itertools.chain(*removed))
    return [i for i in range(n) if i not in gone]


def _ranges_like(*xs: Sequence[int]) -> list[list[int]]:
    out, start = [], 0
    for x in xs:
        out.append(list(range(start, start + len(x))))
        start += len(x)
    return out


def transpose_lhs(dims: Any, x_ndim: int, y_ndim: int, swap_ans: bool = False) -> tuple[Any, tuple[int, ...]]:
    """JAX's transpose of ``dot_general(x, y, dims)`` with respect to ``x``: the dimension numbers of
    ``dot_general(g, y, ...)`` and the permutation of its result (as in ``jax._src.lax``)."""
    (xc, yc), (xb, yb) = dims
    x_kept, y_kept = _remaining(x_ndim, xc, xb), _remaining(y_ndim, yc, yb)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(xb, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
    new = ((tuple(ans_y), tuple(y_kept)), (tuple(ans_batch), tuple(yb)))
    x_contract_sorted_by_y = [int(v) for v in np.take(np.asarray(xc, int), np.argsort(yc))]
    axes = tuple(int(i) for i in np.argsort([*xb, *x_kept, *x_contract_sorted_by_y]))
    return new, axes


@functools.lru_cache(maxsize=64)
def current_gradients(recipe: TrainingRecipe) -> TrainingRecipe:
    """``recipe`` with delayed scaling of the gradient operands (dgrad's lhs, wgrad's rhs) replaced by
    current (per-tensor) scaling: their amax lives in a backward pass that emulate does not see."""

    def current(q: Quantizer | None) -> Quantizer | None:
        return dataclasses.replace(q, scaling="tensor") if q is not None and q.scaling == "delayed" else q

    dgrad = dataclasses.replace(recipe.dgrad, lhs=current(recipe.dgrad.lhs))
    wgrad = dataclasses.replace(recipe.wgrad, rhs=current(recipe.wgrad.rhs))
    return dataclasses.replace(recipe, dgrad=dgrad, wgrad=wgrad)


def forward_with_vjp(recipe: TrainingRecipe, a: Any, b: Any, dims: Any, keys: dict, amaxes: dict, out: Any) -> Any:
    """The forward GEMM, differentiable as the recipe says: its VJP computes dgrad (``g . W^T``)
    and wgrad (``x^T . g``) on the operands the forward pass received, as JAX's transpose rule lays
    them out (so ``jax.grad(emulate(f))`` equals ``emulate(jax.grad(f))`` bit for bit when the
    cotangents agree). Delayed-scaling gradients are scaled from their current amax there
    (`current_gradients`)."""

    backward = current_gradients(recipe)

    @jax.custom_vjp
    def gemm(a, b, keys, amaxes):
        return role_dot(recipe, "forward", a, b, dims, None, keys["forward"], amaxes, out)

    def fwd(a, b, keys, amaxes):
        return gemm(a, b, keys, amaxes), (a, b, keys, amaxes)

    def bwd(res, g):
        a, b, keys, amaxes = res
        g = computed_once(g)  # read by dgrad and by wgrad: computed once for both
        (lc, rc), (lb, rb) = dims
        dims_a, axes_a = transpose_lhs(dims, a.ndim, b.ndim)
        da = lax.transpose(role_dot(backward, "dgrad", g, b, dims_a, 0, keys["dgrad"], amaxes, out), axes_a)
        dims_b, axes_b = transpose_lhs(((rc, lc), (rb, lb)), b.ndim, a.ndim, swap_ans=True)
        db = lax.transpose(role_dot(backward, "wgrad", g, a, dims_b, 0, keys["wgrad"], amaxes, out), axes_b)
        return da.astype(a.dtype), db.astype(b.dtype), None, None

    gemm.defvjp(fwd, bwd)
    return gemm(a, b, keys, amaxes)


def forward_conv_with_vjp(recipe: TrainingRecipe, eqn: Any, a: Any, b: Any, keys: dict, amaxes: dict, out: Any) -> Any:
    """The forward convolution ``eqn``, differentiable as the recipe says: its VJP computes the
    transposed convolutions that JAX's own VJP of ``eqn`` emits (``conv(g, rev(W))``: dgrad;
    ``conv(x, g)``: wgrad), each by `role_conv` as ``emulate(jax.grad(f))`` computes them, so that
    ``jax.grad(emulate(f))`` equals it bit for bit when the cotangents agree. Delayed-scaling
    gradients are scaled from their current amax there (`current_gradients`)."""

    backward = current_gradients(recipe)

    @jax.custom_vjp
    def gemm(a, b, keys, amaxes):
        return role_conv(recipe, "forward", a, b, eqn.params, None, keys["forward"], amaxes, out)

    def fwd(a, b, keys, amaxes):
        return gemm(a, b, keys, amaxes), (a, b, keys, amaxes)

    def bwd(res, g):
        a, b, keys, amaxes = res
        g = computed_once(g.astype(eqn.outvars[0].aval.dtype))  # read by dgrad and by wgrad
        da, db = _conv_transposes(backward, eqn, a, b, g, keys, amaxes)
        return da.astype(a.dtype), db.astype(b.dtype), None, None

    gemm.defvjp(fwd, bwd)
    return gemm(a, b, keys, amaxes)


def _conv_transposes(
    recipe: TrainingRecipe, eqn: Any, a: Any, b: Any, g: Any, keys: dict, amaxes: dict
) -> tuple[Any, Any]:
    """``(da, db)``: JAX's VJP of the convolution ``eqn`` at ``(a, b)`` applied to ``g``, with each
    of its convolutions computed by `role_conv`. A convolution reading the cotangent is dgrad when
    its other operand is computed from the kernel ``b`` (``rev(W)``), wgrad otherwise; the other
    equations (``rev``, layout changes of grouped convolutions) are bound as they are."""
    vjp = lambda a, b, g: jax.vjp(lambda a, b: bind(eqn, [a, b])[0], a, b)[1](g)
    closed = jax.make_jaxpr(vjp)(a, b, g)
    jaxpr = closed.jaxpr
    env = dict(zip([*jaxpr.constvars, *jaxpr.invars], [*closed.consts, a, b, g], strict=True))
    cotangent, kernel = {jaxpr.invars[2]}, {jaxpr.invars[1]}
    read = lambda v: v.val if isinstance(v, Literal) else env[v]
    for inner in jaxpr.eqns:
        ins = [v for v in inner.invars if not isinstance(v, Literal)]
        carried = [not isinstance(v, Literal) and v in cotangent for v in inner.invars[:2]]
        if inner.primitive.name == "conv_general_dilated" and sum(carried) == 1:
            gradient = carried.index(True)
            which = "dgrad" if inner.invars[1 - gradient] in kernel else "wgrad"
            x, y = (read(v) for v in inner.invars)
            dtype = inner.outvars[0].aval.dtype
            outs = [role_conv(recipe, which, x, y, inner.params, gradient, keys[which], amaxes, dtype).astype(dtype)]
        else:
            outs = bind(inner, [read(v) for v in inner.invars])
        for tainted in (cotangent, kernel):
            if any(v in tainted for v in ins):
                tainted.update(inner.outvars)
        env.update(zip(inner.outvars, outs, strict=True))
    da, db = (read(v) for v in jaxpr.outvars)
    return da, db


# -- statistics of a quantized operand -----------------------------------------------------------------


def operand_elements(x: jax.Array, dims: tuple[int, ...], q: Quantizer, key: Any, amax: Any, margin: int) -> tuple:
    """(``x / scale``, the element values) of ``x`` quantized by ``q``, in the grouped view that
    `quantize_operand` quantizes: `scaled_operand`'s scales and element values (the same bits)."""
    x = x.astype(F32)
    stochastic = q.rounding == "stochastic"
    if q.scaling == "none":
        rk: dict[str, Any] = {"rounding": q.rounding, "key": key if stochastic else None}
        if stochastic:
            rk["random_bits"] = q.random_bits
        return x, element_quantize(x, q.element, saturate=q.saturate, **rk)
    view, axis, _ = operand_view(x, q, dims)
    sa = scaled_operand(x, key if stochastic else None, amax, q=q, dims=dims, margin=margin)
    scale = sa.scale_values()
    if sa.global_scale is not None:
        scale = scale * sa.global_scale
    block = scaled_recipe(q).block_size if q.scaling in ("row", "block") else None  # block_2d: a tile is a group
    if axis is not None and block is not None and scale.shape[axis] > 1:
        scale = lax.slice_in_dim(jnp.repeat(scale, block, axis=axis), 0, view.shape[axis], axis=axis)
    scale = jnp.broadcast_to(scale, view.shape)
    values = jnp.where(jnp.isnan(scale), jnp.nan, sa.values)
    return jnp.where(scale == 0, F32(0), view / scale), values


def operand_counts(x: jax.Array, dims: tuple[int, ...], q: Quantizer, key: Any, amax: Any, margin: int) -> jax.Array:
    """The statistics vector of ``x`` quantized by ``q``, counted on the element values (``x`` over
    its scale, and the element it became); ``elements`` is ``x``'s size."""
    scaled, values = operand_elements(x, dims, q, key, amax, margin)
    counts = _stats.counts(scaled, values, q.element)
    return counts.at[0].set(x.size)


# -- the rule ------------------------------------------------------------------------------------------

# The operands whose amax history a dot reads: its own GEMM's two; a forward dot or convolution (a
# custom_vjp whose backward pass may run outside emulate) also the weight of dgrad and the activation
# of wgrad, which it holds. Gradient operands of a backward pass that emulate does not see use
# current scaling.
_VJP_OPERANDS = (("forward", "lhs"), ("forward", "rhs"), ("dgrad", "rhs"), ("wgrad", "lhs"))


def history_keys(entry: Entry, recipe: TrainingRecipe) -> list[tuple[str, str]]:
    """``[(state key, "gemm.side")]`` of the delayed-scaling operands the dot ``entry`` reads."""
    assert entry.role is not None
    which = entry.role.gemm
    pairs = _VJP_OPERANDS if which == "forward" else ((which, "lhs"), (which, "rhs"))
    out = []
    for gemm_name, side in pairs:
        q = getattr(recipe.gemm(gemm_name), side)
        if q is not None and q.scaling == "delayed":
            out.append((f"{entry.name}.{gemm_name}.{side}", f"{gemm_name}.{side}"))
    return out


def quantized(entry: Entry | None, recipe: TrainingRecipe, dtypes: Sequence[Any]) -> bool:
    """Whether the dot of ``entry`` is computed by the recipe (else it stays high precision: no role,
    a scope of ``recipe.keep_scopes``, operands that are not float16/bfloat16/float32)."""
    if entry is None or entry.role is None or kept(entry.stack, recipe.keep_scopes):
        return False
    return all(np.dtype(d).name in _OPERAND_DTYPES for d in dtypes)


def _histories(ctx: Context, recipe: TrainingRecipe, keys: list[tuple[str, str]]) -> dict:
    """The reduced amax (``"gemm.side"`` -> float32 scalar) of each history ``keys`` names."""
    histories = ctx.training.histories if ctx.training is not None else None
    out = {}
    for state_key, operand in keys:
        if histories is None or state_key not in histories:
            raise ValueError(
                f"fpemu.emulate: the training state has no amax history {state_key!r} for the delayed-scaling recipe "
                f"{recipe.name!r}; make the state with fpemu.init_training_state(fn, policy, *args) for the same "
                "function, policy and argument shapes, and call emulate(..., state=True)"
            )
        history = histories[state_key]
        out[operand] = jnp.max(history) if recipe.amax_compute_algo == "max" else history[0]
    return out


def _record(ctx: Context, entry: Entry, operand: str, x: Any) -> None:
    """Send ``amax(x)`` out to the history ``entry.name + "." + operand``."""
    ctx.merge_stats({_stats.STATE + f"{entry.name}.{operand}": _stats.amax_vector(amax_of(x.astype(F32)))})


def _observe(
    ctx: Context, recipe: TrainingRecipe, entry: Entry, which: str, operands: list, key: Any, amaxes: dict
) -> None:
    """Record each quantized operand's amax for its history (delayed scaling) and, with statistics,
    its counts and the amax its scale came from. Amax sites merge by maximum: inside ``scan`` over
    the iterations, inside ``shard_map`` over the devices (`fpemu._emulate.stats.reduce_stacked`,
    `fpemu._emulate.stats.all_reduce`), so a history records one amax per site and step."""
    gemm = recipe.gemm(which)
    keys = split_key(key)
    if gemm.hadamard is not None:
        operands = [(hadamard_along(x.astype(F32), d, gemm.hadamard, keys[2]), d) for x, d in operands]
    for i, (side, q) in enumerate(zip(SIDES, gemm.quantizers, strict=True)):
        if q is None:
            continue
        x, dims = operands[i]
        if q.scaling == "delayed":
            _record(ctx, entry, f"{which}.{side}", x)
        if ctx.counting:
            site = f"{entry.name}.{which}.{side}"
            delayed = amaxes.get(f"{which}.{side}")
            counts = operand_counts(x, dims, q, keys[i] if q.rounding == "stochastic" else None, delayed, recipe.margin)
            used = delayed if delayed is not None else amax_of(x.astype(F32))
            ctx.merge_stats({site: counts, site + _stats.AMAX: _stats.amax_vector(used)})


def recipe_dot(ctx: Context, eqn: Any, invals: list, recipe: TrainingRecipe, conv: bool) -> list | None:
    """The dot ``eqn`` as the GEMM its role says, its result rounded to the policy's format for the
    primitive; None when it stays high precision (see `quantized`)."""
    a, b = invals
    entry = ctx.gemm_entry()
    if entry is None or entry.role is None or not quantized(entry, recipe, (a.dtype, b.dtype)):
        return None
    a, b = ctx.computed_once(a), ctx.computed_once(b)  # one buffer for every GEMM that reads them
    role = entry.role
    which = role.gemm
    out = eqn.outvars[0].aval.dtype
    keys = {w: gemm_key(ctx.state.key, entry.ordinal, w) if gemm_needs_key(recipe, w) else None for w in GEMMS}
    amaxes = _histories(ctx, recipe, history_keys(entry, recipe))
    if conv:
        spec = eqn.params["dimension_numbers"]
        pairs = [(a, (spec.lhs_spec[1],)), (b, (spec.rhs_spec[1],))]
    else:
        dims = eqn.params["dimension_numbers"]
        pairs = [(a, tuple(dims[0][0])), (b, tuple(dims[0][1]))]
    _observe(ctx, recipe, entry, which, pairs[::-1] if swapped(which, role.gradient) else pairs, keys[which], amaxes)
    if which == "forward":
        for operand, x in (("dgrad.rhs", b), ("wgrad.lhs", a)):
            if operand in amaxes:
                _record(ctx, entry, operand, x)
        if conv:
            y = forward_conv_with_vjp(recipe, eqn, a, b, keys, amaxes, out)
        else:
            y = forward_with_vjp(recipe, a, b, dims, keys, amaxes, out)
    elif conv:
        y = role_conv(recipe, which, a, b, eqn.params, role.gradient, keys[which], amaxes, out)
    else:
        y = role_dot(recipe, which, a, b, dims, role.gradient, keys[which], amaxes, out)
    y = y.astype(out) if y.dtype != out else y
    return [ctx.round_output(y)]
