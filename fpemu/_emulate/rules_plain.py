"""Rules of the plain primitives (no sub-jaxpr, no DotPolicy): ``rounded``, ``exact``, ``convert``, ``bound``.

The primitive names of each kind are listed in `fpemu._emulate.registry`; docs/emulate.md has the
table. Complex data is rounded by parts (`fpemu._emulate.rounding.round_to_format`).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from fpemu._core.format import Format, fits
from fpemu._core.registry import get_format
from fpemu._emulate.interpreter import Context
from fpemu._emulate.registry import BIT_COPIES, EXACT, PRIMITIVES, ROUNDED, SIGN_CHANGES, register
from fpemu._emulate.rounding import component_dtype, is_complex, is_inexact


@register(*ROUNDED, kind="rounded")
def rounded(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind, then round every floating-point result to the policy's format for this primitive."""
    return ctx.bind_and_round(eqn, invals)


@register(*PRIMITIVES["bound"], kind="bound")
def bound(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged: no floating-point result (comparisons, integer and bit operations, PRNG keys,
    effects without results), so nothing to round."""
    return ctx.bind(eqn, invals)


@register(*(name for name in EXACT if name not in SIGN_CHANGES), kind="exact")
def exact(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged: the results are values of the inputs. Through data movement (`BIT_COPIES`) the
    interpreter also carries which values are known to be rounded already."""
    outvals = ctx.bind(eqn, invals)
    if eqn.primitive.name in BIT_COPIES:
        ctx.propagate_rounded(invals, outvals)
    return outvals


def leaves_format(primitive: str, dtype: Any, fmt: Format | None) -> bool:
    """Whether ``primitive`` (one of `SIGN_CHANGES`) applied to values of ``fmt`` held in ``dtype`` can
    return a value that is not one of ``fmt``: ``abs`` and ``sign`` of complex data (a new modulus, a
    new unit number); ``neg`` into a format without negative values, without -0 (fnuz, P3109, FP with
    no -0) or with an unpaired most negative value (OCP INT8, whose ``abs`` leaves it too). The sign of
    a real value (±1, ±0 or NaN) is a value of every format that holds that value."""
    if fmt is None or not is_inexact(dtype):
        return False
    if primitive == "neg":
        return not fmt.has_negative_zero
    if is_complex(dtype):
        return True
    return primitive == "abs" and fmt.twos_complement


@register(*SIGN_CHANGES, kind="exact")
def sign_change(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged where the result is a value of the format (`leaves_format`), else bind and round."""
    if leaves_format(eqn.primitive.name, jnp.result_type(invals[0]), ctx.format_for()):
        return ctx.bind_and_round(eqn, invals)
    return ctx.bind(eqn, invals)


@register("convert_element_type", kind="convert")
def convert(ctx: Context, eqn: Any, invals: list) -> list:
    """Widening float casts are exact (no rounding). A narrowing float cast rounds once, from the wide
    value, to the policy's format when that format fits the narrow dtype (then the cast is exact), else
    the cast's own rounding is followed by the usual rounding. Casts from integers and bools create new
    values: their results are rounded. Complex dtypes count by their parts' dtype (float32 to complex64
    is exact; complex128 to complex64 or to float32, which keeps the real part, narrows)."""
    (x,) = invals
    new_dtype = eqn.params["new_dtype"]
    if not is_inexact(new_dtype):
        return ctx.bind(eqn, invals)
    if not is_inexact(x.dtype):
        return ctx.bind_and_round(eqn, invals)
    src, dst = get_format(component_dtype(x.dtype)), get_format(component_dtype(new_dtype))
    if fits(src, dst):
        return ctx.bind(eqn, invals)  # widening (or same type): exact
    fmt = ctx.format_for()
    if fmt is not None and fits(fmt, dst):
        return ctx.bind(eqn, [ctx.round_output(x, fmt=fmt)])  # one rounding, then an exact cast
    return ctx.bind_and_round(eqn, invals)
