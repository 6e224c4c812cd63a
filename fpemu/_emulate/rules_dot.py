"""Rules of ``dot_general`` and ``conv_general_dilated``: the ``dot`` and ``conv`` kinds.

Under a `DotPolicy` the primitive is computed as `fpemu.dot_general` /
`fpemu.conv_general_dilated` compute it with its formats (their checked-once cores: the options
checked once per combination, `options_config`); under a training recipe, as the forward, dgrad or
wgrad GEMM of the recipe (`fpemu._emulate.gemm.recipe_dot`; docs/training.md), or in high precision
where the recipe keeps it; without either, as the program says on operands rounded to the policy's
format (`_implicit_dot`). docs/emulate.md has the contract.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._args import DEFAULT_RANDOM_BITS
from fpemu._core.format import Format, fits
from fpemu._core.registry import get_format
from fpemu._emulate.gemm import recipe_dot
from fpemu._emulate.interpreter import Context
from fpemu._emulate.registry import register
from fpemu._emulate.rounding import is_float, is_identity
from fpemu._ops.dot_policy import DotPolicy
from fpemu._ops.matmul import conv_general_dilated as emulated_conv
from fpemu._ops.matmul import conv_with_config, dot_with_config, options_config
from fpemu._ops.matmul import dot_general as emulated_dot
from fpemu._ops.matmul_config import (
    MatmulConfig,
    MatmulOptions,
    chunk_key_words,
    key_streams,
    matmul_config,
    random_streams,
)
from fpemu._training.recipes import TrainingRecipe

Compute = Callable[[Any, Any, dict], Any]  # (lhs, rhs, options of fpemu.dot_general) -> result


def _operands(ctx: Context, dot_policy: DotPolicy, a: Any, b: Any) -> tuple:
    """Round the operands here when the counts are wanted or subnormals are flushed (the matmul
    rounds them again, an exact no-op); otherwise the matmul rounds them itself."""
    if ctx.counting or not ctx.policy.subnormals:
        a = ctx.round_output(a, fmt=dot_policy.lhs, suffix=".lhs")
        b = ctx.round_output(b, fmt=dot_policy.rhs, suffix=".rhs")
    return a, b


def _matmul_options(ctx: Context, dot_policy: DotPolicy, out_dtype: Any) -> dict:
    # fpemu.dot_general needs a key whenever any of its roundings is stochastic (a narrow accumulator
    # rounds after every product even without accumulate_every).
    stochastic = "stochastic" in (ctx.policy.rounding, dot_policy.accumulate_rounding)
    return dict(
        lhs=dot_policy.lhs,
        rhs=dot_policy.rhs,
        accumulate=dot_policy.accumulate,
        out=None,  # rounded by round_output below, which also counts
        accumulate_every=dot_policy.accumulate_every,
        rounding=ctx.policy.rounding,
        accumulate_rounding=dot_policy.accumulate_rounding,
        saturate=ctx.policy.saturate,
        stochastic_variant=ctx.policy.stochastic_variant if stochastic else "floor",
        exponent_ties=ctx.policy.exponent_ties,
        key=ctx.site_key() if stochastic else None,
        preferred_element_type=out_dtype,
    )


def _with_explicit_bits(
    random: Callable, options: dict, a: Any, b: Any, out_shape: tuple[int, ...], contraction: int | None
) -> dict:
    """The options with emulate's ``random=`` source giving each stochastic rounding of the dot its
    bits, ``random(stream key, shape, 32)``, from the streams the site key would give (docs/matmul.md),
    in place of the key: the operands' and output's, and the running sum's once per chunk (its chunk
    key, the result's shape). ``contraction`` is the dot's number of products per result (None: a
    convolution, whose running-sum bits are drawn in another layout: refused)."""
    cfg = matmul_config(get_format(a.dtype), get_format(b.dtype), MatmulOptions(**options))
    keys = dict(zip(("lhs", "rhs", "accumulate", "out"), key_streams(options["key"]), strict=True))
    shapes = {"lhs": tuple(a.shape), "rhs": tuple(b.shape), "out": tuple(out_shape)}
    bits = {}
    for name in random_streams(cfg):
        if name != "accumulate":
            bits[name] = random(keys[name], shapes[name], DEFAULT_RANDOM_BITS)
            continue
        if contraction is None:
            raise ValueError(
                "emulate(random=...) does not reach the stochastic accumulator of a convolution; pass key= alone, "
                "or call fpemu.conv_general_dilated(random={'accumulate': ...}) directly"
            )
        chunk_keys = chunk_key_words(keys[name], -(-contraction // (cfg.accumulate_every or 1)))
        bits[name] = jax.vmap(lambda k: jnp.asarray(random(k, tuple(out_shape), DEFAULT_RANDOM_BITS)))(chunk_keys)
    return {**options, "key": None, "random": bits}


def _checked_once(a: Any, b: Any, options: dict) -> tuple[MatmulConfig, Any]:
    """(the checked config, the key) of a dot of ``a`` and ``b`` with `_matmul_options`' ``options``
    (a key, not explicit bits): `fpemu.dot_general`'s checks, made once per combination."""
    key = options["key"]
    static = MatmulOptions(**{**options, "key": None})
    return options_config(a.dtype, b.dtype, static, key is not None), key


def _implicit_format(ctx: Context, a: Any, b: Any) -> Format | None:
    """Without ``Policy.dot``: the format F for the primitive (override, else default) if it rounds
    the operands, else None (F at least as wide as their dtypes, or unable to hold their values)."""
    fmt = ctx.format_for()
    if fmt is None:
        return None
    containers = [get_format(a.dtype), get_format(b.dtype)]
    if any(is_identity(c, fmt, ctx.policy) or not fits(fmt, c) for c in containers):
        return None
    return fmt


def _implicit_dot(ctx: Context, eqn: Any, a: Any, b: Any, fmt: Format) -> list:
    """A program whose values are F values: operands rounded to F (a no-op for the results of
    rounded primitives), the primitive computed as the program says (exact products of F values,
    accumulation in the result dtype), the result rounded to F. float32 operands of a format that
    fits bfloat16 are cast to bfloat16 (exactly) with a float32 result: the same products and
    accumulator, at bf16 matmul speed."""
    a = ctx.round_operand(a, fmt)
    b = ctx.round_operand(b, fmt)
    overrides = {}
    out_dtype = eqn.outvars[0].aval.dtype
    if a.dtype == b.dtype == out_dtype == jnp.float32 and fits(fmt, get_format("bf16")):
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
        overrides["preferred_element_type"] = np.dtype(np.float32)
        if eqn.primitive.name == "dot_general" and not _leading_batch(eqn.params["dimension_numbers"]):
            a, b, overrides["dimension_numbers"] = _canonical_layout(a, b, eqn.params["dimension_numbers"])
    (y,) = ctx.bind(eqn, [a, b], **overrides)
    return [ctx.round_output(y)]


def _leading_batch(dimension_numbers: Any) -> bool:
    """Whether both operands' batch dimensions come first, in order (XLA:CPU runs such bfloat16 dots
    as they are; transposing them anyway costs a copy kernel each: compile time)."""
    _, (lb, rb) = dimension_numbers
    return tuple(lb) == tuple(range(len(lb))) and tuple(rb) == tuple(range(len(rb)))


def _canonical_layout(a: Any, b: Any, dimension_numbers: Any) -> tuple[Any, Any, Any]:
    """The operands transposed to (batch, free, contracting) and (batch, contracting, free), with the
    dimension numbers of that layout. The result is the same array (dot_general's result is always
    batch, lhs free, rhs free): XLA:CPU runs bfloat16 x bfloat16 -> float32 dots only in layouts
    like this one ("Unsupported element type for DotThunk" for batch dimensions that are not leading)."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(a.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(b.ndim) if d not in rc and d not in rb]
    a = jnp.transpose(a, (*lb, *lf, *lc))
    b = jnp.transpose(b, (*rb, *rc, *rf))
    nb, nc = len(lb), len(lc)
    batch = tuple(range(nb))
    contracting = (tuple(range(nb + len(lf), a.ndim)), tuple(range(nb, nb + nc)))
    return a, b, (contracting, (batch, batch))


def _dot_like(
    ctx: Context, eqn: Any, invals: list, explicit: DotPolicy | TrainingRecipe | None, compute: Compute
) -> list:
    a, b = invals
    complex_operand = any(jnp.issubdtype(x.dtype, jnp.complexfloating) for x in (a, b))
    if complex_operand and explicit is not None:
        kind = "training recipe" if isinstance(explicit, TrainingRecipe) else "DotPolicy"
        raise TypeError(
            f"fpemu.emulate: {eqn.primitive.name} of complex operands under a {kind}: emulated dots take real "
            f"operands only. Leave the dot to the policy's format with Policy(dot=None), or exclude it "
            f"(Policy(exclude=({eqn.primitive.name!r},)) or a named scope)"
        )
    if not (is_float(a.dtype) and is_float(b.dtype)):
        return ctx.bind_and_round(eqn, invals)
    if isinstance(explicit, TrainingRecipe):
        out = recipe_dot(ctx, eqn, invals, explicit, conv=eqn.primitive.name == "conv_general_dilated")
        if out is not None:
            return out
        explicit = None  # high precision: as without Policy.dot
    if explicit is None:
        fmt = _implicit_format(ctx, a, b)
        return ctx.bind_and_round(eqn, invals) if fmt is None else _implicit_dot(ctx, eqn, a, b, fmt)
    a, b = _operands(ctx, explicit, a, b)
    out_dtype = eqn.outvars[0].aval.dtype
    options = _matmul_options(ctx, explicit, out_dtype)
    if ctx.state.random is not None and options["key"] is not None:
        contraction = None
        if eqn.primitive.name == "dot_general":
            contraction = math.prod(a.shape[d] for d in eqn.params["dimension_numbers"][0][0])
        options = _with_explicit_bits(ctx.state.random, options, a, b, eqn.outvars[0].aval.shape, contraction)
    y = compute(a, b, options)
    y = y.astype(out_dtype) if y.dtype != out_dtype else y
    return [ctx.round_output(y, fmt=explicit.out or ctx.format_for())]


@register("dot_general", kind="dot")
def dot_general(ctx: Context, eqn: Any, invals: list) -> list:
    """Under ``Policy.dot``: as `fpemu.dot_general` with its formats, the result rounded to
    ``DotPolicy.out``, else to the policy's format for ``dot_general``. Without it: `_implicit_dot`.
    Integer dots, and formats that leave the operands alone: a rounded primitive."""
    dimension_numbers = eqn.params["dimension_numbers"]

    def compute(a: Any, b: Any, options: dict) -> Any:
        if options.get("random") is None:  # the checked-once core; emulate's random= bits: the public door checks them
            return dot_with_config(a, b, dimension_numbers, *_checked_once(a, b, options))
        return emulated_dot(a, b, dimension_numbers, **options)

    return _dot_like(ctx, eqn, invals, ctx.policy.dot_policy, compute)


@register("conv_general_dilated", kind="conv")
def conv_general_dilated(ctx: Context, eqn: Any, invals: list) -> list:
    """As dot_general, with `fpemu.conv_general_dilated` and ``Policy.conv`` (else ``Policy.dot``)."""
    p = eqn.params

    def compute(a: Any, b: Any, options: dict) -> Any:
        if options.get("random") is None:  # as for dot_general: the checked-once core unless bits are given
            return conv_with_config(a, b, p, *_checked_once(a, b, options))
        return emulated_conv(
            a, b, p["window_strides"], p["padding"], lhs_dilation=p["lhs_dilation"],
            rhs_dilation=p["rhs_dilation"], dimension_numbers=p["dimension_numbers"],
            feature_group_count=p["feature_group_count"], batch_group_count=p["batch_group_count"], **options,
        )  # fmt: skip

    return _dot_like(ctx, eqn, invals, ctx.policy.conv_policy, compute)
