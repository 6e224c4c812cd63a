"""Scaled and block formats: per-tensor, per-axis and block scaling, OCP MX, NVFP4, delayed scaling.

`quantize` turns an array into a `ScaledArray` (element-format values plus per-group scales) and
`quantize_dequantize` is the fused simulation path. Recipes are data (`Recipe`); `recipes` lists
the built-in ones. `DelayedScaling` quantizes with scales from an amax history carried in a
functional state. `qsnr` and `relative_error` measure the result. `fpemu.scaled.reference` is the
slow NumPy oracle the fast path is tested against. docs/scaling.md has every formula.
"""

from fpemu.scaled._array import Packed, ScaledArray
from fpemu.scaled._delayed import DelayedScaling, DelayedScalingState
from fpemu.scaled._metrics import qsnr, relative_error
from fpemu.scaled._quantize import quantize, quantize_dequantize
from fpemu.scaled._recipes import (
    MXINT8_ELEMENT,
    SCALE_RULES,
    Recipe,
    UnknownRecipeError,
    get_recipe,
    recipes,
)

__all__ = [
    "MXINT8_ELEMENT",
    "SCALE_RULES",
    "DelayedScaling",
    "DelayedScalingState",
    "Packed",
    "Recipe",
    "ScaledArray",
    "UnknownRecipeError",
    "get_recipe",
    "qsnr",
    "quantize",
    "quantize_dequantize",
    "recipes",
    "relative_error",
]
