"""Operations for scaled training (jax-scalify's ``jax_scalify.ops``): dynamic rescaling, casts and
precision reduction on one pass, debug callbacks."""

from fpemu.scalify import core as _core  # noqa: F401  (register every rule first)
from fpemu.scalify._ops import (
    cast_on_backward,
    cast_on_forward,
    debug_callback,
    debug_callback_grad,
    debug_print,
    debug_print_grad,
    dynamic_rescale_l1,
    dynamic_rescale_l1_grad,
    dynamic_rescale_l2,
    dynamic_rescale_l2_grad,
    dynamic_rescale_max,
    dynamic_rescale_max_grad,
    map_on_backward,
    map_on_forward,
    reduce_precision_on_backward,
    reduce_precision_on_forward,
)

__all__ = [
    "cast_on_backward",
    "cast_on_forward",
    "debug_callback",
    "debug_callback_grad",
    "debug_print",
    "debug_print_grad",
    "dynamic_rescale_l1",
    "dynamic_rescale_l1_grad",
    "dynamic_rescale_l2",
    "dynamic_rescale_l2_grad",
    "dynamic_rescale_max",
    "dynamic_rescale_max_grad",
    "map_on_backward",
    "map_on_forward",
    "reduce_precision_on_backward",
    "reduce_precision_on_forward",
]
