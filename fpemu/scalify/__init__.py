"""Scale propagation: jax-scalify's API on fpemu (``import fpemu.scalify as jsa``).

Every tensor can be a `ScaledArray` (``data * scale``, with a scalar scale), and `scalify`
transforms a function so that scales propagate through it with unit-scaling rules: FP16 and FP8
programs neither overflow nor underflow without per-tensor bookkeeping. Submodules, as in
jax-scalify: `fpemu.scalify.core` (types, pow2 helpers, rule registry), `fpemu.scalify.lax`
(scale primitives and rules), `fpemu.scalify.ops` (dynamic rescaling, casts, debugging),
`fpemu.scalify.tree`, `fpemu.scalify.quantization` and `fpemu.scalify.utils` (HLO printing). docs/scalify.md is the guide.

`fpemu.scalify.ScaledArray` (data and one scalar scale, propagated through arithmetic) is a
different type from `fpemu.scaled.BlockArray` (element-format codes and per-block scales, the
storage of a block format, dequantized for arithmetic); docs/scalify.md explains the choice.
"""

from fpemu import __version__
from fpemu.scalify import core, lax, ops, quantization, tree, utils
from fpemu.scalify.core import (
    Pow2RoundMode,
    ScaledArray,
    ScalifyConfig,
    as_scaled_array,
    asarray,
    debug_callback,
    scaled_array,
    scalify,
)

__all__ = [
    "__version__",
    "Pow2RoundMode",
    "ScaledArray",
    "ScalifyConfig",
    "as_scaled_array",
    "asarray",
    "core",
    "debug_callback",
    "lax",
    "ops",
    "quantization",
    "scaled_array",
    "scalify",
    "tree",
    "utils",
]
