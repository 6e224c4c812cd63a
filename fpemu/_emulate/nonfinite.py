"""`fpemu.find_nonfinite`: where an emulated program's first NaN or infinity came from, and why.

JAX's ``jax_debug_nans`` cannot help under `fpemu.emulate`: the program that runs is the emulated
one, not the user's. `find_nonfinite` runs the function under the policy with every equation watched
(`fpemu._emulate.watch`) and reports the first whose result is non-finite while its inputs were all
finite: the primitive, the user's source line, the inputs' ranges and the format, with the literals
whose rounding changed their meaning (``0.999 -> 1.0 in bf16``), the usual cause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from fpemu._core.registry import FormatLike
from fpemu._emulate.policy import Policy
from fpemu._emulate.precision import LiteralChange
from fpemu._emulate.transform import checked_options, emulated_function
from fpemu._emulate.watch import Event, Watch

__all__ = ["NonfiniteReport", "find_nonfinite"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class NonfiniteReport:
    """What `find_nonfinite` found; ``str(report)`` is a readable account.

    Attributes:
      found: whether an operation made a NaN or an infinity from finite inputs.
      primitive, source, scope, format: that operation's primitive, the user's source line
        (``file:line (function)``), its named scope (``"scope/.../primitive"``) and the format the
        policy rounds it to (``"-"``: not rounded); None when nothing was found.
      input_ranges: (min, max) of each floating-point input (its first four) at that moment.
      output: what its result held: ``"NaN"``, ``"±inf"`` or both.
      later: the other operations that did the same afterwards (at most 15), in order.
      literals: the literals whose rounding changed their meaning, in the order they are read.
      value: what the function returned (its emulated value).
    """

    found: bool
    primitive: str | None
    source: str | None
    scope: str | None
    format: str | None
    input_ranges: tuple[tuple[float, float], ...]
    output: str | None
    later: tuple[Event, ...]
    literals: tuple[LiteralChange, ...]
    value: Any = dataclasses.field(repr=False)

    def __str__(self) -> str:
        lines = []
        if self.found:
            ranges = ", ".join(f"[{lo:.6g}, {hi:.6g}]" for lo, hi in self.input_ranges) or "none"
            lines += [
                f"first non-finite result from finite inputs: {self.primitive} at {self.source}",
                f"  scope: {self.scope}    format: {self.format}    output: {self.output}",
                f"  input ranges: {ranges}",
            ]
            if self.later:
                lines.append(
                    f"  then {len(self.later)} more: "
                    + ", ".join(f"{e.site.primitive} at {e.site.source}" for e in self.later[:3])
                )
        else:
            lines.append("no operation made a NaN or an infinity from finite inputs")
        if self.literals:
            lines.append("literals that changed meaning when rounded:")
            lines += [f"  {change}" for change in self.literals]
        return "\n".join(lines)


def find_nonfinite(
    fn: Callable,
    policy: Policy | FormatLike,
    *args: Any,
    key: jax.Array | None = None,
    random: Callable | None = None,
    state: bool = False,
) -> NonfiniteReport:
    """Run ``fn(*args)`` under ``policy`` and report the first operation whose emulated result is NaN or
    ±inf while its inputs were finite: the primitive, the user's source line, the inputs' ranges and
    the format, and the literals whose rounding changed their meaning.

    NaN and ±inf in the inputs are not causes: an operation counts only when every floating-point
    input is finite (a NaN that flows on is not reported again). "First" is the order in which the
    operations ran (inside loops, the iteration where it happened). A literal changes meaning when
    a nonzero value rounds to 0, a finite one to ±inf or NaN, or one other than 1 to exactly 1.0
    (``0.999`` in bf16); `fpemu.emulate` also warns of these (`fpemu.PrecisionWarning`).

    The function runs once, eagerly (op by op, with a small check after every operation), so this
    is a debugging tool, not for a training loop. It takes `fpemu.emulate`'s options (``with_stats``
    aside) and, with ``state=True``, the training state first, as ``emulate(fn, policy,
    state=True)`` does.

    Args:
      fn: the function, as for `fpemu.emulate`.
      policy: a `Policy` or a format name, as for `fpemu.emulate`.
      *args: the arguments to call ``fn`` with.
      key, random, state: as for `fpemu.emulate`.

    Returns:
      A `NonfiniteReport` (``print`` it).

    Raises:
      As `fpemu.emulate`, for a bad policy or option.

    Example:
      >>> import warnings, jax.numpy as jnp, fpemu
      >>> def bias_correction(v, t):
      ...     return v / (1.0 - 0.999**t)              # Adam's second moment, b2 = 0.999
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", fpemu.PrecisionWarning)
      ...     report = fpemu.find_nonfinite(bias_correction, "bf16", jnp.float32(0.5), jnp.float32(3.0))
      >>> report.primitive, report.output, report.input_ranges
      ('div', '±inf', ((0.5, 0.5), (0.0, 0.0)))
      >>> print(report.literals[0].value, "->", report.literals[0].rounded, "in", report.literals[0].format)
      0.999 -> 1.0 in bf16
    """
    options = checked_options(fn, policy, with_stats=False, key=key, random=random, state=state)
    watch = Watch()
    value = emulated_function(fn, options, watch)(*args)
    jax.block_until_ready(value)
    jax.effects_barrier()
    first = watch.events[0] if watch.events else None
    return NonfiniteReport(
        found=first is not None,
        primitive=None if first is None else first.site.primitive,
        source=None if first is None else first.site.source,
        scope=None if first is None else first.site.scope,
        format=None if first is None else first.site.format,
        input_ranges=() if first is None else first.input_ranges,
        output=None if first is None else first.output,
        later=tuple(watch.events[1:]),
        literals=tuple(watch.literals),
        value=value,
    )
