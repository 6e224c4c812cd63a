"""The default tolerances of other frameworks' closeness assertions, per dtype (`tolerances`)."""

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

TOLERANCES: Mapping[str, Mapping[str, Tolerance]] = MappingProxyType(
    {
        # torch.testing.assert_close's defaults: torch/testing/_comparison.py `_DTYPE_PRECISIONS`
        # (copied there from torch.testing._internal.common_utils.TestCase.dtype_precisions).
        "torch": MappingProxyType(
            {
                "float64": Tolerance(1e-7, 1e-7),
                "float32": Tolerance(1.3e-6, 1e-5),
                "float16": Tolerance(1e-3, 1e-5),
                "bfloat16": Tolerance(1.6e-2, 1e-5),
            }
        ),
        # numpy.testing.assert_allclose(actual, desired, rtol=1e-07, atol=0): one default for every dtype.
        "numpy": MappingProxyType(
            {dtype: Tolerance(1e-7, 0.0) for dtype in ("float64", "float32", "float16", "bfloat16")}
        ),
        # numpy.allclose / numpy.isclose(a, b, rtol=1e-05, atol=1e-08).
        "numpy.allclose": MappingProxyType(
            {dtype: Tolerance(1e-5, 1e-8) for dtype in ("float64", "float32", "float16", "bfloat16")}
        ),
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
            }
        ),
    }
)


def tolerances(framework: str, dtype: Any = None) -> Any:
    """The default tolerances another framework's closeness assertion uses, per dtype.

    ``"torch"``: ``torch.testing.assert_close`` (float64, float32, float16, bfloat16).
    ``"numpy"``: ``numpy.testing.assert_allclose`` (rtol 1e-7, atol 0, every dtype).
    ``"numpy.allclose"``: ``numpy.allclose`` / ``isclose`` (rtol 1e-5, atol 1e-8).
    ``"jax"``: JAX's test suite (``jax._src.public_test_util``; rtol = atol, also for the float8,
    float4 and e8m0 dtypes).

    Args:
      framework: One of the keys of `TOLERANCES`.
      dtype: A dtype (or its name); None returns the whole per-dtype table.

    Returns:
      A `Tolerance` ``(rtol, atol)``, or a read-only mapping from dtype name to `Tolerance`.

    Raises:
      ValueError: for an unknown framework, or a dtype the framework has no default for (the
        message lists the valid choices).

    Example:
      >>> tolerances("torch", "bfloat16")
      Tolerance(rtol=0.016, atol=1e-05)
      >>> import jax.numpy as jnp
      >>> tolerances("jax", jnp.float32), tolerances("numpy", "float16")
      (Tolerance(rtol=1e-06, atol=1e-06), Tolerance(rtol=1e-07, atol=0.0))
    """
    if framework not in TOLERANCES:
        raise ValueError(f"framework must be one of {', '.join(map(repr, TOLERANCES))}; got {framework!r}")
    table = TOLERANCES[framework]
    if dtype is None:
        return table
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype must be a dtype or a dtype name, got {dtype!r}") from None
    if name not in table:
        raise ValueError(f"{framework} has no default tolerance for {name}; it has: {', '.join(table)}")
    return table[name]
