"""The core of `fpemu.scalify`: `ScaledArray`, the power-of-two helpers, the configuration, the
rule registry and the `scalify` transform (jax-scalify's ``jax_scalify.core``)."""

from fpemu.scalify import _control, _lax_api, _primitives, _rules, _rules_select  # noqa: F401  (register the rules)
from fpemu.scalify._array import (
    ScaledArray,
    as_scaled_array,
    asarray,
    get_scale_dtype,
    is_scaled_leaf,
    is_static_anyscale,
    is_static_one_scalar,
    is_static_zero,
    make_scaled_scalar,
    scaled_array,
)
from fpemu.scalify._config import ScalifyConfig, get_scalify_config
from fpemu.scalify._helpers import safe_div, safe_reciprocal
from fpemu.scalify._interpreter import scalify
from fpemu.scalify._ops import debug_callback
from fpemu.scalify._pow2 import (
    Pow2RoundMode,
    get_mantissa,
    pow2_decompose,
    pow2_round,
    pow2_round_down,
    pow2_round_up,
)
from fpemu.scalify._registry import (
    ScaledPrimitiveType,
    find_registered_scaled_op,
    register_scaled_lax_op,
    register_scaled_op,
)
from fpemu.scalify._table import rule_table
from fpemu.scalify._typing import Array, ArrayTypes, DTypeLike, Shape, Sharding, get_numpy_api

__all__ = [
    "Array",
    "ArrayTypes",
    "DTypeLike",
    "Pow2RoundMode",
    "ScaledArray",
    "ScaledPrimitiveType",
    "ScalifyConfig",
    "Shape",
    "Sharding",
    "as_scaled_array",
    "asarray",
    "debug_callback",
    "find_registered_scaled_op",
    "get_mantissa",
    "get_numpy_api",
    "get_scale_dtype",
    "get_scalify_config",
    "is_scaled_leaf",
    "is_static_anyscale",
    "is_static_one_scalar",
    "is_static_zero",
    "make_scaled_scalar",
    "pow2_decompose",
    "pow2_round",
    "pow2_round_down",
    "pow2_round_up",
    "register_scaled_lax_op",
    "register_scaled_op",
    "rule_table",
    "safe_div",
    "safe_reciprocal",
    "scaled_array",
    "scalify",
]
