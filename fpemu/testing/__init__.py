"""Test helpers for fpemu and for code built on it.

- `reference`: the exact, slow oracle for rounding into any format. It shares no code with the
  fast path and is what fpemu's own tests check the fast path against. `scaled_reference` is the
  same for the scaled and block formats of `fpemu.scaled`, `dot_general_reference` for the
  emulated dots, `recipe_reference` for the training recipes' GEMMs.
- Hypothesis strategies (need ``hypothesis``): `values`, `codes`, `boundaries`, `arrays`,
  `formats`, `from_dtype`.
- Assertions: `assert_bit_exact`, `assert_representable`, `assert_close`, `ulp_distance`, and the
  default tolerances of other frameworks, `tolerances` / `TOLERANCES`.
- Exhaustive sweeps: `sweep` (every code of a format of <= 16 bits, or every float32), returning
  a `SweepReport`.
- Precision alignment: `compare` runs a JAX function in several precisions against float64 and
  returns a `CompareReport`.
- `text_table`: the one table renderer (plain-text columns or Markdown) of these reports, of the
  ``fpemu`` command line and of the benchmarks.
- A pytest plugin, `fpemu.testing.plugin` (registered by entry point): hypothesis profiles
  ``ci``/``dev``/``thorough`` (``ci`` is derandomized) and the ``--fpemu-exhaustive`` option.

See docs/testing.md for the guide and docs/tutorial_pallas.md for a worked example.
"""

import types as _types
import typing as _typing

from fpemu._text import text_table
from fpemu.testing import reference
from fpemu.testing._assertions import assert_bit_exact, assert_close, assert_representable
from fpemu.testing._compare import CompareReport, CompareRow, compare
from fpemu.testing._grid import ulp_distance
from fpemu.testing._sweeps import Mismatch, SweepReport, sweep
from fpemu.testing._tolerances import TOLERANCES, Tolerance, tolerances
from fpemu.testing.matmul_reference import dot_general_reference

__all__ = [
    "TOLERANCES",
    "CompareReport",
    "CompareRow",
    "Mismatch",
    "SweepReport",
    "Tolerance",
    "arrays",
    "assert_bit_exact",
    "assert_close",
    "assert_representable",
    "boundaries",
    "codes",
    "compare",
    "dot_general_reference",
    "formats",
    "from_dtype",
    "reference",
    "sweep",
    "text_table",
    "tolerances",
    "ulp_distance",
    "values",
]

# The strategies import hypothesis, a test-only dependency: load them on first use, so that the rest
# of fpemu.testing works without it.
_STRATEGIES = ("arrays", "boundaries", "codes", "formats", "from_dtype", "values")


def __getattr__(name: str) -> _typing.Any:
    if name in _STRATEGIES:
        try:
            from fpemu.testing import _strategies
        except ImportError as err:
            raise ImportError(
                f"fpemu.testing.{name} is a hypothesis strategy and needs hypothesis: pip install hypothesis"
            ) from err
        return getattr(_strategies, name)
    raise AttributeError(f"module 'fpemu.testing' has no attribute {name!r}")


def __dir__() -> list:
    """The public names: those of ``__all__`` and the public submodules (no private helpers)."""
    modules = {name for name, value in globals().items() if isinstance(value, _types.ModuleType)}
    return sorted(set(__all__) | {name for name in modules if not name.startswith("_")})
