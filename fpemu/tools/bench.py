"""The timing engine and the representative subset behind ``fpemu bench``.

`run` times a fixed list of rows (`plan` lists them): `fpemu.quantize` per format and rounding
mode, its peers (`lax.reduce_precision`, jitted astype round trips, the ml_dtypes NumPy round trip,
gfloat when it is importable), `fpemu.encode`/`fpemu.pack`, `fpemu.scaled.quantize_dequantize`,
matmuls, the Pallas kernel, and a NumPy copy as the memory-bandwidth reference. Every JAX row is
jitted; `timeit` calls it twice before timing (the first call compiles), ends every call in
``block_until_ready`` and reports the median and the minimum of the timed calls.

Each row is a `BenchRow`; `BenchResult.to_json` gives the stable JSON schema that docs/benchmarks.md
documents. This module has no pytest dependency: ``bench/`` is the pytest-benchmark suite with more
rows and statistics, this is the quick, self-contained subset for tracking over time.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import jax
import jax.numpy as jnp
import jaxlib
import ml_dtypes
import numpy as np
from jax import lax

import fpemu
from fpemu.deprecation import renamed_keyword, warn_renamed
from fpemu.tools import choices

SCHEMA = "fpemu.bench/1"
SEED = 20261121
SPREAD_EVERY = 16  # every 16th input element is a random finite float32 bit pattern (the whole range)

Kind = Literal["fpemu", "peer", "reference"]

# Formats of the quantize groups, and the extra formats of full mode; the block formats (`fpemu.scaled`) likewise.
QUICK_FORMATS = ("e4m3fn", "e5m2", "bf16", "e2m1fn")
FULL_FORMATS = (*QUICK_FORMATS, "fp16", "e3m2fn")
QUICK_BLOCK_FORMATS = ("mxfp8_e4m3", "nvfp4")
FULL_BLOCK_FORMATS = ("mxfp8_e4m3", "mxfp4", "nvfp4")
# gfloat's name for each format (gfloat.formats.format_info_<name>).
_GFLOAT_FORMATS = {
    "e4m3fn": "ocp_e4m3",
    "e5m2": "ocp_e5m2",
    "bf16": "bfloat16",
    "fp16": "binary16",
    "e2m1fn": "ocp_e2m1",
    "e3m2fn": "ocp_e3m2",
}
_MATMUL_BASELINE = "matmul/fpemu-e4m3fn"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Sizes and repeat rules of one run (`QUICK` or `FULL`)."""

    mode: Literal["quick", "full"]
    elements: int  # float32 elements of every elementwise row
    matmul_size: int  # n of the n x n x n matmul rows
    interpret_elements: int  # elements of the Pallas row in interpret mode (CPU)
    warmup: int  # untimed calls before timing; the first one compiles
    min_repeats: int  # timed calls, at least
    max_repeats: int  # timed calls, at most
    max_time: float  # seconds of timed calls per row, beyond min_repeats


QUICK = Settings(
    mode="quick", elements=1 << 18, matmul_size=256, interpret_elements=1 << 16, warmup=2, min_repeats=5,
    max_repeats=50, max_time=0.05,
)  # fmt: skip
FULL = Settings(
    mode="full", elements=1 << 24, matmul_size=2048, interpret_elements=1 << 20, warmup=2, min_repeats=5,
    max_repeats=200, max_time=1.0,
)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """What `timeit` measured, in seconds."""

    median_s: float
    min_s: float
    repeats: int  # timed calls
    first_call_s: float  # the first call (it compiles), not part of the statistics


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BenchRow:
    """One timed row. ``to_dict`` is its JSON object (docs/benchmarks.md, "JSON schema").

    ``bytes_moved`` counts the input read and the output written once (float32 in and out: 8 bytes per
    element; intermediates and temporaries are not counted), so ``gb_per_s`` is an effective bandwidth.
    Ratios are per element: ``ratio_to_copy`` is ``ns_per_element`` over the NumPy copy's and
    ``ratio_to_fpemu`` over the ``baseline`` row's (equal to the ratio of median times where the rows
    have the same number of elements, as every elementwise row has, except the Pallas interpret row).
    """

    name: str  # "group/row", unique and stable across runs
    group: str  # a format, a block format, "matmul" or "reference"
    row: str  # what runs, e.g. "fpemu-nearest_even", "reduce_precision"
    what: str  # the timed code, in words
    kind: Kind  # fpemu's own code, a peer library, or a reference point
    elements: int  # elements per call (multiply-adds for matmul rows)
    shape: tuple[int, ...]  # the input shape (per operand for matmuls)
    bytes_moved: int
    repeats: int
    first_call_s: float
    median_s: float
    min_s: float
    ns_per_element: float  # median
    gb_per_s: float  # bytes_moved / median_s / 1e9
    ratio_to_copy: float
    baseline: str  # the fpemu row this row is compared to (itself for a baseline)
    ratio_to_fpemu: float

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["shape"] = list(self.shape)
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BenchResult:
    """A whole run: ``meta`` (device, versions, settings, skipped rows) and the rows in run order."""

    meta: dict[str, Any]
    rows: tuple[BenchRow, ...]

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "rows": [row.to_dict() for row in self.rows]}

    def row(self, name: str) -> BenchRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no row {name!r}; rows: {', '.join(r.name for r in self.rows)}")


class Skip(Exception):
    """Raised by a case's ``make`` when the row cannot run here; the message says why."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """A row to time: ``make()`` builds the (warm-up free) zero-argument call, or raises `Skip`."""

    group: str
    row: str
    what: str
    kind: Kind
    elements: int
    shape: tuple[int, ...]
    bytes_moved: int
    baseline: str
    make: Callable[[], Callable[[], Any]]
    copy: str = "reference/numpy_copy"  # the NumPy copy row of ratio_to_copy (the same size, for elementwise rows)

    @property
    def name(self) -> str:
        return f"{self.group}/{self.row}"


# -- timing -----------------------------------------------------------------------------------------


def timeit(
    fn: Callable[[], Any],
    *,
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 100,
    max_time: float = 0.5,
) -> Timing:
    """Time ``fn()`` the way every row is timed.

    ``fn`` is called ``warmup`` times untimed (the first call of a jitted function compiles; its time
    is reported as ``first_call_s``), then at least ``min_repeats`` times, and more while the timed
    calls have taken less than ``max_time`` seconds, up to ``max_repeats``. Every call's result goes
    through `jax.block_until_ready` inside the timed region (NumPy results pass through).

    Example:
      >>> t = timeit(lambda: sum(range(1000)), min_repeats=3, max_repeats=3)
      >>> t.repeats, 0 < t.min_s <= t.median_s
      (3, True)
    """
    if warmup < 1 or min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"need warmup >= 1 and 1 <= min_repeats <= max_repeats, got {warmup=}, {min_repeats=}, "
                         f"{max_repeats=}")  # fmt: skip
    start = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        jax.block_until_ready(fn())
    times: list[float] = []
    while len(times) < min_repeats or (len(times) < max_repeats and sum(times) < max_time):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return Timing(median_s=statistics.median(times), min_s=min(times), repeats=len(times), first_call_s=first)


# -- inputs -----------------------------------------------------------------------------------------


def make_input(n: int, seed: int = SEED) -> np.ndarray:
    """``n`` float32 values: standard normal * 100, every 16th a random finite float32 (any exponent).

    Made as the ``bench/`` suite's input is, so subnormals, overflow and every exponent occur.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(100)
    count = len(x[::SPREAD_EVERY])
    bits = rng.integers(0, 1 << 32, size=count, dtype=np.uint64).astype(np.uint32)
    nonfinite = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bits = np.where(nonfinite, bits & ~np.uint32(1 << 30), bits)  # exponent field 0xff -> 0x7f: finite
    x[::SPREAD_EVERY] = bits.view(np.float32)
    return x


# -- the rows ---------------------------------------------------------------------------------------


def _jitted(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    compiled = jax.jit(fn)
    return lambda: compiled(*args)


def _quantize_call(fmt: str, mode: fpemu.Rounding, x: jax.Array, key: jax.Array) -> Callable[[], Any]:
    if mode == "stochastic":
        return _jitted(lambda v, k: fpemu.quantize(v, fmt, rounding="stochastic", key=k), x, key)
    return _jitted(lambda v: fpemu.quantize(v, fmt, rounding=mode), x)


def gfloat_version() -> str | None:
    """gfloat's version if it is importable, else None."""
    try:
        import gfloat
    except ImportError:
        return None
    try:
        return importlib.metadata.version("gfloat")
    except importlib.metadata.PackageNotFoundError:  # importable but not installed (a source checkout)
        return getattr(gfloat, "__version__", "unknown")


def _gfloat_call(fmt: str, x: jax.Array) -> Callable[[], Any]:
    try:
        import gfloat
        import gfloat.formats
    except ImportError:
        raise Skip("gfloat is not installed") from None
    fi = getattr(gfloat.formats, f"format_info_{_GFLOAT_FORMATS[fmt]}", None)
    if fi is None:
        raise Skip(f"this gfloat has no format_info_{_GFLOAT_FORMATS[fmt]}")
    attempts = (lambda v: gfloat.round_ndarray(fi, v), lambda v: gfloat.round_ndarray(fi, v, np=jnp))
    errors = []
    for attempt in attempts:
        call = _jitted(attempt, x)
        try:
            jax.block_until_ready(call())
        except Exception as error:
            errors.append(f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}")
            continue
        return call
    raise Skip(f"gfloat.round_ndarray does not run under jax.jit here: {' / '.join(errors)}"[:400])


def _dtype(fmt: str) -> np.dtype:
    """The NumPy / ml_dtypes dtype of a format, or `Skip` for a format without one (tf32, P3109, int8_ocp)."""
    dtype = fpemu.get_format(fmt).dtype
    if dtype is None:
        raise Skip(f"{fmt} has no NumPy/ml_dtypes dtype to cast to")
    return dtype


def _astype_call(fmt: str, x: jax.Array, backend: str) -> Callable[[], Any]:
    f = fpemu.get_format(fmt)
    dtype = _dtype(fmt)
    if f.bits == 6 and backend == "cpu":  # not even tried: XLA prints its LLVM error to stderr
        raise Skip(f"float6 casts (x.astype({dtype.name})) do not compile on XLA:CPU")
    call = _jitted(lambda v: v.astype(dtype).astype(jnp.float32), x)
    try:
        jax.block_until_ready(call())  # compiles; float6 casts do not compile on XLA:CPU
    except Exception as error:
        raise Skip(f"x.astype({dtype.name}) does not compile on {jax.default_backend()}: "
                   f"{type(error).__name__}") from None  # fmt: skip
    return call


def _ml_dtypes_call(fmt: str, x_np: np.ndarray) -> Callable[[], Any]:
    dtype = _dtype(fmt)

    def call():
        with np.errstate(over="ignore", invalid="ignore"):  # casts that overflow warn in NumPy
            return x_np.astype(dtype).astype(np.float32)

    return call


def _kernels() -> Any:
    """`fpemu.kernels`, loaded on first use (it imports Pallas), or `Skip` with the reason it cannot load."""
    try:
        return fpemu.kernels
    except ImportError as error:
        raise Skip(f"fpemu.kernels is not importable: {error}") from None


def _pallas_call(x: jax.Array, interpret: bool) -> Callable[[], Any]:
    kernels = _kernels()
    return _jitted(lambda v: kernels.quantize_kernel(v, "e4m3fn", interpret=interpret), x)


def _native_fp8_dot(a: jax.Array, b: jax.Array) -> jax.Array:
    f8 = jnp.float8_e4m3fn
    return lax.dot_general(a.astype(f8), b.astype(f8), (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _checked(call: Callable[[], Any], what: str) -> Callable[[], Any]:
    """``call`` if it compiles and runs here, else `Skip` with the reason."""
    try:
        jax.block_until_ready(call())
    except Exception as error:
        first_line = (str(error).splitlines() or [""])[0]
        raise Skip(
            f"{what} does not run on {jax.default_backend()}: {type(error).__name__}: {first_line}"[:300]
        ) from None
    return call


def _kernel_matmul_call(a: jax.Array, b: jax.Array) -> Callable[[], Any]:
    kernels = _kernels()
    matmul = _jitted(lambda u, v: kernels.matmul_kernel(u, v, lhs="e4m3fn", rhs="e4m3fn"), a, b)
    return _checked(matmul, "the Pallas matmul")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """What a run times (`select` fills it in): formats, block formats, rounding modes and sizes, all canonical names.

    ``recipes``, the name of `block_formats` in earlier releases, still works for one release (as a
    keyword and as an attribute) and warns.
    """

    formats: tuple[str, ...]  # the quantize groups
    block_formats: tuple[str, ...]  # fpemu.scaled block formats: a scaled-qdq row each, a matmul row for matmul formats
    modes: tuple[str, ...]  # rounding modes of the quantize rows; nearest_even (the baseline) comes first
    sizes: tuple[int, ...]  # elements of the elementwise rows
    matmul_sizes: tuple[int, ...]  # n of the n x n x n matmul rows

    @property
    def recipes(self) -> tuple[str, ...]:
        """Deprecated: `block_formats` (the name of an earlier release; warns)."""
        warn_renamed("fpemu.tools.bench.Selection.recipes", "fpemu.tools.bench.Selection.block_formats")
        return self.block_formats


# ``Selection(recipes=...)``, the field's name of an earlier release, is taken for one release.
Selection.__init__ = renamed_keyword("recipes", "block_formats", "fpemu.tools.bench.Selection")(  # type: ignore[method-assign]
    Selection.__init__
)


def _positive_sizes(values: Any, what: str) -> tuple[int, ...]:
    values = (values,) if isinstance(values, (int, np.integer)) else tuple(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in values):
        raise ValueError(f"{what} must be positive integers, got {list(values)!r}")
    return tuple(dict.fromkeys(int(v) for v in values))


@renamed_keyword("recipes", "block_formats", "fpemu.tools.bench.select")
def select(
    settings: Settings,
    *,
    formats: Sequence[fpemu.FormatLike] | None = None,
    block_formats: Sequence[Any] | None = None,
    modes: Sequence[str] | None = None,
    sizes: Sequence[int] | int | None = None,
    matmul_sizes: Sequence[int] | int | None = None,
) -> Selection:
    """The rows to time: the defaults of ``settings`` (`QUICK` or `FULL`) where an argument is None.

    Args:
      formats: formats of the quantize groups (default `QUICK_FORMATS` or `FULL_FORMATS`).
      block_formats: `fpemu.scaled` block formats, names (aliases accepted) or `fpemu.scaled.BlockFormat`
        objects (default `QUICK_BLOCK_FORMATS` or `FULL_BLOCK_FORMATS`); ``recipes=`` is its deprecated name.
      modes: rounding modes of ``fpemu.quantize`` (default nearest_even and stochastic, and toward_zero
        in full mode); nearest_even always runs first: it is every group's baseline.
      sizes: elements per elementwise row (default ``settings.elements``); several sizes time every
        elementwise row at each, and the row names get ``@SIZE``.
      matmul_sizes: ``n`` of the matmul rows (default ``settings.matmul_size``), likewise.

    Raises:
      fpemu.UnknownFormatError, fpemu.scaled.UnknownBlockFormatError: for an unknown format or block format.
      ValueError: for a format wider than float32 (fp64), an unknown rounding mode (listing them), or a
        size below 1.

    Example:
      >>> s = select(QUICK, formats=["e2m1fn"], modes=["toward_zero"], sizes=[1024, 4096])
      >>> s.formats, s.modes, s.sizes, s.matmul_sizes
      (('e2m1fn',), ('nearest_even', 'toward_zero'), (1024, 4096), (256,))
    """
    full = settings.mode == "full"
    fmts = tuple(dict.fromkeys(fpemu.get_format(f).name for f in (formats if formats is not None else
                                                                   FULL_FORMATS if full else QUICK_FORMATS)))  # fmt: skip
    if not fmts:
        raise ValueError("no formats given")
    fp32 = fpemu.get_format("fp32")
    wide = [f for f in fmts if not fpemu.get_format(f).fits_in(fp32)]
    if wide:
        fitting = [f.name for f in fpemu.formats() if f.fits_in(fp32)]
        raise ValueError(f"the bench rounds float32 inputs: {', '.join(wide)} does not fit in float32; "
                         f"choose from: {', '.join(fitting)}")  # fmt: skip
    default_block_formats = FULL_BLOCK_FORMATS if full else QUICK_BLOCK_FORMATS
    chosen = tuple(dict.fromkeys(fpemu.scaled.get_block_format(b).name for b in (default_block_formats
                                 if block_formats is None else block_formats)))  # fmt: skip
    default_modes = ("toward_zero", "stochastic") if full else ("stochastic",)
    mode_list = choices.check_names("rounding mode", list(default_modes if modes is None else modes) or
                                    ["nearest_even"], fpemu.ROUNDING_MODES)  # fmt: skip
    return Selection(
        formats=fmts,
        block_formats=chosen,
        modes=tuple(dict.fromkeys(["nearest_even", *mode_list])),
        sizes=_positive_sizes(settings.elements if sizes is None else sizes, "sizes"),
        matmul_sizes=_positive_sizes(settings.matmul_size if matmul_sizes is None else matmul_sizes, "matmul sizes"),
    )


def _dtype_name(fmt: str) -> str:
    dtype = fpemu.get_format(fmt).dtype
    return "(no dtype)" if dtype is None else dtype.name


def _element_name(block_format: str) -> str:
    element = fpemu.scaled.get_block_format(block_format).element
    return element if isinstance(element, str) else element.name


def plan(
    settings: Settings,
    *,
    selection: Selection | None = None,
    x_np: np.ndarray | None = None,
    backend: str | None = None,
) -> list[Case]:
    """The rows of a run, in the order they run.

    Args:
      settings: `QUICK` or `FULL`.
      selection: what to time (`select`); ``select(settings)`` when None.
      x_np: the elementwise input of a run with one size (`make_input` when None); its device copy is
        made lazily.
      backend: JAX's default backend when None; it decides how the Pallas row runs.
    """
    selection = selection or select(settings)
    backend = backend or jax.default_backend()
    if x_np is not None and (len(selection.sizes) != 1 or x_np.shape != (selection.sizes[0],)):
        raise ValueError(f"x_np must have the shape ({selection.sizes[0]},) of a run with one size, got {x_np.shape}")
    copy = "reference/numpy_copy" + (f"@{selection.sizes[0]}" if len(selection.sizes) > 1 else "")
    cases: list[Case] = []
    for n in selection.sizes:
        suffix = f"@{n}" if len(selection.sizes) > 1 else ""
        cases += _elementwise_cases(settings, selection, n, suffix, x_np, backend)
    for m in selection.matmul_sizes:
        suffix = f"@{m}" if len(selection.matmul_sizes) > 1 else ""
        cases += _matmul_cases(selection, m, suffix, copy, backend)
    return cases


def _elementwise_cases(
    settings: Settings, selection: Selection, n: int, suffix: str, x_np: np.ndarray | None, backend: str
) -> list[Case]:
    host: dict[str, np.ndarray] = {}
    device: dict[str, jax.Array] = {}

    def xn() -> np.ndarray:
        if "x" not in host:
            host["x"] = make_input(n) if x_np is None else x_np
        return host["x"]

    def x() -> jax.Array:
        if "x" not in device:
            device["x"] = jnp.asarray(xn()).block_until_ready()
        return device["x"]

    key = jax.random.key(0)
    shape = (n,)
    f32 = 8 * n  # bytes: float32 in and out
    copy = f"reference/numpy_copy{suffix}"
    cases: list[Case] = []

    # `make` is called without arguments; `Callable[..., ...]` admits the lambdas that bind loop variables as defaults.
    def add(
        group: str,
        row: str,
        what: str,
        kind: Kind,
        make: Callable[..., Callable[[], Any]],
        *,
        baseline: str,
        elements: int = n,
        shape: tuple[int, ...] = shape,
        bytes_moved: int = f32,
    ) -> None:
        cases.append(Case(group=group, row=row + suffix, what=what, kind=kind, elements=elements, shape=shape,
                          bytes_moved=bytes_moved, baseline=baseline + suffix, make=make, copy=copy))  # fmt: skip

    formats = selection.formats
    first = f"{formats[0]}/fpemu-nearest_even"
    add("reference", "numpy_copy", "NumPy x.copy(): the memory-bandwidth reference", "reference",
        lambda: xn().copy, baseline=first)  # fmt: skip
    add("reference", "xla_times2", "jit x * 2: the cheapest jitted elementwise op", "reference",
        lambda: _jitted(lambda v: v * 2, x()), baseline=first)  # fmt: skip

    full = settings.mode == "full"
    for fmt in formats:
        f = fpemu.get_format(fmt)
        base = f"{fmt}/fpemu-nearest_even"
        for mode in selection.modes:
            what = f"jit fpemu.quantize(x, {fmt!r}, rounding={mode!r}"
            what += ", key=key), the key a jit argument" if mode == "stochastic" else ")"
            add(fmt, f"fpemu-{mode}", what, "fpemu",
                lambda fmt=fmt, mode=mode: _quantize_call(fmt, cast(fpemu.Rounding, mode), x(), key),
                baseline=base)  # fmt: skip
        add(fmt, "reduce_precision",
            f"jit lax.reduce_precision(x, {f.exponent_bits}, {f.mantissa_bits}) (a speed peer: other rounding rules)",
            "peer", lambda f=f: _checked(_jitted(lambda v: lax.reduce_precision(v, f.exponent_bits, f.mantissa_bits),
                                                 x()), f"lax.reduce_precision with {f.name}'s widths"),
            baseline=base)  # fmt: skip
        add(fmt, "astype_roundtrip", f"jit x.astype({_dtype_name(fmt)}).astype(float32)", "peer",
            lambda fmt=fmt: _astype_call(fmt, x(), backend), baseline=base)  # fmt: skip
        add(fmt, "ml_dtypes_roundtrip", f"NumPy x.astype({_dtype_name(fmt)}).astype(float32), one thread", "peer",
            lambda fmt=fmt: _ml_dtypes_call(fmt, xn()), baseline=base)  # fmt: skip
        if fmt in _GFLOAT_FORMATS and gfloat_version() is not None:
            add(fmt, "gfloat", f"jit gfloat.round_ndarray(format_info_{_GFLOAT_FORMATS[fmt]}, x)", "peer",
                lambda fmt=fmt: _gfloat_call(fmt, x()), baseline=base)  # fmt: skip
        if fmt == "e4m3fn" and (backend == "gpu" or full):
            interpret = backend != "gpu"
            count = min(n, settings.interpret_elements) if interpret else n
            add(fmt, "pallas-kernel-interpret" if interpret else "pallas-kernel",
                f"jit fpemu.kernels.quantize_kernel(x, 'e4m3fn'{', interpret=True' if interpret else ''})"
                + (f" on the first {count} elements" if count < n else ""),
                "fpemu", lambda count=count, interpret=interpret: _pallas_call(x()[:count], interpret),
                baseline=base, elements=count, shape=(count,), bytes_moved=8 * count)  # fmt: skip
        if fmt == "e2m1fn" or (fmt == "e4m3fn" and full):
            add(fmt, "fpemu-encode", f"jit fpemu.encode(x, {fmt!r}): uint8 codes", "fpemu",
                lambda fmt=fmt: _jitted(lambda v: fpemu.encode(v, fmt), x()), baseline=base,
                bytes_moved=5 * n)  # fmt: skip
        if fmt == "e2m1fn":
            add(fmt, "fpemu-encode+pack", f"jit fpemu.pack(fpemu.encode(x, {fmt!r}), {fmt!r}): two codes per byte",
                "fpemu", lambda fmt=fmt: _jitted(lambda v: fpemu.pack(fpemu.encode(v, fmt), fmt), x()),
                baseline=base, bytes_moved=4 * n + n // 2)  # fmt: skip

    for block_format in selection.block_formats:
        element = _element_name(block_format)
        base = f"{element}/fpemu-nearest_even"
        if element not in formats and not any(c.name == base + suffix for c in cases):  # the block format's baseline
            add(element, "fpemu-nearest_even", f"jit fpemu.quantize(x, {element!r}, rounding='nearest_even') "
                f"(the baseline of {block_format})", "fpemu",
                lambda element=element: _quantize_call(element, "nearest_even", x(), key), baseline=base)  # fmt: skip
        add(block_format, "scaled-qdq", f"jit fpemu.scaled.quantize_dequantize(x, {block_format!r}), blocks along x",
            "fpemu", lambda bf=block_format: _jitted(lambda v: fpemu.scaled.quantize_dequantize(v, bf), x()),
            baseline=base)  # fmt: skip
    return cases


def _matmul_cases(selection: Selection, m: int, suffix: str, copy: str, backend: str) -> list[Case]:
    operands: dict[str, tuple[jax.Array, jax.Array]] = {}

    def ab() -> tuple[jax.Array, jax.Array]:
        if "ab" not in operands:
            rng = np.random.default_rng(SEED)
            a, b = (jnp.asarray(rng.standard_normal((m, m), dtype=np.float32)).block_until_ready() for _ in "ab")
            operands["ab"] = (a, b)
        return operands["ab"]

    def bf16_dot(a, b):
        return lax.dot_general(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), (((1,), (0,)), ((), ())),
                               preferred_element_type=jnp.float32)  # fmt: skip

    cases: list[Case] = []

    def add(row: str, what: str, kind: Kind, make: Callable[..., Callable[[], Any]]) -> None:
        cases.append(Case(group="matmul", row=row + suffix, what=what, kind=kind, elements=m**3, shape=(m, m),
                          bytes_moved=3 * 4 * m * m, baseline=_MATMUL_BASELINE + suffix, make=make,
                          copy=copy))  # fmt: skip

    matmuls: dict[str, tuple[str, Kind, Callable[[jax.Array, jax.Array], jax.Array]]] = {
        "fp32": ("jit jnp.matmul(a, b, precision=HIGHEST), float32", "peer",
                 lambda a, b: jnp.matmul(a, b, precision=lax.Precision.HIGHEST)),
        "bf16xbf16-f32": ("jit lax.dot_general on bf16 casts, float32 accumulation", "peer", bf16_dot),
        "fpemu-e4m3fn": ("jit fpemu.matmul(a, b, lhs='e4m3fn', rhs='e4m3fn'): rounds both operands", "fpemu",
                         lambda a, b: fpemu.matmul(a, b, lhs="e4m3fn", rhs="e4m3fn")),
    }  # fmt: skip
    for row, (what, kind, fn) in matmuls.items():
        add(row, what, kind, lambda fn=fn: _jitted(fn, *ab()))
    add("native-fp8xfp8-f32", "jit lax.dot_general on float8_e4m3fn casts, float32 accumulation (where the backend "
        "compiles it)", "peer", lambda: _checked(_jitted(_native_fp8_dot, *ab()), "the native FP8 dot"))  # fmt: skip
    for block_format in selection.block_formats:
        if block_format in fpemu.scaled.MATMUL_FORMATS:
            add(f"scaled-{block_format}", f"fpemu.scaled.matmul(a, b, {block_format!r}): both operands quantized "
                "along K (jitted inside), float32 accumulation", "fpemu",
                lambda bf=block_format: _scaled_matmul_call(bf, *ab()))  # fmt: skip
    if backend == "gpu":  # interpret mode on CPU would time the interpreter, not the kernel
        add("pallas-kernel-e4m3fn", "jit fpemu.kernels.matmul_kernel(a, b, lhs='e4m3fn', rhs='e4m3fn')", "fpemu",
            lambda: _kernel_matmul_call(*ab()))  # fmt: skip
    return cases


def _scaled_matmul_call(block_format: str, a: jax.Array, b: jax.Array) -> Callable[[], Any]:
    name = cast("fpemu.scaled.MatmulFormat", block_format)
    return lambda: fpemu.scaled.matmul(a, b, name)


# -- the run ----------------------------------------------------------------------------------------


def git_commit() -> str | None:
    """The short commit of the checkout fpemu is imported from, with ``+dirty`` for local changes."""
    root = Path(__file__).resolve().parents[2]  # fpemu/tools/bench.py -> the checkout
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """Device, versions, commit and date: the ``meta`` fields that do not depend on the rows."""
    device = jax.devices()[0]
    cpus: int | None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count()
    return {
        "schema": SCHEMA,
        "date": _now(),
        "device": {
            "platform": device.platform,
            "device_kind": device.device_kind,
            "count": jax.device_count(),
            "cpu": _cpu_model(),
            "cpus_usable": cpus,
        },
        "versions": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__,
            "fpemu": fpemu.__version__,
            "gfloat": gfloat_version(),
        },
        "git_commit": git_commit(),
        "env": {var: os.environ.get(var) for var in ("XLA_FLAGS", "GLIBC_TUNABLES", "JAX_PLATFORMS")},
    }


def machine_line() -> str:
    """`environment` as one line, for the summaries of the ``bench/`` suite."""
    env = environment()
    device, versions = env["device"], env["versions"]
    libraries = ", ".join(f"{lib} {version}" for lib, version in versions.items() if version is not None)
    variables = "; ".join(f"{var}={value if value is not None else '(unset)'}" for var, value in env["env"].items())
    return (
        f"machine: {device['cpu']}, {device['cpus_usable']} CPUs usable, JAX backend {device['platform']} "
        f"({device['device_kind']}); {libraries}; commit {env['git_commit'] or 'unknown'}; {variables}"
    )


def run(
    settings: Settings = QUICK,
    *,
    selection: Selection | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cases: Sequence[Case] | None = None,
) -> BenchResult:
    """Time every row of `plan` (or ``cases``) and compute the ratios.

    Args:
      settings: `QUICK` or `FULL`.
      selection: what to time (`select`: formats, block formats, rounding modes, sizes); ``select(settings)``
        when None.
      progress: called as ``progress(done, total, name)`` before each row and once at the end
        (``name`` empty).
      cases: the rows to run instead of ``plan(settings, selection=selection)``; each row's NumPy copy
        row (``reference/numpy_copy``) and baseline row must be among them.

    Returns:
      The rows that ran, in order, and ``meta`` (`environment`, the settings and the selection, the
      skipped rows with their reasons and the wall time of the run).
    """
    start, date = time.perf_counter(), _now()
    selection = selection or select(settings)
    cases = list(plan(settings, selection=selection) if cases is None else cases)
    names = [case.name for case in cases]
    for copy in dict.fromkeys(case.copy for case in cases):
        if copy not in names:
            raise ValueError(f"the cases must include {copy}, the reference of ratio_to_copy")
    missing = sorted({case.baseline for case in cases} - set(names))
    if missing:
        raise ValueError(f"baseline rows missing from the cases: {', '.join(missing)}")
    timings: dict[str, tuple[Case, Timing]] = {}
    skipped: list[dict[str, str]] = []
    for i, case in enumerate(cases):
        if progress is not None:
            progress(i, len(cases), case.name)
        made = time.perf_counter()
        try:
            call = case.make()
        except Skip as reason:
            skipped.append({"name": case.name, "reason": str(reason)})
            continue
        made = time.perf_counter() - made  # some rows compile in make(), to find out whether they can run
        timing = timeit(call, warmup=settings.warmup, min_repeats=settings.min_repeats,
                        max_repeats=settings.max_repeats, max_time=settings.max_time)  # fmt: skip
        timings[case.name] = (case, dataclasses.replace(timing, first_call_s=made + timing.first_call_s))
        del call
    if progress is not None:
        progress(len(cases), len(cases), "")

    def per_element(name: str) -> float:
        case, timing = timings[name]
        return timing.median_s / case.elements

    for name in {case.copy for case, _ in timings.values()} | {case.baseline for case, _ in timings.values()}:
        if name not in timings:
            raise RuntimeError(f"the reference row {name} was skipped: {[s for s in skipped if s['name'] == name]}")
    rows = []
    for name, (case, timing) in timings.items():
        ns = per_element(name)
        rows.append(BenchRow(
            name=name, group=case.group, row=case.row, what=case.what, kind=case.kind, elements=case.elements,
            shape=case.shape, bytes_moved=case.bytes_moved, repeats=timing.repeats,
            first_call_s=timing.first_call_s, median_s=timing.median_s, min_s=timing.min_s,
            ns_per_element=ns * 1e9, gb_per_s=case.bytes_moved / timing.median_s / 1e9,
            ratio_to_copy=ns / per_element(case.copy), baseline=case.baseline,
            ratio_to_fpemu=ns / per_element(case.baseline),
        ))  # fmt: skip
    meta = environment()
    chosen = {k: list(v) for k, v in dataclasses.asdict(selection).items()}
    chosen["recipes"] = list(chosen["block_formats"])  # the earlier key, kept while the schema is fpemu.bench/1
    meta.update(
        date=date,
        mode=settings.mode,
        settings={
            **{k: v for k, v in dataclasses.asdict(settings).items() if k != "mode"},
            "elements": selection.sizes[0],
            "matmul_size": selection.matmul_sizes[0],
            **chosen,
        },
        skipped=skipped,
        seconds=round(time.perf_counter() - start, 3),
    )
    return BenchResult(meta=meta, rows=tuple(rows))


_RENAMED = {"QUICK_RECIPES": "QUICK_BLOCK_FORMATS", "FULL_RECIPES": "FULL_BLOCK_FORMATS"}


def __getattr__(name: str) -> Any:
    """``QUICK_RECIPES`` and ``FULL_RECIPES``, this module's names of `QUICK_BLOCK_FORMATS` and
    `FULL_BLOCK_FORMATS` in earlier releases: kept for one release, with a `DeprecationWarning`."""
    if name in _RENAMED:
        warn_renamed(f"fpemu.tools.bench.{name}", f"fpemu.tools.bench.{_RENAMED[name]}")
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'fpemu.tools.bench' has no attribute {name!r}")
