"""Rules of the plain primitives (no sub-jaxpr, no DotPolicy): ``rounded``, ``exact``, ``convert``.

The primitive names of each kind are listed in `fpemu._emulate.registry`; docs/emulate.md has the
table.
"""

from __future__ import annotations

from typing import Any

from fpemu._core.format import fits
from fpemu._core.registry import get_format
from fpemu._emulate.interpreter import Context
from fpemu._emulate.registry import EXACT, ROUNDED, register
from fpemu._emulate.rounding import is_float


@register(*ROUNDED, kind="rounded")
def rounded(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind, then round every floating-point result to the policy's format for this primitive."""
    return ctx.bind_and_round(eqn, invals)


@register(*EXACT, kind="exact")
def exact(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged: the results are values (or negated values) of the inputs."""
    return ctx.bind(eqn, invals)


@register("convert_element_type", kind="convert")
def convert(ctx: Context, eqn: Any, invals: list) -> list:
    """Widening float casts are exact (no rounding). A narrowing float cast rounds once, from the wide
    value, to the policy's format when that format fits the narrow dtype (then the cast is exact), else
    the cast's own rounding is followed by the usual rounding. Casts from integers and bools create new
    values: their results are rounded."""
    (x,) = invals
    new_dtype = eqn.params["new_dtype"]
    if not is_float(new_dtype):
        return ctx.bind(eqn, invals)
    if not is_float(x.dtype):
        return ctx.bind_and_round(eqn, invals)
    src, dst = get_format(x.dtype), get_format(new_dtype)
    if fits(src, dst):
        return ctx.bind(eqn, invals)  # widening (or same type): exact
    fmt = ctx.format_for()
    if fmt is not None and fits(fmt, dst):
        return ctx.bind(eqn, [ctx.round_output(x, fmt=fmt)])  # one rounding, then an exact cast
    return ctx.bind_and_round(eqn, invals)
