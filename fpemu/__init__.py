"""fpemu: bit-exact low-precision floating-point emulation for JAX.

The public API is what this module exports (``__all__``) and the subpackages `fpemu.scaled`
(scaled and block formats), `fpemu.scalify` (jax-scalify's scale propagation), `fpemu.testing`
(oracles, strategies, assertions; needs the test extras), `fpemu.kernels` (Pallas kernels) and
`fpemu.tools` (the ``fpemu`` command line, benchmarks, accuracy tables and plots). All but
``fpemu.scaled`` are loaded on first use. Modules whose names start with an underscore are private: do not import
them. docs/architecture.md maps the layers.
"""

import importlib as _importlib

from fpemu import _checkout, scaled
from fpemu._args import DEFAULT_RANDOM_BITS
from fpemu._core.format import Format
from fpemu._core.modes import ROUNDING_MODES, Rounding
from fpemu._core.registry import FormatLike, UnknownFormatError, formats, get_format, p3109_format, register_format
from fpemu._core.registry import aliases as format_aliases
from fpemu._emulate.nonfinite import NonfiniteReport, find_nonfinite
from fpemu._emulate.policy import Policy
from fpemu._emulate.precision import PrecisionWarning
from fpemu._emulate.stats import summary as stats_summary
from fpemu._emulate.training_state import gemm_roles, init_training_state
from fpemu._emulate.transform import emulate
from fpemu._ops.codec import decode, encode, pack, unpack
from fpemu._ops.dot_policy import DotPolicy
from fpemu._ops.matmul import conv_general_dilated, dot_general, matmul
from fpemu._ops.quantize import quantize, stochastic_bits
from fpemu._training.gemm_dot import quantized_dot_general
from fpemu._training.params import LeafReport, QuantizeReport, quantize_params
from fpemu._training.quantizer import Quantizer
from fpemu._training.recipes import (
    INFERENCE_RECIPES,
    TRAINING_RECIPES,
    GemmRecipe,
    TrainingRecipe,
    inference_recipe,
    nvfp4_recipe,
    training_recipe,
)

__all__ = [
    "DEFAULT_RANDOM_BITS",
    "INFERENCE_RECIPES",
    "ROUNDING_MODES",
    "TRAINING_RECIPES",
    "DotPolicy",
    "Format",
    "FormatLike",
    "GemmRecipe",
    "LeafReport",
    "NonfiniteReport",
    "Policy",
    "PrecisionWarning",
    "QuantizeReport",
    "Quantizer",
    "Rounding",
    "TrainingRecipe",
    "UnknownFormatError",
    "conv_general_dilated",
    "decode",
    "dot_general",
    "emulate",
    "encode",
    "find_nonfinite",
    "format_aliases",
    "formats",
    "gemm_roles",
    "get_format",
    "inference_recipe",
    "init_training_state",
    "kernels",
    "matmul",
    "nvfp4_recipe",
    "p3109_format",
    "pack",
    "quantize",
    "quantize_params",
    "quantized_dot_general",
    "register_format",
    "scaled",
    "scalify",
    "stats_summary",
    "stochastic_bits",
    "testing",
    "tools",
    "training_recipe",
    "unpack",
]
__version__ = "0.1.0"

_checkout.install()

# Loaded on first use: `testing` needs the test extras (hypothesis), `kernels` imports Pallas, and
# `scalify` and `tools` (command line, benchmarks, plots) are not part of the library's import cost.
_LAZY = ("kernels", "scalify", "testing", "tools")


def __getattr__(name: str):
    if name in _LAZY:
        return _importlib.import_module(f"fpemu.{name}")
    raise AttributeError(f"module 'fpemu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
