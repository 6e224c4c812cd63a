"""The default tolerances of other frameworks' closeness assertions, per dtype (`tolerances`).

Each framework's table is copied from its source, and so is its rule for the dtypes the table does
not list and for two arrays of different dtypes:

- ``"torch"`` (``torch/testing/_comparison.py``, ``default_tolerances``): the table
  ``_DTYPE_PRECISIONS`` has float64, float32, float16 and bfloat16; every other dtype (the float8
  types, integers, bool) gets ``(0, 0)`` from ``_DTYPE_PRECISIONS.get(dtype, (0.0, 0.0))``: an exact
  comparison. For two dtypes, the largest rtol and the largest atol of the two (the loosest).
- ``"numpy"``, ``"numpy.allclose"``: one default for every dtype (``assert_allclose`` and ``allclose``
  do not look at dtypes), so also for float8 and mixed dtypes.
- ``"jax"`` (``jax/_src/public_test_util.py``, ``_default_tolerance``; rtol = atol): a value for every
  float type JAX has (float8, float4 and e8m0 included) and 0 for integers and bool. For two dtypes,
  the largest of the two (``_assert_numpy_close``). The float6 types are not in JAX's table (JAX's
  tests raise KeyError there): fpemu raises a ValueError rather than invent a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

__all__ = ["TOLERANCES", "Tolerance", "tolerances"]


class Tolerance(NamedTuple):
    """A pair of tolerances: ``|actual - expected| <= atol + rtol * |expected|``."""

    rtol: float
    atol: float


def _same(value: float, dtypes: tuple[str, ...]) -> dict[str, Tolerance]:
    return {dtype: Tolerance(value, value) for dtype in dtypes}


_FLOAT8 = ("float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
           "float8_e5m2fnuz")  # fmt: skip
_INTEGERS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOATS = ("float64", "float32", "float16", "bfloat16")

TOLERANCES: Mapping[str, Mapping[str, Tolerance]] = MappingProxyType(
    {
        # torch.testing.assert_close's defaults: torch/testing/_comparison.py `_DTYPE_PRECISIONS`
        # (copied there from torch.testing._internal.common_utils.TestCase.dtype_precisions).
        # Any other dtype: (0, 0).
        "torch": MappingProxyType(
            {
                "float64": Tolerance(1e-7, 1e-7),
                "float32": Tolerance(1.3e-6, 1e-5),
                "float16": Tolerance(1e-3, 1e-5),
                "bfloat16": Tolerance(1.6e-2, 1e-5),
            }
        ),
        # numpy.testing.assert_allclose(actual, desired, rtol=1e-07, atol=0): one default for every dtype.
        "numpy": MappingProxyType({dtype: Tolerance(1e-7, 0.0) for dtype in _FLOATS}),
        # numpy.allclose / numpy.isclose(a, b, rtol=1e-05, atol=1e-08): one default for every dtype.
        "numpy.allclose": MappingProxyType({dtype: Tolerance(1e-5, 1e-8) for dtype in _FLOATS}),
        # JAX's own test suite: jax/_src/public_test_util.py `_default_tolerance`, used as both rtol and
        # atol by JaxTestCase.assertAllClose (jax.test_util.check_close also multiplies them by the size).
        "jax": MappingProxyType(
            {
                **_same(1e-15, ("float64",)),
                **_same(1e-6, ("float32",)),
                **_same(1e-3, ("float16",)),
                **_same(1e-2, ("bfloat16",)),
                **_same(1e-1, _FLOAT8),
                **_same(1.0, ("float4_e2m1fn", "float8_e8m0fnu")),
                **_same(0.0, _INTEGERS),
            }
        ),
    }
)

# What each framework does for a dtype its table does not list: torch compares exactly; NumPy has
# one default for all dtypes; JAX has no rule (KeyError), so neither has fpemu.
_OTHER_DTYPES: Mapping[str, Tolerance | None] = MappingProxyType(
    {"torch": Tolerance(0.0, 0.0), "numpy": Tolerance(1e-7, 0.0), "numpy.allclose": Tolerance(1e-5, 1e-8), "jax": None}
)


def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype must be a dtype or a dtype name, got {dtype!r}") from None


def tolerances(framework: str, *dtypes: Any) -> Any:
    """The default tolerances another framework's closeness assertion uses for these dtypes.

    ``"torch"``: ``torch.testing.assert_close`` (float64, float32, float16, bfloat16; every other
    dtype, float8 included, ``(0, 0)``: torch compares those exactly).
    ``"numpy"``: ``numpy.testing.assert_allclose`` (rtol 1e-7, atol 0, every dtype).
    ``"numpy.allclose"``: ``numpy.allclose`` / ``isclose`` (rtol 1e-5, atol 1e-8, every dtype).
    ``"jax"``: JAX's test suite (``jax._src.public_test_util``; rtol = atol, also for the float8,
    float4 and e8m0 dtypes; 0 for integers).

    With two dtypes or more (an actual and an expected array of different dtypes), the loosest:
    the largest rtol and the largest atol of them, as torch and JAX combine them.

    Args:
      framework: One of the keys of `TOLERANCES`.
      *dtypes: Dtypes (or their names); none returns the framework's whole per-dtype table.

    Returns:
      A `Tolerance` ``(rtol, atol)``, or a read-only mapping from dtype name to `Tolerance`.

    Raises:
      ValueError: for an unknown framework, or a dtype JAX has no default for (the float6 types;
        the message lists those it has).
      TypeError: for something that is not a dtype.

    Example:
      >>> tolerances("torch", "bfloat16")
      Tolerance(rtol=0.016, atol=1e-05)
      >>> import jax.numpy as jnp
      >>> tolerances("jax", jnp.float32), tolerances("numpy", "float16")
      (Tolerance(rtol=1e-06, atol=1e-06), Tolerance(rtol=1e-07, atol=0.0))
      >>> tolerances("torch", jnp.float32, jnp.float64)  # the loosest of the two: float32's
      Tolerance(rtol=1.3e-06, atol=1e-05)
      >>> tolerances("torch", jnp.float8_e4m3fn)  # not in torch's table: torch compares exactly
      Tolerance(rtol=0.0, atol=0.0)
    """
    if not isinstance(framework, str) or framework not in TOLERANCES:
        raise ValueError(f"framework must be one of {', '.join(map(repr, TOLERANCES))}; got {framework!r}")
    table = TOLERANCES[framework]
    if not dtypes:
        return table
    found = []
    for name in map(_dtype_name, dtypes):
        tol = table.get(name, _OTHER_DTYPES[framework])
        if tol is None:
            raise ValueError(f"{framework} has no default tolerance for {name}; it has: {', '.join(table)}")
        found.append(tol)
    return Tolerance(max(t.rtol for t in found), max(t.atol for t in found))
