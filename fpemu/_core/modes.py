"""The rounding-mode vocabulary, shared by the fast path and the reference (names only, no logic)."""

from typing import Literal, get_args

Rounding = Literal[
    "nearest_even", "nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd", "stochastic"
]
ROUNDING_MODES: tuple[str, ...] = get_args(Rounding)
