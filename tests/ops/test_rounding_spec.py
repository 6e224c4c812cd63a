"""fpemu._ops.rounding_spec's `rounding_spec_once`: the spec `rounding_spec` checks, made once per
combination for the roundings fpemu's own layers repeat (emulate, the accumulator, the training
layer's element rounding)."""

from __future__ import annotations

import pytest

from fpemu._core.registry import get_format
from fpemu._ops.rounding_spec import SPEC_KEY, rounding_spec, rounding_spec_once

E4M3 = get_format("e4m3fn")


def test_a_deterministic_spec_is_rounding_spec_s_and_drops_the_stochastic_options():
    spec = rounding_spec_once(E4M3, "nearest_even", True, True, 12, "nearest_even", "even")
    assert spec == rounding_spec(E4M3, "nearest_even", True, True, None, None, exponent_ties="even")
    assert spec == rounding_spec_once(E4M3, "nearest_even", True, True, None, "floor", "even")


@pytest.mark.parametrize("explicit", [False, True])
def test_a_stochastic_spec_keeps_its_options_and_says_where_its_bits_come_from(explicit):
    spec = rounding_spec_once(E4M3, "stochastic", False, True, 12, "nearest_odd", "away", explicit)
    key, random = (None, True) if explicit else (SPEC_KEY, None)
    expected = rounding_spec(
        E4M3, "stochastic", False, True, key, 12, random=random, stochastic_variant="nearest_odd", exponent_ties="away"
    )
    assert spec == expected
    assert spec.random_bits == 12 and spec.stochastic_variant == "nearest_odd"


def test_it_is_made_once_per_combination():
    assert rounding_spec_once(E4M3, "toward_zero", True) is rounding_spec_once(E4M3, "toward_zero", True)


def test_bad_options_are_refused_as_rounding_spec_refuses_them():
    with pytest.raises(ValueError, match="rounding"):
        rounding_spec_once(E4M3, "nearest", True)
