"""The rounding vocabulary, shared by the fast path and the reference (names only, no logic).

- `ROUNDING_MODES`: the rounding modes.
- `STOCHASTIC_VARIANTS`: how ``rounding="stochastic"`` compares its k random bits with the
  discarded fraction ``f`` of a step (gfloat's and IEEE P3109's stochastic modes).
- `SATURATIONS`: the values of ``saturate``: fpemu's two (``False``, ``True``) and IEEE P3109's three.
- `EXPONENT_TIES`: how ``nearest_even`` breaks a tie in a format without mantissa bits.
"""

from typing import Literal, get_args

Rounding = Literal[
    "nearest_even", "nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd", "stochastic"
]
ROUNDING_MODES: tuple[Rounding, ...] = get_args(Rounding)

#: Round up iff ``T + r >= 2**k`` for the k random bits ``r``, where ``T`` is ``2**k * f`` rounded to
#: an integer by: "floor" (fpemu's default; gfloat StochasticFastest, P3109 StochasticA), "nearest_even"
#: (gfloat Stochastic, P3109 StochasticC), "nearest_odd" (ties to odd: gfloat StochasticOdd),
#: "nearest_away" (half up: gfloat StochasticFast, P3109 StochasticB).
StochasticVariant = Literal["floor", "nearest_even", "nearest_odd", "nearest_away"]
STOCHASTIC_VARIANTS: tuple[str, ...] = get_args(StochasticVariant)

#: IEEE P3109's saturation modes (SatFinite, SatPropagate, and OvfInf, which the draft standard now
#: calls SatNone), beside fpemu's ``False`` (IEEE-style overflow) and ``True`` (clamp everything).
P3109Saturation = Literal["sat_finite", "sat_propagate", "ovf_inf"]
P3109_SATURATIONS: tuple[str, ...] = get_args(P3109Saturation)
Saturation = bool | P3109Saturation
SATURATIONS: tuple = (False, True, *P3109_SATURATIONS)

#: ``nearest_even`` in a format without mantissa bits (E8M0, P3109 P = 1), whose values are powers of
#: two: "away" breaks a tie away from zero (ml_dtypes' E8M0 conversion, the default), "even" toward
#: the even code, i.e. the even biased exponent (IEEE P3109, gfloat TiesToEven).
ExponentTies = Literal["away", "even"]
EXPONENT_TIES: tuple[str, ...] = get_args(ExponentTies)
