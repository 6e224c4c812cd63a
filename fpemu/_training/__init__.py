"""Low-precision training recipes: FP8, MXFP8/6/4 and NVFP4 as data, and the quantized GEMM they define.

The layer between `fpemu.scaled` (which quantizes one tensor) and `fpemu._emulate` (which applies a
recipe to every dot of a training step):

- `operands`: a GEMM operand's check (`operand_arg`) and its amax (`amax_of`);
- `quantizer`: `Quantizer` (how one operand of one GEMM is quantized: the `fpemu.scaled.BlockFormat` it
  holds, which elements share a scale, the rounding);
- `quantize_operand`: `quantize_operand` (one operand quantized by its `Quantizer`), `scaled_view`;
- `hadamard`: the random Hadamard transform of NVFP4's wgrad;
- `recipes`: `GemmRecipe`, `TrainingRecipe`, the named recipes (`TRAINING_RECIPES`, `training_recipe`);
- `gemm_dot`: `quantized_dot_general`, a dot with each operand quantized along its own contraction
  (and `quantized_dot_core`, its checked-once core);
- `gemm_conv`: `quantized_conv_general`, its convolution (and `quantized_conv_core`);
- `gemm_vjp`: the recipe's three GEMMs in role order (`role_dot`, `role_conv`) and the custom VJPs
  of a forward dot and convolution (forward, dgrad, wgrad), which `fpemu._emulate.gemm` calls;
- `elements`: the element values of a quantized operand (what statistics count).

docs/training.md documents the recipes and their sources; `fpemu.testing.recipe_reference` is the
NumPy oracle of `quantized_dot_general`.
"""

from fpemu._training.gemm_conv import quantized_conv_general as quantized_conv_general
from fpemu._training.gemm_dot import quantized_dot_general as quantized_dot_general
from fpemu._training.hadamard import hadamard as hadamard
from fpemu._training.operands import amax_of as amax_of
from fpemu._training.quantize_operand import quantize_operand as quantize_operand
from fpemu._training.quantize_operand import scaled_view as scaled_view
from fpemu._training.quantizer import SCALINGS as SCALINGS
from fpemu._training.quantizer import Quantizer as Quantizer
from fpemu._training.quantizer import Scaling as Scaling
from fpemu._training.recipes import GEMMS as GEMMS
from fpemu._training.recipes import TRAINING_RECIPES as TRAINING_RECIPES
from fpemu._training.recipes import GemmRecipe as GemmRecipe
from fpemu._training.recipes import TrainingRecipe as TrainingRecipe
from fpemu._training.recipes import nvfp4_recipe as nvfp4_recipe
from fpemu._training.recipes import training_recipe as training_recipe

__all__ = [
    "GEMMS",
    "SCALINGS",
    "TRAINING_RECIPES",
    "GemmRecipe",
    "Quantizer",
    "Scaling",
    "TrainingRecipe",
    "amax_of",
    "hadamard",
    "nvfp4_recipe",
    "quantize_operand",
    "quantized_conv_general",
    "quantized_dot_general",
    "scaled_view",
    "training_recipe",
]
