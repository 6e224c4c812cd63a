"""Literals that change meaning when `fpemu.emulate` rounds them, and the `PrecisionWarning` that says so.

A Python number in the user's code (Adam's ``b2 = 0.999``, a layer norm's ``eps = 1e-5``) is a literal
of the traced program, rounded to the policy's ``default`` format like every other value. Some
roundings change what the program means: ``0.999`` is ``1.0`` in bf16 (so ``1 - b2**t`` is 0 and the
bias correction divides by zero), ``1e-5`` is 0 in e4m3fn (so ``x / sqrt(var + eps)`` divides by zero
on a constant input), ``1e6`` is infinity in fp16. `literal_change` tells such a rounding apart; the
interpreter warns of it (`warn`: once per literal and source line, as Python warns once per location) and
`fpemu.find_nonfinite` lists them.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from fpemu._core.format import Format

__all__ = ["LiteralChange", "PrecisionWarning", "literal_change", "warn"]


class PrecisionWarning(UserWarning):
    """A literal of an emulated program changed meaning when it was rounded to the policy's format: a
    nonzero value became 0, a finite value became ±inf or NaN, or a value other than 1 became exactly
    1.0. Given once per literal and source line, however often the function is traced, as Python gives any
    warning once per location; Python's warning filters apply: ``warnings.simplefilter("always",
    fpemu.PrecisionWarning)`` gives it at every trace, ``"error"`` turns it into an error, ``"ignore"``
    silences it."""


# Python's record of the warnings given, as `warnings.warn` keeps one in each module (``__warningregistry__``):
# with the default filter a literal's warning is given once, not again at every trace of the function (a
# benchmark that builds a step several times, a function traced for each new shape). Changing the filters
# (``warnings.simplefilter``, ``catch_warnings``) starts it afresh.
_GIVEN: dict[Any, Any] = {}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LiteralChange:
    """One literal whose rounding changed its meaning: the value, what it became in ``format``, why that
    matters, and where (the primitive that reads it and the user's source line, ``file:line (function)``)."""

    value: float
    rounded: float
    format: str
    meaning: str
    primitive: str
    source: str

    def __str__(self) -> str:
        return (
            f"{self.value!r} -> {self.rounded!r} in {self.format} ({self.meaning}), a literal of "
            f"{self.primitive} at {self.source}"
        )


def literal_change(value: Any, rounded: Any) -> tuple[float, float, str] | None:
    """The first element of a literal whose rounding changed its meaning, as (value, rounded, why), or None.

    Example:
      >>> literal_change(np.float32(0.999), np.float32(1.0))
      (0.999, 1.0, 'rounds to exactly 1.0')
      >>> literal_change(np.float32(1e-5), np.float32(0.0))
      (1e-05, 0.0, 'a nonzero value rounds to 0')
      >>> literal_change(np.float32(0.3), np.float32(0.30078125)) is None
      True
    """
    value = np.asarray(value)
    if not np.issubdtype(value.dtype, np.floating) and value.dtype.name != "bfloat16":
        return None  # complex literals (their parts are rounded separately) are not checked
    before = value.astype(np.float64).ravel()
    after = np.asarray(rounded).astype(np.float64).ravel()
    for x, y, typed in zip(before.tolist(), after.tolist(), value.ravel()):
        if not np.isfinite(x) or x == y:
            continue
        if not np.isfinite(y):
            why = f"a finite value rounds to {y}"
        elif y == 0.0 and x != 0.0:
            why = "a nonzero value rounds to 0"
        elif y == 1.0:
            why = "rounds to exactly 1.0"
        else:
            continue
        return float(str(typed)), y, why  # the shortest decimal of the literal's dtype: as the user wrote it
    return None


def describe(
    value: Any, rounded: Any, fmt: Format, eqn: Any, source: tuple[str, int, str] | None
) -> LiteralChange | None:
    """`literal_change` of a literal read by ``eqn``, with where it is, or None if its meaning holds."""
    change = literal_change(value, rounded)
    if change is None:
        return None
    x, y, why = change
    where = "an unknown line" if source is None else f"{source[0]}:{source[1]} ({source[2]})"
    return LiteralChange(value=x, rounded=y, format=fmt.name, meaning=why, primitive=eqn.primitive.name, source=where)


def warn(change: LiteralChange, source: tuple[str, int, str] | None) -> None:
    """Warn of ``change`` at the user's source line (the interpreter calls this once per literal and
    line in one trace of the function; Python's filters decide whether it is shown again: `_GIVEN`)."""
    message = (
        f"fpemu.emulate: the literal {change.value!r} becomes {change.rounded!r} in {change.format} "
        f"({change.meaning}) in {change.primitive} at {change.source}; compute this in a wider format "
        "(Policy(exclude=...) of its named scope or primitive), or see docs/emulate.md, "
        "'Where did the NaN come from?' (fpemu.find_nonfinite)"
    )
    filename, lineno = ("<unknown>", 0) if source is None else (source[0], source[1])
    warnings.warn_explicit(message, PrecisionWarning, filename, lineno, module="fpemu.emulate", registry=_GIVEN)
