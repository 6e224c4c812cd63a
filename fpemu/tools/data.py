"""The data of the accuracy benchmarks: the distributions quantization papers use, and a user's own ``.npy`` files.

`DISTRIBUTIONS`, drawn by `sample` as float32 from a seeded NumPy `numpy.random.Generator`:

- ``"gaussian"``: standard normal.
- ``"heavy_tailed"``: Student's t with `STUDENT_T_DF` = 3 degrees of freedom (variance 3, infinite
  fourth moment): a few values lie tens of standard deviations out. Drawn in float64, rounded once.
- ``"outlier_channels"``: activations with outlier channels, as LLM.int8() (Dettmers et al., 2022)
  found them in the hidden states of large transformers: standard normal values, except that a few
  channels (columns along the last axis: hidden features, the contraction dimension of the next
  layer) are scaled by 10 to 100. One channel in `OUTLIER_EVERY` = 128 is an outlier channel (at least
  one); which ones, and each one's scale (log-uniform in `OUTLIER_SCALE` = [10, 100]), are drawn first
  from the same generator. `outlier_channels` returns both. In a matmul benchmark these are the
  activations ``A``; the weights ``B`` are Gaussian (`matmul_operands`).

`MatmulData` holds a user's own operands, e.g. activations and weights saved with `numpy.save`;
`load_array` reads one ``.npy`` file and `load_matmul_data` two.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from fpemu.tools import choices

__all__ = [
    "DISTRIBUTIONS",
    "DISTRIBUTION_LABELS",
    "OUTLIER_EVERY",
    "OUTLIER_SCALE",
    "STUDENT_T_DF",
    "MatmulData",
    "check_distribution",
    "load_array",
    "load_matmul_data",
    "matmul_operands",
    "outlier_channels",
    "sample",
]

DISTRIBUTIONS: tuple[str, ...] = ("gaussian", "heavy_tailed", "outlier_channels")
STUDENT_T_DF = 3
OUTLIER_EVERY = 128  # one outlier channel per this many channels, at least one
OUTLIER_SCALE = (10.0, 100.0)  # an outlier channel's scale is log-uniform in this range
#: How figures and tables name the distributions.
DISTRIBUTION_LABELS = {
    "gaussian": "Gaussian",
    "heavy_tailed": f"Student-t (df={STUDENT_T_DF})",
    "outlier_channels": "outlier channels (LLM.int8)",
}


def check_distribution(name: Any) -> str:
    """``name`` if it is one of `DISTRIBUTIONS`, else ValueError naming the closest and listing all."""
    if isinstance(name, str) and name in DISTRIBUTIONS:
        return name
    raise ValueError(choices.unknown("distribution", [str(name)], DISTRIBUTIONS))


def outlier_channels(channels: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The outlier channels of ``channels`` channels: their indices (ascending) and their scales.

    ``max(1, round(channels / OUTLIER_EVERY))`` distinct channels, each scaled by ``10**u`` with ``u``
    uniform in [1, 2] (log-uniform in [10, 100]).

    Example:
      >>> index, scale = outlier_channels(256, np.random.default_rng(0))
      >>> len(index), bool(np.all((10 <= scale) & (scale <= 100)))
      (2, True)
    """
    count = max(1, round(channels / OUTLIER_EVERY))
    index = np.sort(rng.choice(channels, size=count, replace=False))
    low, high = (math.log10(s) for s in OUTLIER_SCALE)
    return index, 10.0 ** rng.uniform(low, high, size=count)


def sample(distribution: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """float32 values of ``shape`` drawn from ``distribution`` (one of `DISTRIBUTIONS`) with ``rng``.

    For ``"outlier_channels"`` the channels are the last axis; their choice comes first from ``rng``
    (`outlier_channels`), then the normal values, then each outlier channel is multiplied by its scale
    (in float32).

    Raises:
      ValueError: for an unknown distribution (listing them).

    Example:
      >>> x = sample("outlier_channels", (1024, 128), np.random.default_rng(1))
      >>> x.dtype.name, int(np.sum(np.sqrt(np.mean(x * x, axis=0)) > 5))   # one outlier channel in 128
      ('float32', 1)
    """
    distribution = check_distribution(distribution)
    if distribution == "gaussian":
        return rng.standard_normal(shape, dtype=np.float32)
    if distribution == "heavy_tailed":
        return rng.standard_t(STUDENT_T_DF, shape).astype(np.float32)
    index, scale = outlier_channels(shape[-1], rng)
    x = rng.standard_normal(shape, dtype=np.float32)
    x[..., index] *= scale.astype(np.float32)
    return x


def matmul_operands(
    distribution: str, m: int, k: int, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``A`` (``m x k``) and ``B`` (``k x n``), float32, in that order from ``rng``.

    Both are drawn from ``distribution``, except for ``"outlier_channels"``: ``A`` (the activations) has
    outlier channels along ``k``, the contraction dimension, and ``B`` (the weights) is Gaussian.
    """
    a = sample(distribution, (m, k), rng)
    b = sample("gaussian" if distribution == "outlier_channels" else distribution, (k, n), rng)
    return a, b


# -- a user's own data -------------------------------------------------------------------------------


def load_array(path: str | Path, *, what: str = "array") -> np.ndarray:
    """The float32 array saved in the ``.npy`` file ``path`` (`numpy.save`).

    float16 and float32 arrays are widened or kept exactly; float64 arrays are rounded once to float32
    (nearest even), the precision every block format and matmul format starts from. NaN and infinity
    are refused, not turned into numbers: the error counts them.

    Raises:
      ValueError: for a file that is not a ``.npy`` array (or needs pickle), a dtype that is not
        float16/32/64 (bfloat16 arrays: save ``x.astype(np.float32)``), an empty array or non-finite
        values; the message names the file.
    """
    path = Path(path)
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ValueError(f"{what} {str(path)!r} is not a readable .npy array: {error}") from None
    if not isinstance(array, np.ndarray):  # an .npz archive, opened lazily: close it
        array.close()
        raise ValueError(f"{what} {str(path)!r} is not a .npy array (an .npz archive? save one array with numpy.save)")
    if array.dtype not in (np.float16, np.float32, np.float64):
        raise ValueError(
            f"{what} {str(path)!r} has dtype {array.dtype}; expected float16, float32 or float64 "
            "(save bfloat16 or FP8 data as x.astype(numpy.float32))"
        )
    if array.size == 0:
        raise ValueError(f"{what} {str(path)!r} is empty (shape {array.shape})")
    bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
    if bad:
        raise ValueError(f"{what} {str(path)!r} holds {bad} NaN or infinite values; the benchmarks need finite data")
    return array.astype(np.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class MatmulData:
    """A user's operands: ``lhs`` (``M x K``, e.g. activations) and ``rhs`` (``K x N``, e.g. weights).

    ``lhs`` with more than two axes is flattened to ``(-1, K)`` (e.g. ``batch x sequence x hidden``);
    ``rhs`` must be ``K x N``. Both are float32 (`load_array` converts files). ``name`` labels the rows,
    tables and figures.

    Raises:
      ValueError: for shapes that do not multiply (with a hint for PyTorch's ``out x in`` weights).
    """

    name: str
    lhs: np.ndarray
    rhs: np.ndarray

    def __post_init__(self) -> None:
        lhs, rhs = np.asarray(self.lhs), np.asarray(self.rhs)
        for side, array in (("lhs", lhs), ("rhs", rhs)):
            if array.dtype != np.float32:
                raise ValueError(f"{self.name}: {side} must be float32, got {array.dtype}")
        if lhs.ndim < 2 or rhs.ndim != 2:
            raise ValueError(
                f"{self.name}: lhs must be M x K (or ... x K) and rhs K x N, got shapes {lhs.shape} and {rhs.shape}"
            )
        lhs = lhs.reshape(-1, lhs.shape[-1])
        if lhs.shape[1] != rhs.shape[0]:
            hint = (
                "; rhs looks like a PyTorch nn.Linear weight (out_features x in_features): save its transpose"
                if rhs.shape[1] == lhs.shape[1]
                else ""
            )
            raise ValueError(
                f"{self.name}: lhs {lhs.shape} and rhs {rhs.shape} do not multiply: lhs has K = {lhs.shape[1]} "
                f"columns, rhs has {rhs.shape[0]} rows{hint}"
            )
        object.__setattr__(self, "lhs", lhs)
        object.__setattr__(self, "rhs", rhs)

    @property
    def k(self) -> int:
        """The inner (contraction) dimension K."""
        return int(self.rhs.shape[0])


def load_matmul_data(lhs: str | Path, rhs: str | Path, *, name: str | None = None) -> MatmulData:
    """`MatmulData` from two ``.npy`` files (`load_array`); ``name`` defaults to ``"LHS.npy @ RHS.npy"``.

    Example:
      >>> import tempfile
      >>> folder = Path(tempfile.mkdtemp())
      >>> np.save(folder / "x.npy", np.ones((2, 3, 8), np.float32)); np.save(folder / "w.npy", np.ones((8, 4)))
      >>> data = load_matmul_data(folder / "x.npy", folder / "w.npy")
      >>> data.name, data.lhs.shape, data.rhs.dtype.name, data.k
      ('x.npy @ w.npy', (6, 8), 'float32', 8)
    """
    lhs, rhs = Path(lhs), Path(rhs)
    return MatmulData(
        name=name or f"{lhs.name} @ {rhs.name}",
        lhs=load_array(lhs, what="lhs"),
        rhs=load_array(rhs, what="rhs"),
    )
