"""Rules of control flow: ``cond``, ``while``, ``scan``, ``remat2`` (``jax.checkpoint``), ``shard_map``.

Each is rebuilt with the public combinator around the emulated body (`Context.subfunction`), with
the statistics carried out of the combinator and a key per branch, iteration or device for
stochastic rounding. docs/emulate.md has the table. Where each primitive keeps its bodies, how its
operands split and how its combinator takes the equation's parameters is the interpreter core
`fpemu._jax.interpret`, shared with `fpemu.scalify`; what is here is emulate's part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax

from fpemu._emulate import stats as _stats
from fpemu._emulate.interpreter import Context
from fpemu._emulate.registry import register
from fpemu._emulate.rounding import fold_key
from fpemu._jax.compat import mark_varying
from fpemu._jax.interpret import (
    body_of,
    checkpoint_like,
    cond_parts,
    manual_axis_names,
    scan_like,
    scan_parts,
    shard_map_like,
    staged,
    switch_agreeing,
    while_parts,
)


def _pad(stats: dict, sites: list[str]) -> dict:
    return {site: stats[site] if site in stats else _stats.zeros() for site in sites}


@register("cond", kind="control")
def cond(ctx: Context, eqn: Any, invals: list) -> list:
    """``lax.switch`` over the emulated branches; the statistics of the branch taken are counted."""
    branches, index, ops = cond_parts(eqn.params, invals)
    key = ctx.site_key()

    def emulated(branch):
        sub = ctx.subfunction(branch.jaxpr)
        return lambda key, *ops: sub(key, branch.consts, *ops)

    def agree(shapes: list) -> Callable:  # every branch returns the statistics of every branch's sites
        sites = list(dict.fromkeys(site for _, stats in shapes for site in stats))
        return lambda out: (out[0], _pad(out[1], sites))

    outs, stats = switch_agreeing(index, [emulated(b) for b in branches], [key, *ops], agree)
    ctx.merge_stats(stats)
    return list(outs)


@register("while", kind="control")
def while_loop(ctx: Context, eqn: Any, invals: list) -> list:
    """``lax.while_loop`` over the emulated condition and body. With statistics (or stochastic
    rounding) the loop also carries an iteration counter; with statistics the condition is evaluated
    at the end of each body step and its predicate carried, so that the condition's counts are kept."""
    cond_body, cond_all, body_body, body_all, init = while_parts(eqn.params, invals)
    cond_sub, body_sub = ctx.subfunction(cond_body.jaxpr), ctx.subfunction(body_body.jaxpr)
    # the closed jaxprs' own consts feed their constvars; the operand consts are leading arguments
    cond_fn = lambda key, consts, *carry: cond_sub(key, cond_body.consts, *consts, *carry)
    body_fn = lambda key, consts, *carry: body_sub(key, body_body.consts, *consts, *carry)
    key = ctx.site_key()
    cond_key = lambda i: fold_key(key, 0, i)
    body_key = lambda i: fold_key(key, 1, i)
    zero = jnp.zeros((), jnp.int32)

    if not ctx.stats_enabled:

        def cond_plain(state):
            i, carry = state
            return cond_fn(cond_key(i), cond_all, *carry)[0][0]

        def body_plain(state):
            i, carry = state
            return i + 1, body_fn(body_key(i), body_all, *carry)[0]

        return list(lax.while_loop(cond_plain, body_plain, (zero, init))[1])

    cond_replay, cond_shapes = staged(cond_fn, cond_key(zero), cond_all, *init)
    body_replay, body_shapes = staged(body_fn, body_key(zero), body_all, *init)
    sites = list(dict.fromkeys([*cond_shapes[1], *body_shapes[1]]))
    (pred0,), cond_stats0 = cond_replay(cond_key(zero), cond_all, *init)

    def body(state):
        i, carry, _, acc = state
        carry, body_stats = body_replay(body_key(i), body_all, *carry)
        (pred,), cond_stats = cond_replay(cond_key(i + 1), cond_all, *carry)
        acc = dict(acc)
        _stats.merge(acc, body_stats)
        _stats.merge(acc, cond_stats)
        return i + 1, list(carry), pred, acc

    _, out, _, stats = lax.while_loop(lambda s: s[2], body, (zero, list(init), pred0, _pad(cond_stats0, sites)))
    ctx.merge_stats(stats)
    return list(out)


@register("scan", kind="control")
def scan(ctx: Context, eqn: Any, invals: list) -> list:
    """``lax.scan`` over the emulated body (same length, direction and unroll). Per-iteration counts
    leave the loop as stacked outputs and are summed; amax values (a training recipe's operand
    amax, the amax a delayed-scaling history records) are reduced by maximum, so a dot in the body
    records one amax per step: the largest of its iterations (Transformer Engine's one amax per
    module and step)."""
    (jaxpr, body_consts), consts, init, xs = scan_parts(eqn.params, invals)
    n_carry = len(init)
    body_fn = ctx.subfunction(jaxpr)
    key = ctx.site_key()
    length = eqn.params["length"]

    def step(carry, x):
        i, x = x
        outs, stats = body_fn(fold_key(key, i) if key is not None else None, body_consts, *consts, *carry, *x)
        return outs[:n_carry], (outs[n_carry:], stats)

    index = jnp.arange(length, dtype=jnp.int32) if key is not None else None
    carry, (ys, stats) = scan_like(eqn.params, step, init, (index, xs))
    ctx.merge_stats({site: _stats.reduce_stacked(site, vector) for site, vector in stats.items()})
    return [*carry, *ys]


@register("remat2", kind="control")
def remat(ctx: Context, eqn: Any, invals: list) -> list:
    """``jax.checkpoint`` (same ``prevent_cse`` and ``policy``) around the emulated body."""
    jaxpr, consts = body_of(eqn)
    fn = ctx.subfunction(jaxpr)
    key = ctx.site_key()
    wrapped = checkpoint_like(eqn.params, lambda key, *args: fn(key, consts, *args))
    outs, stats = wrapped(key, *invals)
    ctx.merge_stats(stats)
    return list(outs)


@register("shard_map", kind="control")
def shard_map(ctx: Context, eqn: Any, invals: list) -> list:
    """``jax.shard_map`` (same mesh, specs, manual axes and ``check_vma``) around the emulated body.

    Inside the body each device rounds its own shard; stochastic rounding folds the device's position
    in the manual axes into the key, so shards draw different bits. Counts are summed over devices
    (``psum``): work replicated over an axis is counted once per device. Amax values are reduced
    by maximum (``pmax``): a delayed-scaling history records the largest amax of all devices, as
    Transformer Engine all-reduces amax over the data-parallel group, and every device reads the
    same (replicated) history, so every device uses the same scale."""
    jaxpr, consts = body_of(eqn)
    fn = ctx.subfunction(jaxpr)
    axes = manual_axis_names(eqn.params)
    key = ctx.site_key()
    has_key = key is not None

    def body(*args):
        key, args = (args[0], args[1:]) if has_key else (None, args)
        for name in axes if key is not None else ():
            key = fold_key(key, lax.axis_index(name))
        outs, stats = fn(key, consts, *args)
        return outs, {site: _stats.all_reduce(site, mark_varying(vector, axes), axes) for site, vector in stats.items()}

    mapped = shard_map_like(eqn.params, body, replicated_in=int(has_key), replicated_out=True)
    outs, stats = mapped(*([key] if has_key else []), *invals)
    ctx.merge_stats(stats)
    return list(outs)
