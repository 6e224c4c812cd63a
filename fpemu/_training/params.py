"""`quantize_params`: a parameter pytree quantized for storage, leaf by leaf, with a report.

Each kernel is quantized by the weight quantizer of a recipe (an inference recipe's forward rhs) along
its contraction axes, with `quantize_operand` (the training GEMMs' own quantization, so that a model
whose weights went through `quantize_params` computes with the same weights as ``emulate`` under the
recipe's weight quantizer); every other leaf is kept. docs/inference.md is the contract.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._args import bool_arg
from fpemu._text import text_table
from fpemu._training.layout import Contraction, contracting_dims_arg
from fpemu._training.quantize_operand import quantize_operand
from fpemu._training.quantizer import Quantizer
from fpemu._training.recipes import INFERENCE_RECIPES, TRAINING_RECIPES, TrainingRecipe, recipe_by_name
from fpemu.scaled import qsnr

__all__ = ["LeafReport", "QuantizeReport", "quantize_params"]

_FLOATS = ("float16", "bfloat16", "float32")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LeafReport:
    """One leaf of a `QuantizeReport`: ``path`` (keys joined by ``/``), ``shape``, ``dtype``, ``axes``
    (the contraction it was quantized along; None: kept in full precision), ``recipe`` (the recipe's
    name, or ``"-"`` when kept), ``qsnr_db`` (+inf when kept), ``bytes_before`` (as stored now) and
    ``bytes_after`` (packed storage: elements at their width, scales at theirs, and a float32 tensor
    scale where the recipe has one)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    axes: tuple[int, ...] | None
    recipe: str
    qsnr_db: float
    bytes_before: int
    bytes_after: int
    signal: float = dataclasses.field(default=0.0, repr=False)  # sum of squares, for the total QSNR
    noise: float = dataclasses.field(default=0.0, repr=False)  # sum of squared errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class QuantizeReport:
    """What `quantize_params` did: one `LeafReport` per leaf (``rows``, in ``jax.tree_util`` order).

    ``str(report)`` is a table with a total row; ``report.table(markdown=True)`` a Markdown one.
    ``qsnr_db`` is the QSNR of all quantized leaves together (their errors' energy over theirs).
    """

    recipe: str
    rows: tuple[LeafReport, ...]

    @property
    def bytes_before(self) -> int:
        """Total bytes of the leaves as given."""
        return sum(r.bytes_before for r in self.rows)

    @property
    def bytes_after(self) -> int:
        """Total bytes once quantized leaves are packed (kept leaves as they are)."""
        return sum(r.bytes_after for r in self.rows)

    @property
    def qsnr_db(self) -> float:
        """QSNR in dB over every quantized leaf (+inf if none was quantized or all were exact)."""
        signal, noise = sum(r.signal for r in self.rows), sum(r.noise for r in self.rows)
        return math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal else -math.inf

    def table(self, *, markdown: bool = False) -> str:
        """The rows as a table (`fpemu.testing.text_table`), with a total row."""
        rows = [
            [
                r.path,
                "x".join(map(str, r.shape)) or "()",
                r.dtype,
                "-" if r.axes is None else ",".join(map(str, r.axes)),
                r.recipe,
                _db(r.qsnr_db),
                r.bytes_before,
                r.bytes_after,
            ]
            for r in self.rows
        ]
        rows.append(["total", "", "", "", self.recipe, _db(self.qsnr_db), self.bytes_before, self.bytes_after])
        header = ["path", "shape", "dtype", "axes", "recipe", "QSNR dB", "bytes before", "bytes after"]
        return text_table(rows, header, align="llllllrr", markdown=markdown)

    def __str__(self) -> str:
        return self.table()


def _db(value: float) -> str:
    return "-" if math.isinf(value) and value > 0 else f"{value:.1f}"


def _path_str(path: tuple) -> str:
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _weight_quantizer(recipe: Any) -> tuple[str, Quantizer]:
    """(label, the weight quantizer) of ``recipe``: a recipe name, a `TrainingRecipe` (its forward rhs) or a `Quantizer`."""
    if isinstance(recipe, str):
        found = recipe_by_name(recipe)
        if found is None:
            raise ValueError(
                f"quantize_params: recipe={recipe!r} is not a recipe; inference recipes: {', '.join(INFERENCE_RECIPES)}; "
                f"training recipes: {', '.join(TRAINING_RECIPES)} (or a fpemu.TrainingRecipe or a fpemu.Quantizer)"
            )
        recipe = found
    if isinstance(recipe, TrainingRecipe):
        label, q = recipe.name, recipe.forward.rhs
        if q is None:
            raise ValueError(f"quantize_params: recipe={label!r} leaves the weight (its forward rhs) unquantized")
    elif isinstance(recipe, Quantizer):
        label, q = repr(recipe), recipe
    else:
        raise TypeError(
            f"quantize_params: recipe must be a recipe name, a fpemu.TrainingRecipe or a fpemu.Quantizer, got "
            f"{type(recipe).__name__}"
        )
    if q.scaling == "delayed":
        raise ValueError(
            f"quantize_params: recipe={label!r}: delayed scaling needs an amax history; use scaling='tensor'"
        )
    if q.rounding == "stochastic":
        raise ValueError(
            f"quantize_params: recipe={label!r}: stored weights are rounded to nearest; its weight "
            "quantizer rounds stochastically (use dataclasses.replace(q, rounding='nearest_even'))"
        )
    return label, q


def _axes_arg(axes: Any) -> list[tuple[str, re.Pattern, Any]]:
    if axes is None:
        return []
    if not isinstance(axes, Mapping):
        raise TypeError(f"quantize_params: axes must be a mapping of path patterns to axes, got {type(axes).__name__}")
    out = []
    for pattern, value in axes.items():
        if not isinstance(pattern, str):
            raise TypeError(f"quantize_params: axes keys must be regular expressions (str), got {pattern!r}")
        try:
            compiled = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"quantize_params: axes pattern {pattern!r} is not a regular expression: {e}") from None
        out.append((pattern, compiled, value))
    return out


def _stored_bytes(q: Quantizer, shape: tuple[int, ...], dims: tuple[int, ...]) -> int:
    """Packed bytes of a leaf of ``shape`` quantized by ``q`` along ``dims`` (padded blocks counted whole)."""
    element, scale = q.element.bits, q.scale_format.bits
    c = Contraction(shape, dims)
    n = math.prod(shape)
    if q.scaling == "none":
        groups = 0
    elif q.scaling in ("tensor", "delayed"):
        groups = 1
    elif q.scaling == "row":
        groups = c.rows
    else:
        b = cast(int, q.block_size)
        if q.scaling == "block":
            groups, n = c.rows * -(-c.k // b), c.rows * -(-c.k // b) * b
        else:
            groups = -(-c.rows // b) * -(-c.k // b)
            n = groups * b * b
    return -(-n * element // 8) + -(-groups * scale // 8) + (4 if q.tensor_scale else 0)


def _check_blocks(q: Quantizer, path: str, shape: tuple[int, ...], dims: tuple[int, ...], label: str) -> None:
    if q.scaling not in ("block", "block_2d"):
        return
    b, c = cast(int, q.block_size), Contraction(shape, dims)
    sizes = (("contraction", c.k),) if q.scaling == "block" else (("contraction", c.k), ("rows", c.rows))
    short = [(what, n) for what, n in sizes if n % b]
    if short:
        what, n = short[0]
        raise ValueError(
            f"quantize_params: {path} of shape {shape}, axes={dims}: its {what} of {n} elements is not a multiple of "
            f"the block size {b} of {label}; pass pad=True (a shorter last block, as the training recipes compute), "
            f"axes={{{path!r}: None}} to keep it in full precision, or other axes"
        )


def quantize_params(
    params: Any, recipe: str | TrainingRecipe | Quantizer, *, axes: Mapping[str, Any] | None = None, pad: bool = False
) -> tuple[Any, QuantizeReport]:
    """``params`` with each kernel quantized for storage by ``recipe``'s weight quantizer, and a report.

    Which leaves, along which axes:

    - ``axes`` maps regular expressions, searched in each leaf's path (keys joined by ``/``:
      ``"params/Dense_0/kernel"``; an nnx ``State``'s leaves end in ``/value``), to the leaf's
      contraction axes (an int or a tuple: ``(0, 1)`` for Flax's ``(heads, head_dim, features)``
      attention output kernel), or to None (kept in full precision). The first pattern that matches
      wins; a pattern that matches no leaf is an error.
    - otherwise, a 2-D float leaf is a kernel ``(in, out)`` (Flax's ``x @ kernel``) contracted along
      axis 0; 0-D and 1-D leaves (biases, norm scales), integer leaves and non-array leaves are kept
      as they are; a float leaf of 3 or more dimensions must be named in ``axes`` (no default fits
      both a convolution's ``(h, w, in, out)`` and an attention kernel).

    Quantized leaves are dequantized arrays of the leaf's dtype (simulation), bit for bit
    ``fpemu.scaled.quantize_dequantize(kernel, recipe, axis=0)`` for a 2-D kernel under the matching
    scaled recipe (`quantize_operand` along the axes; ``"row"`` scaling is one float32 scale per
    output channel). A contraction the block size does not divide is refused, as
    `fpemu.scaled.quantize_dequantize` refuses it: storage has a fixed block layout
    (docs/training.md); ``pad=True`` quantizes with a shorter last block, as the training recipes do.

    Args:
      params: a pytree: Flax linen ``variables``/``params``, an nnx ``State``, plain dicts and lists.
      recipe: a recipe name (`INFERENCE_RECIPES`, `TRAINING_RECIPES`), a `TrainingRecipe` (its
        forward GEMM's rhs quantizer, the weight's) or a `Quantizer`.
      axes: path patterns to contraction axes or None (see above).
      pad: allow a last block shorter than the block size.

    Returns:
      ``(quantized_params, report)``: the same tree structure, and a `QuantizeReport` (print it).

    Raises:
      ValueError: for an unknown recipe name, a recipe that does not quantize the weight or needs a
        key or an amax, an ``axes`` pattern that matches nothing, axes out of range, a float64 or
        3-D leaf without ``axes``, a contraction the block size does not divide (without ``pad``).
      TypeError: for a recipe or ``axes`` of the wrong type.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> params = {"dense": {"kernel": jnp.linspace(-1, 1, 64 * 8).reshape(64, 8), "bias": jnp.ones(8)}}
      >>> q, report = fpemu.quantize_params(params, "mxfp4_weights")
      >>> bool((q["dense"]["bias"] == params["dense"]["bias"]).all()), q["dense"]["kernel"].dtype
      (True, dtype('float32'))
      >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
      path          shape  dtype    axes  recipe         QSNR dB  bytes before  bytes after
      ------------  -----  -------  ----  -------------  -------  ------------  -----------
      dense/bias    8      float32  -     -              -                  32           32
      dense/kernel  64x8   float32  0     mxfp4_weights  17.2             2048          272
      total                               mxfp4_weights  17.2             2080          304
    """
    label, q = _weight_quantizer(recipe)
    rules = _axes_arg(axes)
    pad = bool_arg(pad, "pad")
    used = [False] * len(rules)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    out, rows = [], []
    for key_path, leaf in leaves:
        path = _path_str(key_path)
        dims: Any = "default"
        hits = [i for i, (_, compiled, _) in enumerate(rules) if compiled.search(path)]
        for i in hits:
            used[i] = True
        if hits:
            dims = rules[hits[0]][2]
        is_array = isinstance(leaf, (jax.Array, np.ndarray))
        dtype = np.dtype(leaf.dtype).name if is_array else type(leaf).__name__
        shape = tuple(np.shape(leaf)) if is_array else ()
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize if is_array else 0
        floating = is_array and jnp.issubdtype(leaf.dtype, jnp.floating)
        if dims == "default":
            dims = (0,) if floating and len(shape) == 2 else None
            if floating and len(shape) >= 3:
                raise ValueError(
                    f"quantize_params: {path} has shape {shape}: a kernel of {len(shape)} dimensions needs its "
                    f"contraction axes, e.g. axes={{{path!r}: (0,)}} (or None to keep it in full precision)"
                )
        if dims is None or not floating:
            if dims is not None:
                raise ValueError(
                    f"quantize_params: axes names {path}, a leaf of dtype {dtype}: only float leaves quantize"
                )
            out.append(leaf)
            rows.append(
                LeafReport(
                    path=path,
                    shape=shape,
                    dtype=dtype,
                    axes=None,
                    recipe="-",
                    qsnr_db=math.inf,
                    bytes_before=nbytes,
                    bytes_after=nbytes,
                )
            )
            continue
        if dtype not in _FLOATS:
            raise ValueError(
                f"quantize_params: {path} has dtype {dtype}; quantize float16, bfloat16 or float32 leaves "
                f"(cast it with .astype(jnp.float32), or keep it: axes={{{path!r}: None}})"
            )
        dims = contracting_dims_arg(dims, len(shape), f"axes[{path!r}]")
        if not pad:
            _check_blocks(q, path, shape, dims, label)
        y = quantize_operand(leaf, dims, q)
        x32, y32 = jnp.asarray(leaf, jnp.float32), y.astype(jnp.float32)
        signal, noise = float(jnp.sum(x32 * x32)), float(jnp.sum((x32 - y32) ** 2))
        out.append(y)
        rows.append(
            LeafReport(
                path=path,
                shape=shape,
                dtype=dtype,
                axes=dims,
                recipe=label,
                qsnr_db=float(qsnr(x32, y32)),
                bytes_before=nbytes,
                bytes_after=_stored_bytes(q, shape, dims),
                signal=signal,
                noise=noise,
            )
        )
    unused = [pattern for (pattern, _, _), hit in zip(rules, used, strict=True) if not hit]
    if unused:
        paths = ", ".join(_path_str(p) for p, _ in leaves)
        raise ValueError(
            f"quantize_params: axes pattern(s) {', '.join(map(repr, unused))} match no leaf; paths: {paths}"
        )
    return jax.tree_util.tree_unflatten(treedef, out), QuantizeReport(recipe=label, rows=tuple(rows))
