"""Names that moved, kept importable for one release: each warns and names what replaced it."""

import importlib
import sys

import pytest

from fpemu.testing import scaled_reference


def test_the_scaled_reference_moved_to_the_testing_layer():
    sys.modules.pop("fpemu.scaled.reference", None)  # an earlier import would not warn again
    with pytest.warns(
        DeprecationWarning, match=r"fpemu.scaled.reference is deprecated.*fpemu.testing.scaled_reference"
    ):
        old = importlib.import_module("fpemu.scaled.reference")
    for name in ("Result", "assert_equal", "exponent", "quantize", "split"):
        assert getattr(old, name) is getattr(scaled_reference, name)
