"""Scaled and block formats: per-tensor, per-axis and block scaling, OCP MX, NVFP4, delayed scaling.

`BlockArray.from_array` turns an array into a `BlockArray` (element-format values plus per-group
scales) and `quantize_dequantize` is the fused simulation path (`quantize_dequantize_split`: with the
float32 per-tensor scale kept apart, as a GEMM applies it). Block formats are data (`BlockFormat`);
`block_formats` lists the built-in ones. `DelayedScaling` quantizes with scales from an amax history
carried in a functional state. `matmul` multiplies two matrices as a block format does (`MATMUL_FORMATS`).
`qsnr` and `relative_error` measure the result. `fpemu.testing.scaled_reference` is the slow NumPy oracle the
fast path is tested against. docs/scaling.md has every formula.

The names of earlier releases (`Recipe`, `RecipeLike`, `UnknownRecipeError`, `get_recipe`, `recipes`,
`ScaledArray`, `MatmulRecipe`, `MATMUL_RECIPES`) stay importable for one release: each is the new
object, and using it warns (`DeprecationWarning`) with the name that replaced it. "Recipe" now means
a training or inference recipe only (`fpemu.training_recipe`, `fpemu.inference_recipe`), and
`ScaledArray` is `fpemu.scalify`'s scale-carrying array only.
"""

from typing import Any

from fpemu._scaled.block_format import MXINT8_ELEMENT as MXINT8_ELEMENT
from fpemu._scaled.block_format import SCALE_RULES as SCALE_RULES
from fpemu._scaled.block_format import BlockFormat as BlockFormat
from fpemu._scaled.block_format import BlockFormatLike as BlockFormatLike
from fpemu._scaled.block_format import UnknownBlockFormatError as UnknownBlockFormatError
from fpemu._scaled.block_format import block_formats as block_formats
from fpemu._scaled.block_format import get_block_format as get_block_format
from fpemu._scaled.block_format import scale_kind as scale_kind
from fpemu.deprecation import warn_renamed
from fpemu.scaled._array import BlockArray as BlockArray
from fpemu.scaled._array import Packed as Packed
from fpemu.scaled._delayed import DelayedScaling as DelayedScaling
from fpemu.scaled._delayed import DelayedScalingState as DelayedScalingState
from fpemu.scaled._delayed import scale_from_amax as scale_from_amax
from fpemu.scaled._matmul import MATMUL_FORMATS as MATMUL_FORMATS
from fpemu.scaled._matmul import MatmulFormat as MatmulFormat
from fpemu.scaled._matmul import matmul as matmul
from fpemu.scaled._metrics import qsnr as qsnr
from fpemu.scaled._metrics import qsnr_from_relative_error as qsnr_from_relative_error
from fpemu.scaled._metrics import relative_error as relative_error
from fpemu.scaled._quantize import quantize_dequantize as quantize_dequantize
from fpemu.scaled._split import quantize_dequantize_split as quantize_dequantize_split

__all__ = [
    "MATMUL_FORMATS",
    "MXINT8_ELEMENT",
    "SCALE_RULES",
    "DelayedScaling",
    "DelayedScalingState",
    "MatmulFormat",
    "Packed",
    "BlockFormat",
    "BlockFormatLike",
    "BlockArray",
    "UnknownBlockFormatError",
    "get_block_format",
    "matmul",
    "qsnr",
    "qsnr_from_relative_error",
    "quantize_dequantize",
    "quantize_dequantize_split",
    "block_formats",
    "relative_error",
    "scale_from_amax",
    "scale_kind",
]

#: Names of earlier releases, each to the name that replaced it (kept for one release).
_RENAMED = {
    "Recipe": "BlockFormat",
    "RecipeLike": "BlockFormatLike",
    "UnknownRecipeError": "UnknownBlockFormatError",
    "get_recipe": "get_block_format",
    "recipes": "block_formats",
    "ScaledArray": "BlockArray",
    "MatmulRecipe": "MatmulFormat",
    "MATMUL_RECIPES": "MATMUL_FORMATS",
}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module 'fpemu.scaled' has no attribute {name!r}")
    warn_renamed(f"fpemu.scaled.{name}", f"fpemu.scaled.{new} (the same object)")
    return globals()[new]
