"""The training-recipe oracle's exact float32 sum (`fpemu.testing.recipe_reference`): the exact sum of
float64 terms rounded once, nearest even, also where the float64 sum lands on a float32 tie."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fpemu.testing import reference
from fpemu.testing.recipe_reference import _sum_f32

FLT_MAX = float(np.finfo(np.float32).max)


def _bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ([1.0, 2.0**-24], 1.0),  # a tie: to the even significand
        ([1.0, 2.0**-24, 2.0**-80], 1.0 + 2.0**-23),  # just above the tie (the float64 sum is the tie)
        ([1.0, 2.0**-24, -(2.0**-80)], 1.0),
        ([-1.0, -(2.0**-24), -(2.0**-80)], -1.0 - 2.0**-23),
        ([2.0**-150], 0.0),  # half the smallest subnormal: to zero (even)
        ([2.0**-150, 2.0**-200], 2.0**-149),
        ([3 * 2.0**-150], 2.0**-148),  # between codes 1 and 2: to code 2
        ([FLT_MAX, 2.0**103], math.inf),  # the overflow threshold: to infinity (FLT_MAX's significand is odd)
        ([FLT_MAX, 2.0**103, -(2.0**-1000)], FLT_MAX),  # just below it
        ([FLT_MAX, 2.0**103 - 2.0**50, 2.0**50], math.inf),
        ([-FLT_MAX, -1e30], -FLT_MAX),
        ([FLT_MAX, FLT_MAX], math.inf),
        ([2.0**-126, -(2.0**-149)], 2.0**-126 - 2.0**-149),  # a subnormal result, exact
        ([0.5, -0.5], 0.0),  # an exact zero is +0
    ],
)
def test_exact_sum_rounded_once(terms, expected):
    got = _sum_f32(np.array(terms))
    assert _bits(got) == _bits(expected), (terms, float(got), expected)
    exact = reference.round_scalar(sum((Fraction(t) for t in terms), Fraction(0)), "fp32")
    assert _bits(got) == _bits(exact)
