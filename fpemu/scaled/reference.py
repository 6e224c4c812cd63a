"""Deprecated: the scaled formats' NumPy oracle is `fpemu.testing.scaled_reference` (the testing layer,
beside the other oracles). This alias stays for one release; importing it warns.

It loads the new module by name (``importlib``), not with an import statement: the one deliberate
upward reference of the package, listed in docs/architecture.md, gone with the alias.
"""

import importlib
import warnings

warnings.warn(
    "fpemu.scaled.reference is deprecated and will be removed in the next release; use "
    "fpemu.testing.scaled_reference (the same functions)",
    DeprecationWarning,
    stacklevel=2,
)
_new = importlib.import_module("fpemu.testing.scaled_reference")
Result = _new.Result
assert_equal = _new.assert_equal
exponent = _new.exponent
quantize = _new.quantize
split = _new.split
__all__ = ["Result", "assert_equal", "exponent", "quantize", "split"]
