"""A dot under a training recipe: the glue between a jaxpr equation and the training layer's GEMM core.

`fpemu._emulate.gemm_roles` classifies the dots of the program; `recipe_dot` (called by the
``dot_general`` and ``conv_general_dilated`` rules of `fpemu._emulate.rules_dot`) matches one
equation to its role and calls the core in `fpemu._training` (`fpemu._training.gemm_vjp`):

- a forward dot or convolution is `forward_with_vjp` / `forward_conv_with_vjp`, whose backward
  pass computes dgrad and wgrad too, so ``jax.grad(emulate(loss))`` quantizes the backward GEMMs;
  a dgrad or wgrad dot that emulate sees is `role_dot` / `role_conv` (operands in role order);
- keys: GEMM ``which`` of the forward dot number ``i`` draws from `gemm_key` ``(key, i, which)``,
  whichever of ``emulate(jax.grad(f))`` or ``jax.grad(emulate(f))`` computes it, split in three as
  `fpemu._training.gemm_dot.split_key` splits it; a traced body whose GEMMs draw random bits splits the
  keys of all the program's GEMMs in one batch (`split_gemm_keys`): each GEMM splitting its own was a
  Threefry loop per GEMM for XLA to compile on CPU (bench/RESULTS_training.md);
- delayed scaling reads the amax histories of the state (one per tensor of the layer: ``x``, ``w``,
  ``g``, shared by the GEMMs that quantize it) and sends each quantized operand's amax out
  through the statistics channel (`fpemu._emulate.stats.STATE`, reduced by maximum over the
  iterations of ``scan`` and the devices of ``shard_map``);
- with statistics, each quantized operand's counts (on its element values,
  `fpemu._training.elements.operand_elements`) and amax.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._emulate import stats as _stats
from fpemu._emulate.gemm_roles import Entry, GemmRoles, kept
from fpemu._emulate.interpreter import Context
from fpemu._emulate.policy import gemm_needs_key
from fpemu._emulate.rounding import fold_key, fold_keys
from fpemu._engine import rng
from fpemu._training.elements import operand_elements
from fpemu._training.gemm_vjp import SIDES, forward_conv_with_vjp, forward_with_vjp, role_conv, role_dot, swapped
from fpemu._training.hadamard import hadamard_along
from fpemu._training.operands import amax_of
from fpemu._training.quantizer import Quantizer
from fpemu._training.recipes import GEMMS, OPERAND_TENSORS, TrainingRecipe

GEMM_KEY_TAG = 0x47454D4D  # "GEMM": the keys of recipe GEMMs, apart from the rounding sites' keys
_OPERAND_DTYPES = ("float16", "bfloat16", "float32")
F32 = jnp.float32

__all__ = [
    "GEMM_KEY_TAG",
    "NO_KEYS",
    "gemm_key",
    "gemm_keys",
    "history_keys",
    "operand_counts",
    "quantized",
    "recipe_dot",
    "split_gemm_keys",
]

NO_KEYS = (None, None, None)  # a GEMM that draws no random bits


def gemm_key(root: Any, ordinal: int, which: str) -> Any:
    """The uint32[2] key of GEMM ``which`` of the forward dot number ``ordinal`` (None without a root key).

    Example:
      >>> import jax
      >>> from fpemu._engine.rng import seeds_from_key
      >>> gemm_key(seeds_from_key(jax.random.key(0)), 0, "wgrad").shape
      (2,)
    """
    return gemm_keys(root, ordinal, [which])[which]


def gemm_keys(root: Any, ordinal: int, whiches: Sequence[str]) -> dict[str, Any]:
    """`gemm_key` of each GEMM in ``whiches``: ``root`` folded with the tag, ``ordinal`` and the GEMM's
    index in `GEMMS`, the fold of the first two made once for all of them (a third of the hashes to
    trace; `fold_key` folds its integers one after the other, so the keys are the same)."""
    if root is None or not whiches:
        return dict.fromkeys(whiches)
    dot = fold_key(root, GEMM_KEY_TAG, ordinal)
    return {which: fold_key(dot, GEMMS.index(which)) for which in whiches}


def split_gemm_keys(root: Any, pairs: Sequence[tuple[int, str]]) -> dict[tuple[int, str], tuple[Any, Any, Any]]:
    """``split_key(gemm_key(root, ordinal, which))`` for each ``(ordinal, which)`` of ``pairs``, the same bits,
    computed together: the folds as one vector of each, the splits as one ``jax.vmap`` of
    ``jax.random.split`` (on CPU JAX lowers each split as a loop of its own, which XLA compiles apart).

    Example:
      >>> import jax, numpy as np
      >>> from fpemu._engine.rng import seeds_from_key
      >>> from fpemu._training.gemm_dot import split_key
      >>> root = seeds_from_key(jax.random.key(0))
      >>> lhs, rhs, signs = split_gemm_keys(root, [(0, "dgrad"), (0, "wgrad")])[(0, "wgrad")]
      >>> bool(np.array_equal(signs, split_key(gemm_key(root, 0, "wgrad"))[2]))
      True
    """
    if not pairs:
        return {}
    dots = fold_keys(fold_key(root, GEMM_KEY_TAG), [ordinal for ordinal, _ in pairs])
    keys = fold_keys(dots, [GEMMS.index(which) for _, which in pairs])
    split = jax.vmap(lambda key: rng.split(key, 3))(keys)
    return {pair: (split[i, 0], split[i, 1], split[i, 2]) for i, pair in enumerate(pairs)}


def _program_pairs(roles: GemmRoles) -> list[tuple[int, str]]:
    """Every ``(ordinal, GEMM)`` of the program's classified dots: a forward dot's three GEMMs (its VJP
    computes the backward ones), a dgrad or wgrad dot's own."""
    pairs: set[tuple[int, str]] = set()
    for entry in roles.entries:
        if entry.role is not None:
            whiches = GEMMS if entry.role.gemm == "forward" else (entry.role.gemm,)
            pairs.update((entry.ordinal, w) for w in whiches)
    return sorted(pairs)


def _keys_of(ctx: Context, recipe: TrainingRecipe, entry: Entry) -> dict[str, tuple[Any, Any, Any]]:
    """The split keys of the three GEMMs of ``entry``'s forward dot (`NO_KEYS` where a GEMM draws no random
    bits under ``recipe``), from the body's batch: `split_gemm_keys` of every GEMM of the program (whatever
    its recipe: ``Policy.dot`` and ``Policy.conv`` may differ), made on first use and kept in its `State`."""
    state = ctx.state
    keys = dict.fromkeys(GEMMS, NO_KEYS)
    needed = [w for w in GEMMS if gemm_needs_key(recipe, w)]
    if state.key is None or not needed:
        return keys
    if state.gemm_keys is None:
        assert ctx.training is not None
        state.gemm_keys = split_gemm_keys(state.key, _program_pairs(ctx.training.roles))
    return keys | {which: state.gemm_keys[(entry.ordinal, which)] for which in needed}


# -- statistics of a quantized operand -----------------------------------------------------------------


def operand_counts(x: jax.Array, dims: tuple[int, ...], q: Quantizer, key: Any, amax: Any, margin: int) -> jax.Array:
    """The statistics vector of ``x`` quantized by ``q``, counted on the element values (``x`` over
    its scale, and the element it became); ``elements`` is ``x``'s size."""
    scaled, values = operand_elements(x, dims, q, key, amax, margin)
    counts = _stats.counts(scaled, values, q.element)
    return lax.concatenate([np.full((1,), x.size, np.int32), lax.slice_in_dim(counts, 1, counts.shape[0])], 0)


# -- the rule ------------------------------------------------------------------------------------------

# The operands whose amax history a dot reads: its own GEMM's two; a forward dot or convolution (a
# custom_vjp whose backward pass may run outside emulate) also the weight of dgrad and the activation
# of wgrad, which it holds. Gradient operands of a backward pass that emulate does not see use
# current scaling.
_VJP_OPERANDS = ("forward.lhs", "forward.rhs", "dgrad.rhs", "wgrad.lhs")


def history_keys(entry: Entry, recipe: TrainingRecipe) -> list[tuple[str, str]]:
    """``[(state key, "gemm.side")]`` of the delayed-scaling operands the dot ``entry`` reads. The
    state key names the operand's tensor (`OPERAND_TENSORS`): the GEMMs that quantize one tensor
    (``x`` in forward and wgrad, ``w`` in forward and dgrad, ``g`` in dgrad and wgrad) share its
    history, as Transformer Engine keeps one per tensor."""
    assert entry.role is not None
    which = entry.role.gemm
    operands = _VJP_OPERANDS if which == "forward" else (f"{which}.lhs", f"{which}.rhs")
    out = []
    for operand in operands:
        gemm_name, side = operand.split(".")
        q = getattr(recipe.gemm(gemm_name), side)
        if q is not None and q.scaling == "delayed":
            out.append((f"{entry.name}.{OPERAND_TENSORS[operand]}", operand))
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
    reduced: dict[str, jax.Array] = {}
    out = {}
    for state_key, operand in keys:
        if histories is None or state_key not in histories:
            raise ValueError(
                f"fpemu.emulate: the training state has no amax history {state_key!r} for the delayed-scaling recipe "
                f"{recipe.name!r}; make the state with fpemu.init_training_state(fn, policy, *args) for the same "
                "function, policy and argument shapes, and call emulate(..., state=True)"
            )
        if state_key not in reduced:
            history = histories[state_key]
            reduced[state_key] = (
                lax.reduce_max(history, tuple(range(history.ndim))) if recipe.amax_compute_algo == "max" else history[0]
            )
        out[operand] = reduced[state_key]
    return out


def _record(ctx: Context, entry: Entry, operand: str, x: Any) -> None:
    """Send ``amax(x)`` out to the history of the tensor ``x`` is as the GEMM operand ``operand``."""
    key = f"{entry.name}.{OPERAND_TENSORS[operand]}"
    ctx.merge_stats({_stats.STATE + key: _stats.amax_vector(amax_of(x.astype(F32)))})


def _observe(
    ctx: Context,
    recipe: TrainingRecipe,
    entry: Entry,
    which: str,
    operands: list,
    keys: tuple[Any, Any, Any],
    amaxes: dict,
    probe: Any,
) -> None:
    """Record each quantized operand's amax for its history (delayed scaling) and, with statistics,
    its counts and the amax its scale came from. Amax sites merge by maximum: inside ``scan`` over
    the iterations, inside ``shard_map`` over the devices (`fpemu._emulate.stats.reduce_stacked`,
    `fpemu._emulate.stats.all_reduce`), so a history records one amax per site and step."""
    gemm = recipe.gemm(which)
    for i, (side, q) in enumerate(zip(SIDES, gemm.quantizers, strict=True)):
        if q is None or not (q.scaling == "delayed" or ctx.counting):
            continue  # nothing to observe: no transform traced for it either (the program would drop it)
        x, dims = operands[i]
        if gemm.hadamard is not None:
            x = hadamard_along(x.astype(F32), dims, gemm.hadamard, keys[2], probe=probe)
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
    probe = ctx.probe()  # every materialization of the body's GEMMs reads it for its predicate
    role = entry.role
    which = role.gemm
    if which == "forward" and role.weight == 0:  # an inference recipe's weight on the left (Policy.weights)
        forward = recipe.forward
        recipe = dataclasses.replace(recipe, forward=dataclasses.replace(forward, lhs=forward.rhs, rhs=forward.lhs))
    out = eqn.outvars[0].aval.dtype
    keys = _keys_of(ctx, recipe, entry)
    amaxes = _histories(ctx, recipe, history_keys(entry, recipe))
    if conv:
        spec = eqn.params["dimension_numbers"]
        pairs = [(a, (spec.lhs_spec[1],)), (b, (spec.rhs_spec[1],))]
    else:
        dims = eqn.params["dimension_numbers"]
        pairs = [(a, tuple(dims[0][0])), (b, tuple(dims[0][1]))]
    ordered = pairs[::-1] if swapped(which, role.gradient) else pairs
    _observe(ctx, recipe, entry, which, ordered, keys[which], amaxes, probe)
    if which == "forward":  # dgrad's w and wgrad's x are this dot's operands: their histories record them here
        for operand, same, x in (("dgrad.rhs", "forward.rhs", b), ("wgrad.lhs", "forward.lhs", a)):
            if operand in amaxes and same not in amaxes:  # else recorded already, as the forward GEMM's
                _record(ctx, entry, operand, x)
        if conv:
            y = forward_conv_with_vjp(recipe, eqn.params, a, b, keys, amaxes, out, probe)
        else:
            y = forward_with_vjp(recipe, a, b, dims, keys, amaxes, out, probe)
    elif conv:
        y = role_conv(recipe, which, a, b, eqn.params, role.gradient, keys[which], amaxes, out, probe)
    else:
        y = role_dot(recipe, which, a, b, dims, role.gradient, keys[which], amaxes, out, probe)
    y = y.astype(out) if y.dtype != out else y
    return [ctx.round_output(y)]
