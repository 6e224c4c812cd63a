"""Accuracy of quantized matmuls: the error of each matmul format's product against a float64 reference.

For a matmul format (a name of `MATMUL_FORMATS`: the block formats, and fp32, bf16 and fp16; the
command line's ``--block-formats``), a distribution and an inner dimension ``K`` (``size``), a float32 ``M x K`` matrix
``A`` and a ``K x N`` matrix ``B`` are drawn from the distribution (`matmul_inputs`; square,
``M = N = K``, unless ``outer`` sets ``M = N``), and the format's emulated product ``C``
(`fpemu.scaled.matmul`) is compared with the float64 product of the *unquantized* float32 inputs,
``C64 = float64(A) @ float64(B)`` (`reference_matmul`). A user's own operands (`MatmulData`, e.g.
from ``.npy`` files) are measured the same way, over prefixes of their inner dimension.
docs/accuracy.md is the contract and holds the measured table; bench/accuracy.py regenerates it.

The distributions (`DISTRIBUTIONS`: Gaussian, Student-t with 3 degrees of freedom, activations with
LLM-style outlier channels) are those of `fpemu.tools.data`. The formats (`MATMUL_FORMATS`) are those
of `fpemu.scaled.matmul`, whose docstring says how each quantizes its operands: ``"fp32"`` (the
baseline: float32 accumulation alone), ``"bf16"`` and ``"fp16"`` (operands rounded, float32
accumulation), the per-tensor FP8 formats and the block-scaled `fpemu.scaled` formats (blocks along
the contraction dimension).

The measures (`MatmulError`): ``relative_error = ||C - C64||_F / ||C64||_F``,
``max_abs_error = max|C - C64| / max|C64|`` (the largest error relative to the largest reference
magnitude), and ``qsnr_db = -20 log10(relative_error)`` (`fpemu.scaled.qsnr_from_relative_error`,
the float64 form of `fpemu.scaled.qsnr`, whose float32 sums would round the reference itself by
2**-24, as much as the fp32 row's whole error). They are computed in float64. A product with any
infinite or NaN element is reported as it is: both errors are +inf and the QSNR is -inf.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

import fpemu
from fpemu.deprecation import renamed_keyword, warn_renamed
from fpemu.testing import text_table
from fpemu.tools import choices
from fpemu.tools.data import DISTRIBUTIONS, STUDENT_T_DF, MatmulData, matmul_operands

__all__ = [
    "DISTRIBUTIONS",
    "MATMUL_FORMATS",
    "SIZES",
    "MatmulData",
    "MatmulError",
    "data_sizes",
    "markdown_table",
    "matmul_accuracy",
    "matmul_error",
    "matmul_inputs",
    "reference_matmul",
]

#: The formats measured, in table order: those of `fpemu.scaled.matmul` (the same tuple).
MATMUL_FORMATS: tuple[str, ...] = fpemu.scaled.MATMUL_FORMATS

#: Student's t degrees of freedom of ``"heavy_tailed"`` (`fpemu.tools.data.STUDENT_T_DF`).
HEAVY_TAILED_DF = STUDENT_T_DF

#: The default sizes of `matmul_accuracy`: square ``(n x n) @ (n x n)`` products.
SIZES: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)

_ROWS_PER_CHUNK = 1024  # the error sums run over row blocks, so that float64 temporaries stay small


# -- names -------------------------------------------------------------------------------------------


def _choice(value: Any, valid: tuple[str, ...], what: str) -> str:
    """``value`` if it is one of ``valid``; else a ValueError naming the closest (prefixes first) and listing all."""
    if isinstance(value, str) and value in valid:
        return value
    raise ValueError(choices.unknown(what, [str(value)], valid))


def _size(value: Any, what: str = "size") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive int (the K of an (M x K) @ (K x N) product), got {value!r}")
    return int(value)


def _seed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"seed must be a non-negative int, got {value!r}")
    return int(value)


def _outer(value: Any) -> int | None:
    return None if value is None else _size(value, "outer")


def _names(values: Any, valid: tuple[str, ...], what: str) -> tuple[str, ...]:
    """None (all), one name, or an iterable of names, validated, in the given order."""
    if values is None:
        return valid
    if isinstance(values, str):
        values = (values,)
    return tuple(_choice(v, valid, what) for v in values)


def _data_list(data: Any) -> tuple[MatmulData, ...]:
    if data is None:
        return ()
    items = (data,) if isinstance(data, MatmulData) else tuple(data)
    for item in items:
        if not isinstance(item, MatmulData):
            raise TypeError(f"data must be MatmulData objects (fpemu.tools.data), got {type(item).__name__}")
    return items


def _prefix(data: MatmulData, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` steps of the contraction: ``lhs[:, :k]`` and ``rhs[:k]``."""
    return data.lhs[:, :k], data.rhs[:k]


def data_sizes(data: MatmulData, sizes: Iterable[int]) -> tuple[int, ...]:
    """The inner dimensions measured on ``data``: the ``sizes`` below its ``K``, and ``K`` itself, ascending.

    Each is a prefix of the contraction: ``lhs[:, :k] @ rhs[:k, :]``.

    Example:
      >>> d = MatmulData(name="d", lhs=np.ones((2, 300), np.float32), rhs=np.ones((300, 2), np.float32))
      >>> data_sizes(d, (64, 256, 1024))
      (64, 256, 300)
    """
    return tuple(sorted({_size(s) for s in sizes if _size(s) < data.k} | {data.k}))


# -- the measures ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulError:
    """The error of one format's ``(m x size) @ (size x n)`` product against the float64 reference.

    Attributes:
      matmul_format: A name from `MATMUL_FORMATS` (``recipe``, its name of earlier releases, warns).
      distribution: A name from `DISTRIBUTIONS`, or the name of the user's `MatmulData`.
      size: ``K``, the inner (contraction) dimension: each output sums ``K`` products.
      m, n: The outer dimensions: ``A`` is ``m x K``, ``B`` is ``K x n``.
      relative_error: ``||C - C64||_F / ||C64||_F`` (Frobenius norms), computed in float64.
      max_abs_error: ``max|C - C64| / max|C64|``: the largest absolute error, relative to the
        largest reference magnitude (a max-norm relative error, not an element-wise relative one).
      qsnr_db: ``-20 log10(relative_error)`` in dB: higher is better, about 6 dB per bit.

    A product ``C`` with any infinite or NaN element gives ``relative_error = max_abs_error = inf``
    and ``qsnr_db = -inf``. A reference of all zeros gives 0 for a zero ``C`` and inf otherwise.
    """

    matmul_format: str
    distribution: str
    size: int
    m: int
    n: int
    relative_error: float
    max_abs_error: float
    qsnr_db: float

    @property
    def recipe(self) -> str:
        """Deprecated: `matmul_format` (the name of an earlier release; warns)."""
        warn_renamed("fpemu.tools.accuracy.MatmulError.recipe", "fpemu.tools.accuracy.MatmulError.matmul_format")
        return self.matmul_format

    @classmethod
    @renamed_keyword("recipe", "matmul_format", "fpemu.tools.accuracy.MatmulError.from_product")
    def from_product(
        cls, c: Any, reference: np.ndarray, *, matmul_format: str, distribution: str, size: int
    ) -> MatmulError:
        """The measures of a computed product ``c`` against ``reference`` (float64, same shape ``m x n``).

        The sums run in float64 over blocks of rows (``c`` is widened exactly).

        Example:
          >>> ref = np.array([[3.0, -4.0]])
          >>> e = MatmulError.from_product(np.array([[3.0, -4.5]], np.float32), ref, matmul_format="fp32",
          ...                              distribution="gaussian", size=2)
          >>> e.relative_error, e.max_abs_error, round(e.qsnr_db, 2), (e.m, e.n)
          (0.1, 0.125, 20.0, (1, 2))
        """
        c = np.asarray(c)
        reference = np.asarray(reference)
        if c.shape != reference.shape:
            raise ValueError(f"c and reference must have the same shape, got {c.shape} and {reference.shape}")
        if reference.dtype != np.float64:
            raise TypeError(f"reference must be float64, got {reference.dtype}")
        c2 = c.reshape(-1, c.shape[-1]) if c.ndim > 1 else c.reshape(1, -1)
        r2 = reference.reshape(c2.shape)
        err2 = ref2 = err_max = ref_max = 0.0
        finite = True
        for start in range(0, c2.shape[0], _ROWS_PER_CHUNK):
            block = c2[start : start + _ROWS_PER_CHUNK].astype(np.float64)
            if not np.isfinite(block).all():
                finite = False
                break
            ref = r2[start : start + _ROWS_PER_CHUNK]
            diff = block - ref
            err2 += float(np.sum(diff * diff))
            ref2 += float(np.sum(ref * ref))
            if diff.size:
                err_max = max(err_max, float(np.max(np.abs(diff))))
                ref_max = max(ref_max, float(np.max(np.abs(ref))))
        if not finite:
            rel = max_rel = math.inf
        else:
            rel = _ratio(math.sqrt(err2), math.sqrt(ref2))
            max_rel = _ratio(err_max, ref_max)
        return cls(
            matmul_format=matmul_format,
            distribution=distribution,
            size=size,
            m=c2.shape[0],
            n=c2.shape[1],
            relative_error=rel,
            max_abs_error=max_rel,
            qsnr_db=fpemu.scaled.qsnr_from_relative_error(rel),
        )


# ``MatmulError(recipe=...)``, the field's name of an earlier release, is taken for one release.
MatmulError.__init__ = renamed_keyword("recipe", "matmul_format", "fpemu.tools.accuracy.MatmulError")(  # type: ignore[method-assign]
    MatmulError.__init__
)


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


# -- inputs and reference ----------------------------------------------------------------------------


def matmul_inputs(
    distribution: str, size: int, *, seed: int = 0, outer: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The operands ``A`` (``M x size``) and ``B`` (``size x N``), float32; ``M = N = outer or size``.

    `fpemu.tools.data.matmul_operands` draws them: ``"gaussian"`` standard normal values,
    ``"heavy_tailed"`` Student's t with 3 degrees of freedom, ``"outlier_channels"`` Gaussian
    activations ``A`` with a few channels (columns, along K) scaled by 10 to 100, and Gaussian weights
    ``B``. The generator is NumPy's PCG64 seeded with ``[seed, distribution index, size]`` for square
    products and ``[seed, distribution index, size, outer]`` otherwise: each (distribution, shape,
    seed) has its own independent stream, and the same arguments give the same matrices on every
    machine.

    Raises:
      ValueError: for an unknown distribution (listing them), a size or outer below 1 or a negative seed.

    Example:
      >>> a, b = matmul_inputs("heavy_tailed", 4)
      >>> a.shape, b.dtype.name
      ((4, 4), 'float32')
      >>> [x.shape for x in matmul_inputs("outlier_channels", 64, outer=8)]
      [(8, 64), (64, 8)]
    """
    distribution = _choice(distribution, DISTRIBUTIONS, "distribution")
    size, seed, outer = _size(size), _seed(seed), _outer(outer)
    entropy = [seed, DISTRIBUTIONS.index(distribution), size]
    if outer is not None and outer != size:
        entropy.append(outer)
    rng = np.random.default_rng(entropy)
    mn = size if outer is None else outer
    return matmul_operands(distribution, mn, size, mn, rng)


def reference_matmul(a: Any, b: Any) -> np.ndarray:
    """``float64(a) @ float64(b)`` with NumPy (BLAS): the reference every format is measured against.

    The float32 inputs are widened exactly and every product of two float32 values is exact in
    float64; only the float64 summation rounds, with an error about ``2**-29`` times smaller than
    float32 accumulation's, so it is the exact product for the purpose of these measures.

    Example:
      >>> a = np.array([[1.0, 2**-24, 2**-24]], np.float32)   # 1 + 2**-24 rounds back to 1 in float32
      >>> reference_matmul(a, np.ones((3, 1), np.float32)).tolist() == [[1 + 2**-23]]
      True
    """
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))


# -- the measurements --------------------------------------------------------------------------------


def _measure(
    matmul_format: str, distribution: str, size: int, a: np.ndarray, b: np.ndarray, ref: np.ndarray
) -> MatmulError:
    c = np.asarray(fpemu.scaled.matmul(a, b, cast("fpemu.scaled.MatmulFormat", matmul_format)))  # a checked name
    return MatmulError.from_product(c, ref, matmul_format=matmul_format, distribution=distribution, size=size)


@renamed_keyword("recipe", "matmul_format", "fpemu.tools.accuracy.matmul_error")
def matmul_error(
    matmul_format: str, distribution: str, size: int, *, seed: int = 0, outer: int | None = None
) -> MatmulError:
    """The error of one format's product on `matmul_inputs` (``size`` is K; square unless ``outer``).

    ``matmul_format`` is a name from `MATMUL_FORMATS` (or an alias `fpemu.scaled.get_block_format` takes
    for one); ``recipe=`` is its deprecated name.

    Raises:
      ValueError: for an unknown matmul format or distribution (listing the valid ones), a size or outer
        below 1 or a negative seed.

    Example:
      >>> e = matmul_error("bf16", "gaussian", 64)
      >>> e.matmul_format, e.size, 2**-12 < e.relative_error < 2**-7
      ('bf16', 64, True)
    """
    matmul_format = choices.matmul_format(matmul_format, "matmul format")
    distribution = _choice(distribution, DISTRIBUTIONS, "distribution")
    size, seed, outer = _size(size), _seed(seed), _outer(outer)
    a, b = matmul_inputs(distribution, size, seed=seed, outer=outer)
    return _measure(matmul_format, distribution, size, a, b, reference_matmul(a, b))


@renamed_keyword("recipes", "matmul_formats", "fpemu.tools.accuracy.matmul_accuracy")
def matmul_accuracy(
    matmul_formats: Iterable[str] | str | None = None,
    distributions: Iterable[str] | str | None = None,
    sizes: Iterable[int] | int = SIZES,
    *,
    seed: int = 0,
    outer: int | None = None,
    data: MatmulData | Sequence[MatmulData] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[MatmulError]:
    """`matmul_error` for every matmul format, distribution and size, each reference computed once.

    Args:
      matmul_formats: Names from `MATMUL_FORMATS` (default: all of them), or one name; ``recipes=`` is
        its deprecated name.
      distributions: Names from `DISTRIBUTIONS` (default: all of them; ``()`` for none, e.g. to
        measure only ``data``), or one name.
      sizes: Positive ints, the inner dimensions K (default `SIZES`, 256 to 8192).
      seed: The seed of `matmul_inputs`.
      outer: ``M = N`` of every drawn product; None: square (``M = N = K``).
      data: A user's operands (`MatmulData`), or several: each is measured at the ``sizes`` below its
        own K and at K (`data_sizes`), on prefixes ``lhs[:, :k] @ rhs[:k, :]``; its rows carry its
        name as ``distribution``.
      progress: Called with one status line (a str, with timings) after each reference and each
        product, e.g. to print them; None: silent.

    Returns:
      One `MatmulError` per (matmul format, distribution or data, size), ordered by matmul format (in the order
      given), then distribution (then data), then size (as given; ascending for data). Every argument
      is validated before anything is computed.

    The inputs and the float64 reference of each (distribution, size) are computed once and shared
    by all matmul formats; at 8192 the reference takes most of a minute on two CPU cores.
    """
    matmul_formats = (
        MATMUL_FORMATS
        if matmul_formats is None
        else tuple(
            choices.matmul_format(r, "matmul format")
            for r in ((matmul_formats,) if isinstance(matmul_formats, str) else matmul_formats)
        )
    )
    distributions = _names(distributions, DISTRIBUTIONS, "distribution")
    size_list = tuple(dict.fromkeys(_size(s) for s in ((sizes,) if isinstance(sizes, (int, np.integer)) else sizes)))
    seed, outer = _seed(seed), _outer(outer)
    datasets = _data_list(data)
    if not size_list and not datasets:
        raise ValueError("no sizes given")
    names = [*distributions, *(d.name for d in datasets)]
    if len(set(names)) < len(names):
        raise ValueError(f"the distributions and data names must be distinct, got {names}")
    say = progress or (lambda line: None)
    results: dict[tuple[str, str, int], MatmulError] = {}
    order: list[tuple[str, int]] = []

    def run(name: str, size: int, make: Callable[[], tuple[np.ndarray, np.ndarray]]) -> None:
        t0 = time.perf_counter()
        a, b = make()
        ref = reference_matmul(a, b)
        say(f"{name} {size}: inputs and float64 reference in {time.perf_counter() - t0:.1f} s")
        for matmul_format in matmul_formats:
            t0 = time.perf_counter()
            row = _measure(matmul_format, name, size, a, b, ref)
            results[matmul_format, name, size] = row
            say(
                f"{name} {size} {matmul_format}: relative error {row.relative_error:.3g}, "
                f"QSNR {row.qsnr_db:.2f} dB ({time.perf_counter() - t0:.1f} s)"
            )
        order.append((name, size))

    for distribution in distributions:
        for size in size_list:
            run(distribution, size, functools.partial(matmul_inputs, distribution, size, seed=seed, outer=outer))
    for dataset in datasets:
        for size in data_sizes(dataset, size_list):
            run(dataset.name, size, functools.partial(_prefix, dataset, size))
    return [results[r, name, size] for r in dict.fromkeys(matmul_formats) for name, size in order]


# -- the table ---------------------------------------------------------------------------------------

_METRICS = ("relative_error", "max_abs_error", "qsnr_db")


def _cell(value: float, metric: str) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.1f}" if metric == "qsnr_db" else f"{value:.2e}"


def markdown_table(rows: list[MatmulError], *, metric: str = "relative_error") -> str:
    """One Markdown table: a row per matmul format, a column per (distribution, size).

    Cells hold ``metric``: ``"relative_error"`` (the default, ``||C - C64||_F / ||C64||_F``, as
    ``1.23e-03``), ``"max_abs_error"`` (same format) or ``"qsnr_db"`` (dB, one decimal). Block
    formats are ordered as in `MATMUL_FORMATS`, distributions as in `DISTRIBUTIONS`, sizes ascending; a
    combination missing from ``rows`` is shown as ``-``.

    Raises:
      ValueError: for an unknown metric, or two rows for the same (matmul format, distribution, size).

    Example:
      >>> rows = [MatmulError(matmul_format="bf16", distribution="gaussian", size=64, m=64, n=64,
      ...                     relative_error=0.00225, max_abs_error=0.0011, qsnr_db=52.96)]
      >>> print(markdown_table(rows))
      | matmul format | gaussian 64 |
      |---|---:|
      | `bf16` | 2.25e-03 |
    """
    metric = _choice(metric, _METRICS, "metric")
    cells: dict[tuple[str, str, int], float] = {}
    for row in rows:
        key = (row.matmul_format, row.distribution, row.size)
        if key in cells:
            raise ValueError(
                f"two rows for matmul format {row.matmul_format!r}, distribution {row.distribution!r}, size {row.size}"
            )
        cells[key] = getattr(row, metric)

    def order(names: set[str], known: tuple[str, ...]) -> list[str]:
        return sorted(names, key=lambda n: (known.index(n), "") if n in known else (len(known), n))

    row_names = order({k[0] for k in cells}, MATMUL_FORMATS)
    columns = [(d, s) for d in order({k[1] for k in cells}, DISTRIBUTIONS) for s in sorted({k[2] for k in cells})]
    columns = [(d, s) for d, s in columns if any((r, d, s) in cells for r in row_names)]
    header = ["matmul format", *(f"{d} {s}" for d, s in columns)]
    table = [
        [f"`{r}`", *(_cell(cells[r, d, s], metric) if (r, d, s) in cells else "-" for d, s in columns)]
        for r in row_names
    ]
    return text_table(table, header, align="l" + "r" * len(columns), markdown=True)


def __getattr__(name: str) -> Any:
    """``MATMUL_RECIPES``, this module's name of `MATMUL_FORMATS` in earlier releases: kept for one
    release, with a `DeprecationWarning`."""
    if name == "MATMUL_RECIPES":
        warn_renamed("fpemu.tools.accuracy.MATMUL_RECIPES", "fpemu.tools.accuracy.MATMUL_FORMATS")
        return MATMUL_FORMATS
    raise AttributeError(f"module 'fpemu.tools.accuracy' has no attribute {name!r}")
