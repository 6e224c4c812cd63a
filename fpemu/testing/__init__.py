"""Test helpers for fpemu and for code built on it.

`reference` is the exact, slow oracle for rounding into any format: it shares no code with the
fast path and is what fpemu's own tests check the fast path against.
"""

from fpemu.testing import reference

__all__ = ["reference"]
