"""What `fpemu.find_nonfinite` watches while the interpreter runs: each equation whose result is
non-finite while its inputs were finite, reported from the running program in the order it happens.

Every equation without a body (the primitives themselves: bodies of ``scan``, ``while``, ``cond``,
``jit``, custom derivatives are watched equation by equation inside) gets a *site*: its primitive,
the user's source line, its scope and the policy's format for it. When the program runs, a
``jax.debug.callback`` per site sends a flag (every floating-point input finite, some output not)
and the smallest and largest value of each floating-point input; `Watch.record` keeps the events in
the order they arrive, and, from the interpreter, the literals whose rounding changed their meaning
(`fpemu._emulate.precision`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._emulate.precision import LiteralChange
from fpemu._jax import compat

__all__ = ["Event", "Site", "Watch"]

MAX_INPUTS = 4  # the inputs whose ranges a report shows (a primitive has at most a few)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Site:
    """One watched equation: its primitive, the user's source line, its scope and the format it rounds to."""

    primitive: str
    source: str
    scope: str
    format: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Event:
    """A site's result became non-finite from finite inputs: the inputs' (min, max), what the output held."""

    site: Site
    input_ranges: tuple[tuple[float, float], ...]
    output: str


@dataclasses.dataclass
class Watch:
    """The sites of one interpretation, the events of its run (in order) and the literals that changed."""

    sites: list[Site] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)
    literals: list[LiteralChange] = dataclasses.field(default_factory=list)

    def add_site(self, eqn: Any, scope: str, fmt: str) -> int:
        source = compat.source_line(eqn)
        where = "an unknown line" if source is None else f"{source[0]}:{source[1]} ({source[2]})"
        self.sites.append(Site(primitive=eqn.primitive.name, source=where, scope=scope, format=fmt))
        return len(self.sites) - 1

    def check(self, eqn: Any, invals: list, outvals: list, scope: str, fmt: str) -> None:
        """Add the running check of one equation's result (nothing for one without floating-point results)."""
        outs = [y for y in outvals if _is_float(y)]
        if not outs:
            return
        ins = [jnp.asarray(x) for x in invals if _is_float(x)]
        finite_in = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in ins])) if ins else jnp.bool_(True)
        nan_out = jnp.any(jnp.stack([jnp.any(jnp.isnan(y)) for y in outs]))
        inf_out = jnp.any(jnp.stack([jnp.any(jnp.isinf(y)) for y in outs]))
        ranges = [_range(x) for x in ins[:MAX_INPUTS]]
        index = self.add_site(eqn, scope, fmt)
        jax.debug.callback(functools.partial(self.record, index), finite_in, nan_out, inf_out, ranges)

    def record(self, index: int, finite_in: Any, nan_out: Any, inf_out: Any, ranges: list) -> None:
        """The host side of `check`: keep an event (the first few) when the output broke on finite inputs."""
        if not bool(finite_in) or not (bool(nan_out) or bool(inf_out)) or len(self.events) >= 16:
            return
        output = " and ".join(name for name, flag in (("NaN", nan_out), ("±inf", inf_out)) if bool(flag))
        shown = tuple((float(np.asarray(lo)), float(np.asarray(hi))) for lo, hi in ranges)
        self.events.append(Event(site=self.sites[index], input_ranges=shown, output=output))


def _is_float(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return isinstance(x, float)
    return bool(jnp.issubdtype(dtype, jnp.inexact)) and not jnp.issubdtype(dtype, jnp.complexfloating)


def _range(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(min, max) of ``x`` as float32 scalars (0, 0 for an empty array)."""
    if x.size == 0:
        return jnp.float32(0), jnp.float32(0)
    return jnp.min(x).astype(jnp.float32), jnp.max(x).astype(jnp.float32)
