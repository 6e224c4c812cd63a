"""The rounding error of formats against magnitude, binade by binade: the numbers of ``fpemu plot rounding-error``.

For every binade ``[2**e, 2**(e+1))`` from the one below the smallest subnormal to the one holding the
largest finite value (the last one cut at ``max``), `rounding_error_table` takes evenly spaced values
inside the binade in float64, rounds each once with `fpemu.quantize` (``jax_enable_x64`` on while it
runs), and records the largest and the mean relative error ``|q(x) - x| / |x|``. In the normal range
round-to-nearest keeps it below the unit roundoff ``u = eps / 2 = 2**-precision``; directed modes
and stochastic rounding below ``eps``; in the subnormal range the absolute error is fixed, so the
relative error doubles with every binade down, up to 1 where values round to zero.

`family` sorts formats into the three panels of the figure, so that bf16's range (2**-133 to
2**128) does not stretch the axis of the 8-bit and narrower formats.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.tools import choices

__all__ = ["FAMILIES", "FAMILY_TITLES", "BinadeError", "family", "rounding_error_table"]

#: The families, in panel order, and how the figure titles them.
FAMILIES: tuple[str, ...] = ("wide", "fp8", "fp6_fp4")
FAMILY_TITLES = {
    "wide": "9 to 64 bits",
    "fp8": "8 bits (FP8)",
    "fp6_fp4": "6 bits and fewer (FP6, FP4)",
}
_FLOAT64_MIN_EXPONENT = -1074  # 2**-1074 is float64's smallest subnormal: no sample below it


def family(fmt: Any) -> str:
    """``"wide"`` for formats of 9 bits or more, ``"fp8"`` for 7 and 8 bits, ``"fp6_fp4"`` below.

    Example:
      >>> [family(f) for f in ("bf16", "e4m3fn", "e2m1fn")]
      ['wide', 'fp8', 'fp6_fp4']
    """
    bits = fpemu.get_format(fmt).bits
    return "wide" if bits >= 9 else "fp8" if bits >= 7 else "fp6_fp4"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BinadeError:
    """The relative rounding error of one format and rounding mode over one binade ``[2**exponent, 2**(exponent+1))``.

    ``high`` is ``2**(exponent+1)``, or the format's ``max`` in its top binade. ``unit_roundoff`` is the
    format's ``eps / 2``. The errors are over ``samples`` evenly spaced values of ``[2**exponent, high)``.
    """

    format: str
    family: str
    mode: str
    exponent: int
    high: float
    samples: int
    max_relative_error: float
    mean_relative_error: float
    unit_roundoff: float


def _binades(fmt: fpemu.Format) -> range:
    low = max(fmt.min_subnormal_exponent - 1, _FLOAT64_MIN_EXPONENT)
    return range(low, math.frexp(fmt.max)[1])  # max = f * 2**e with 0.5 <= f < 1: the top binade is e - 1


def rounding_error_table(
    formats: Iterable[Any],
    *,
    modes: Sequence[str] = ("nearest_even",),
    samples_per_binade: int = 1000,
    seed: int = 0,
) -> list[BinadeError]:
    """`BinadeError` rows for every format, mode and binade, in that order.

    Args:
      formats: format names, dtypes or `fpemu.Format` objects.
      modes: rounding modes (`fpemu.ROUNDING_MODES`); ``"stochastic"`` uses ``jax.random.key(seed)``.
      samples_per_binade: ``S``, the evenly spaced values of each binade: ``low + (j + 1/2) (high - low) / S``
        for ``j < S``. They are the same relative positions in every binade, so in the normal range
        every binade gives the same numbers (a flat line), and no random draw adds noise.
      seed: stochastic rounding's key is ``jax.random.key(seed)``; the other modes are deterministic.

    Raises:
      fpemu.UnknownFormatError: for an unknown format (listing the close names).
      ValueError: for an unknown rounding mode (listing them), no formats, or fewer than one sample.

    Example:
      >>> rows = rounding_error_table(["e2m1fn"])
      >>> [(r.exponent, r.max_relative_error <= 2**-2) for r in rows]    # 0.5 is e2m1fn's only subnormal
      [(-2, False), (-1, False), (0, True), (1, True), (2, True)]
    """
    fmts = list(dict.fromkeys(fpemu.get_format(f) for f in formats))
    if not fmts:
        raise ValueError("no formats given")
    modes = choices.check_names("rounding mode", list(dict.fromkeys(modes)), fpemu.ROUNDING_MODES)
    if isinstance(samples_per_binade, bool) or not isinstance(samples_per_binade, int) or samples_per_binade < 1:
        raise ValueError(f"samples_per_binade must be a positive int, got {samples_per_binade!r}")
    rows = []
    with jax.enable_x64(True):
        key = jax.random.key(seed)
        for fmt in fmts:
            binades = list(_binades(fmt))
            lows = np.array([math.ldexp(1.0, e) for e in binades])
            highs = np.array([math.ldexp(1.0, e + 1) for e in binades[:-1]] + [fmt.max])
            grid = (np.arange(samples_per_binade) + 0.5) / samples_per_binade
            x = lows[:, None] + grid * (highs - lows)[:, None]  # evenly spaced in [low, high)
            for mode in modes:
                rounding = cast(fpemu.Rounding, mode)  # checked above
                q = fpemu.quantize(jnp.asarray(x), fmt, rounding=rounding, key=key if mode == "stochastic" else None)
                error = np.abs(np.asarray(q, np.float64) - x) / x
                for j, exponent in enumerate(binades):
                    rows.append(BinadeError(
                        format=fmt.name, family=family(fmt), mode=mode, exponent=exponent, high=float(highs[j]),
                        samples=samples_per_binade, max_relative_error=float(error[j].max()),
                        mean_relative_error=float(error[j].mean()), unit_roundoff=fmt.eps / 2,
                    ))  # fmt: skip
    return rows
