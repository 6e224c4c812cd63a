"""`fpemu.quantize` as a Pallas kernel, bit-identical to the XLA path: the public wrapper.

The kernel itself (`quantize_pallas`, its `BlockSizes`) is the engine of ``fpemu.quantize(backend=
"pallas")`` and lives beside the XLA path in the ops layer (`fpemu._ops.quantize_pallas`); this
module adds the argument checks and interpret mode, and the plain-JAX reference. Stochastic
rounding draws its bits from the same counter-based hash of (key, global element index) as the XLA
path, so the result depends neither on the backend nor on the block size.

Status: tested in Pallas interpret mode on CPU (every format, mode, saturate and subnormal option
on the exhaustive 16-bit input sets), its lowering to a Triton kernel checked in CI
(tests/kernels/test_triton_lowering.py), and run compiled on an H200: bit-identical to the XLA
path, at 89% of the device's copy bandwidth against the XLA path's 95% (bench/RESULTS_gpu.md). So
`fpemu.quantize(backend="auto")` uses the XLA path everywhere; ``backend="pallas"`` runs this
kernel (`quantize_pallas`, with the platform's default blocks).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from fpemu._args import check_fits, float_array, input_format, is_host_float64
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import FormatLike
from fpemu._ops.backends import interpret_mode
from fpemu._ops.quantize import quantize
from fpemu._ops.quantize_pallas import BlockSizes, quantize_pallas
from fpemu._ops.rounding_spec import RoundingSpec, round_bits, rounding_spec, seeds_for


def quantize_kernel(
    x: ArrayLike,
    fmt: FormatLike,
    *,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    key: jax.Array | None = None,
    random_bits: int | None = None,
    random: Any = None,
    stochastic_variant: StochasticVariant = "floor",
    exponent_ties: ExponentTies = "away",
    block_sizes: BlockSizes | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """`fpemu.quantize` as a Pallas kernel: the same semantics and the same bits.

    NaN, ±inf, -0, overflow and subnormals behave exactly as in `fpemu.quantize`. Stochastic
    rounding uses the same random bits (a hash of the key and the global element index), or the
    bits given as ``random``, as `fpemu.quantize` does.

    Args:
      x: float16, bfloat16 or float32 array, any shape (float64 in interpret mode only: Pallas
        cannot lower the float64 rounding to Triton). Host float64 data (a Python float or list,
        a NumPy float64 array) while x64 is disabled is rounded once from its float64 value on the
        XLA path, as `fpemu.quantize` does, and returned as float32.
      fmt, rounding, saturate, subnormals, key, random_bits, random, stochastic_variant, exponent_ties: as
        for `fpemu.quantize` (``random``: instead of ``key``, integers in ``[0, 2**random_bits)``
        broadcastable to ``x``; ``key=key`` gives the result of
        ``random=fpemu.stochastic_bits(key, x.shape, random_bits)``).
      block_sizes: elements per grid step; default `BlockSizes.default` for the platform.
      interpret: run in Pallas interpret mode (default: on CPU, where nothing else can run it).

    Raises:
      TypeError, ValueError: as `fpemu.quantize`, and for a bad ``block_sizes`` or ``interpret``
        (``interpret=False`` off a GPU: the kernel is compiled with Triton).

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu.kernels import quantize_kernel
      >>> quantize_kernel(jnp.array([1.0625, 464.0, 500.0]), "e4m3fn", interpret=True).tolist()
      [1.0, 448.0, nan]
      >>> x = jnp.full(4, 1.1)  # e2m1fn neighbours 1.0 and 1.5: f = 0.2, 2 random bits per element
      >>> quantize_kernel(x, "e2m1fn", rounding="stochastic", random=jnp.array([0, 1, 2, 3]), random_bits=2,
      ...                 stochastic_variant="nearest_even", interpret=True).tolist()
      [1.0, 1.0, 1.0, 1.5]
    """
    spec = rounding_spec(
        fmt, rounding, saturate, subnormals, key, random_bits, random=random, stochastic_variant=stochastic_variant,
        exponent_ties=exponent_ties,
    )  # fmt: skip
    if is_host_float64(x):  # x64 off: rounded once from float64, on the XLA path, as fpemu.quantize does
        options = {**spec.engine_options(), "random_bits": random_bits}
        return quantize(x, spec.fmt, key=key, random=random, **options, backend="xla")
    x = float_array(x)
    check_fits(spec.fmt, input_format(x.dtype))
    platform = jax.default_backend()
    if block_sizes is None:
        block_sizes = BlockSizes.default(platform)
    elif not isinstance(block_sizes, BlockSizes):
        raise TypeError(f"block_sizes must be a fpemu.kernels.quantize.BlockSizes, got {type(block_sizes).__name__}")
    interpret = interpret_mode(interpret, platform, kernel="fpemu.kernels.quantize_kernel", xla_path="fpemu.quantize")
    if not interpret and x.dtype == jnp.float64:
        raise ValueError(
            "x: float64 input does not compile: Pallas cannot lower the float64 rounding to Triton (uint64 "
            "constants with the top bit set); pass interpret=True, or use fpemu.quantize (the XLA path)"
        )
    seeds = seeds_for(spec, key, random, x.shape)
    return quantize_pallas(x, seeds, spec=spec, block_sizes=block_sizes, interpret=interpret)


def quantize_reference(x: jax.Array, seeds: jax.Array, spec: RoundingSpec) -> jax.Array:
    """Plain-JAX reference with the kernel's semantics: the XLA path of `fpemu.quantize`."""
    src = input_format(x.dtype)
    return lax.bitcast_convert_type(round_bits(x, seeds, spec, "src_bits").astype(src.code_dtype), x.dtype)


__all__ = ["BlockSizes", "quantize_kernel", "quantize_pallas", "quantize_reference"]
