"""Scaled and block formats: per-tensor, per-axis and block scaling, OCP MX, NVFP4, delayed scaling.

`ScaledArray.from_array` turns an array into a `ScaledArray` (element-format values plus per-group
scales) and `quantize_dequantize` is the fused simulation path (`quantize_dequantize_split`: with the
float32 per-tensor scale kept apart, as a GEMM applies it). Recipes are data (`Recipe`);
`recipes` lists the built-in ones. `DelayedScaling` quantizes with scales from an amax history
carried in a functional state. `matmul` multiplies two matrices as a recipe does (`MATMUL_RECIPES`).
`qsnr` and `relative_error` measure the result. `fpemu.testing.scaled_reference` is the slow NumPy oracle the
fast path is tested against. docs/scaling.md has every formula.
"""

from fpemu.scaled._array import Packed as Packed
from fpemu.scaled._array import ScaledArray as ScaledArray
from fpemu.scaled._delayed import DelayedScaling as DelayedScaling
from fpemu.scaled._delayed import DelayedScalingState as DelayedScalingState
from fpemu.scaled._matmul import MATMUL_RECIPES as MATMUL_RECIPES
from fpemu.scaled._matmul import MatmulRecipe as MatmulRecipe
from fpemu.scaled._matmul import matmul as matmul
from fpemu.scaled._metrics import qsnr as qsnr
from fpemu.scaled._metrics import qsnr_from_relative_error as qsnr_from_relative_error
from fpemu.scaled._metrics import relative_error as relative_error
from fpemu.scaled._quantize import quantize_dequantize as quantize_dequantize
from fpemu.scaled._recipes import MXINT8_ELEMENT as MXINT8_ELEMENT
from fpemu.scaled._recipes import SCALE_RULES as SCALE_RULES
from fpemu.scaled._recipes import Recipe as Recipe
from fpemu.scaled._recipes import RecipeLike as RecipeLike
from fpemu.scaled._recipes import UnknownRecipeError as UnknownRecipeError
from fpemu.scaled._recipes import get_recipe as get_recipe
from fpemu.scaled._recipes import recipes as recipes
from fpemu.scaled._split import quantize_dequantize_split as quantize_dequantize_split

__all__ = [
    "MATMUL_RECIPES",
    "MXINT8_ELEMENT",
    "SCALE_RULES",
    "DelayedScaling",
    "DelayedScalingState",
    "MatmulRecipe",
    "Packed",
    "Recipe",
    "RecipeLike",
    "ScaledArray",
    "UnknownRecipeError",
    "get_recipe",
    "matmul",
    "qsnr",
    "qsnr_from_relative_error",
    "quantize_dequantize",
    "quantize_dequantize_split",
    "recipes",
    "relative_error",
]
