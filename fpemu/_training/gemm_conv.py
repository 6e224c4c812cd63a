"""`quantized_conv_general`: a convolution with each operand quantized by a recipe along its input features.

The convolution of `fpemu._training.gemm_dot`: a convolution contracts the input's feature dimension
with the kernel's input-feature dimension (and the window), so each operand is quantized along that
one dimension, then `fpemu.conv_general_dilated`'s emulated accumulation sums the products.
`quantized_conv_general` checks its arguments once and calls `quantized_conv_core`, which internal
callers (the GEMMs of `fpemu._training.gemm_vjp`) call directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from fpemu._args import int_arg, key_arg
from fpemu._ops.matmul import tensor_scaled_conv
from fpemu._training.gemm_dot import split_key
from fpemu._training.hadamard import hadamard_along, hadamard_signs
from fpemu._training.operands import operand_arg
from fpemu._training.quantize_operand import quantize_operand_split
from fpemu._training.quantizer import Quantizer, amax_arg, quantizer_key_arg
from fpemu._training.recipes import GemmRecipe

__all__ = ["conv_params", "quantized_conv_core", "quantized_conv_general"]

F32 = jnp.float32


def conv_params(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
) -> dict[str, Any]:
    """The parameters of the ``conv_general_dilated`` equation `jax.lax.conv_general_dilated` would
    bind for these arguments (lax's own checks and messages)."""
    x = jax.ShapeDtypeStruct(tuple(lhs_shape), F32)
    w = jax.ShapeDtypeStruct(tuple(rhs_shape), F32)
    closed = jax.make_jaxpr(
        lambda x, w: lax.conv_general_dilated(
            x,
            w,
            window_strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            dimension_numbers,
            feature_group_count,
            batch_group_count,
        )  # fmt: skip
    )(x, w)
    (eqn,) = closed.jaxpr.eqns
    return dict(eqn.params)


def quantized_conv_core(
    a: Any,
    b: Any,
    params: Mapping[str, Any],
    gemm: GemmRecipe,
    quantizers: tuple[Quantizer | None, Quantizer | None],
    keys: tuple[Any, Any, Any],
    amaxes: tuple[Any, Any],
    out: Any,
    margin: int,
    probe: Any = None,
) -> jax.Array:
    """`quantized_conv_general` on checked arguments, with the operands' quantizers, keys (``a``'s,
    ``b``'s, the Hadamard transform's) and amaxes given per position (a GEMM whose operands arrive in
    the other order than the recipe writes them passes them swapped): the checked-once core internal
    callers use. ``params`` are the equation's (`conv_params`). ``probe``: what the materializations
    of the Hadamard transform and the quantizers read for their predicate (None: their own arrays)."""
    dn = params["dimension_numbers"]
    dims = ((dn.lhs_spec[1],), (dn.rhs_spec[1],))
    xs = [a, b]
    if gemm.hadamard is not None:
        xs = [
            hadamard_along(x.astype(F32), d, gemm.hadamard, keys[2], probe=probe) for x, d in zip(xs, dims, strict=True)
        ]
    scales: list[Any] = [None, None]
    for i in range(2):
        q = quantizers[i]
        if q is not None:
            k = keys[i] if q.rounding == "stochastic" else None
            xs[i], scales[i] = quantize_operand_split(
                xs[i].astype(F32), dims[i], q, key=k, amax=amaxes[i], margin=margin, probe=probe
            )
    return tensor_scaled_conv(
        xs[0],
        xs[1],
        scales[0],
        scales[1],
        params,
        accumulate=gemm.accumulate,
        accumulate_every=gemm.accumulate_every,
        result=out,
    )


def quantized_conv_general(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    gemm: GemmRecipe,
    *,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    key: jax.Array | None = None,
    lhs_amax: Any = None,
    rhs_amax: Any = None,
    preferred_element_type: DTypeLike | None = None,
    margin: int = 0,
) -> jax.Array:
    """`jax.lax.conv_general_dilated` with each operand quantized as ``gemm`` says, along its input features.

    Special values first: a block (tile, row, tensor) holding NaN or ±inf dequantizes to NaN, so
    every output that reads it is NaN; otherwise NaN and infinity propagate as in
    `fpemu.conv_general_dilated`.

    The computation is `fpemu._training.quantized_dot_general`'s, with the input's feature dimension
    and the kernel's input-feature dimension as the operands' contractions: the Hadamard transform
    (``gemm.hadamard``) along them, each operand quantized by its `Quantizer` along it (a float32
    per-tensor scale kept apart), `fpemu.conv_general_dilated` with ``gemm.accumulate`` every
    ``gemm.accumulate_every`` products (the contraction runs over input feature, then window
    position), the per-tensor scales applied to the float32 result once, then the result dtype.
    Keys are split as `quantized_dot_general` splits them. The geometry arguments are lax's.

    Raises:
      TypeError, ValueError: naming the argument, as `quantized_dot_general` (and lax for the geometry).

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import training_recipe
      >>> x = jnp.linspace(-1.0, 1.0, 128).reshape(1, 4, 32); w = jnp.ones((3, 32, 1))   # NWC, WIO
      >>> y = quantized_conv_general(x, w, (1,), "VALID", training_recipe("mxfp8").forward,
      ...     dimension_numbers=("NWC", "WIO", "NWC"))
      >>> y.shape, y.dtype.name
      ((1, 2, 1), 'float32')
    """
    if not isinstance(gemm, GemmRecipe):
        raise TypeError(f"gemm must be a GemmRecipe, got {type(gemm).__name__}")
    a = operand_arg(lhs, "lhs")
    b = operand_arg(rhs, "rhs")
    params = conv_params(
        a.shape, b.shape, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
        feature_group_count, batch_group_count,
    )  # fmt: skip
    for q, amax, name in ((gemm.lhs, lhs_amax, "lhs_amax"), (gemm.rhs, rhs_amax, "rhs_amax")):
        if q is None:
            if amax is not None:
                raise ValueError(f"{name} is only used with scaling='delayed'; this operand is not quantized")
            continue
        amax_arg(amax, q, name)
        quantizer_key_arg(key, q, "key")
    if key is not None:
        key_arg(key, True, "key", what="quantized_conv_general")
    if gemm.hadamard is not None and key is None:
        hadamard_signs(None, gemm.hadamard)  # raises for a size without fixed signs
    margin = int_arg(margin, "margin", minimum=-64, maximum=64)
    amaxes = tuple(
        None if q is None or q.scaling != "delayed" else jnp.asarray(amax).astype(F32)
        for q, amax in ((gemm.lhs, lhs_amax), (gemm.rhs, rhs_amax))
    )
    try:
        dtype = None if preferred_element_type is None else np.dtype(preferred_element_type)
    except TypeError:
        raise TypeError(
            f"preferred_element_type must be a float dtype or None, got {preferred_element_type!r}"
        ) from None
    keys = split_key(key)
    return quantized_conv_core(a, b, params, gemm, gemm.quantizers, keys, (amaxes[0], amaxes[1]), dtype, margin)
