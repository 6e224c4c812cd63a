"""``jnp.where``, ``jnp.clip`` and ``jnp.pad`` for the integer-heavy code that is traced once per quantizer
call: the same results, without a nested ``jit`` per call.

``jnp.where`` and ``jnp.clip`` are jitted functions. Under a trace each call goes through ``jit``'s
Python path, traces a small jaxpr for every new shape and dtype, and leaves a ``jit`` equation that
lowering emits as a function of its own. A block quantizer calls them 15-20 times, and a training
step traces a quantizer for each of its GEMM operands (36 in bench/transformer_block.py): without
them, tracing and lowering a recipe's step makes 8-21% fewer Python calls (bench/RESULTS_training.md,
"Trace and lowering"). `select` and `clamp` bind ``lax.select_n`` and ``lax.clamp`` directly: the same
computation in the compiled program, fewer and cheaper equations in the jaxpr.

They take what the callers give (no dtype promotion: both branches of `select` and all three
operands of `clamp` share one dtype, a Python scalar taking the array's), and raise a TypeError
otherwise, so that a mixed-dtype call cannot silently change a value.

The same holds for ``jnp``'s operators: ``a & b``, ``a >> b``, ``a - b``, ``a < b``, ``~a`` and
``jnp.maximum`` on a tracer are jitted functions, and each new combination of shapes and dtypes traces a
jaxpr of its own (about 1 ms on the 2-core machines, against 0.05-0.1 ms for the equation itself). The
paths that every quantizer takes (`fpemu._scaled`'s bit arithmetic and scales,
`fpemu._engine.convert.round_narrow`, `fpemu._engine.stochastic` and `fpemu._engine.rng`'s hash, the
maxima of `fpemu._jax.reduce`, the accumulator's zeros and scales, the Hadamard transform's butterflies)
therefore binds ``lax`` functions with NumPy scalar constants of the operand's dtype
(``lax.bitwise_and(b, U32(SIGN))``): the same equations in the same order, so the same program, bit for
bit (the jaxprs of 366 programs compared as text on jax 0.10.2 and 0.12), and 15-40% less tracing of a
recipe's training step (bench/RESULTS_training.md, "twenty-second session"). ``lax`` does no dtype
promotion and broadcasts only dimensions of size 1 of equal ranks: a mismatch is a TypeError at trace
time, never a silently different value.

The package's whole quantization path is written so: `fpemu.quantize` in every rounding mode and stochastic
variant, `fpemu.encode` and `fpemu.decode`, `fpemu.scaled.quantize_dequantize` and `fpemu.scaled.BlockArray`
(its values, decode scales and codes) for every block format, `fpemu.matmul`'s accumulators (the FP8 tensor
core's too), and a training step under `fpemu.emulate` with any training recipe, with or without
``with_stats`` (besides the quantizers: the keys folded for each GEMM and site, amax statistics and delayed
scaling's histories, the counts of the statistics, the Hadamard transform's signs, the chunked sums' slices,
the materializations' predicate, zero padding by `pad_zeros`). tests/jax/test_elementwise.py checks that none
of them calls a jitted ``jnp`` function from the package while traced. Where the rewrite changed a program, it
changed only how it is written: ``jnp.pad``, ``jnp.isinf`` and ``jnp.where`` left a nested ``jit`` that XLA
inlines, a chunk's start took three equations to allow negative starts it never has, and an amax vector and an
operand's element count were scatters rather than a pad and a concatenation (bench/RESULTS_training.md,
"twenty-third session"). `fpemu.scalify`'s rules compute their scales on NumPy values (static) and JAX arrays
alike, through `fpemu.scalify._arith`'s functions, which bind ``lax`` for JAX arrays in the same way; so do the
error metrics `fpemu.scaled.qsnr` and `fpemu.scaled.relative_error` (bench/RESULTS_training.md, "twenty-fifth
session"). The one path that still uses the operators is `fpemu.find_nonfinite`, which runs eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax import lax

__all__ = ["clamp", "pad_zeros", "select"]


def select(cond: Any, on_true: Any, on_false: Any) -> jax.Array:
    """``jnp.where(cond, on_true, on_false)``: elementwise, ``on_true`` where the boolean ``cond`` holds.

    The three broadcast as NumPy arrays do. ``on_true`` and ``on_false`` must have one dtype; a Python
    scalar takes the other operand's (NaN and infinities included, as a float constant of that dtype).

    Raises:
      TypeError: a non-boolean ``cond``, branches of two dtypes, or two Python scalars (no dtype).

    Example:
      >>> import jax.numpy as jnp
      >>> select(jnp.array([True, False]), jnp.array([1, 2], jnp.int32), 0).tolist()
      [1, 0]
    """
    cond_dtype = np.dtype(np.bool_) if isinstance(cond, bool) else _dtype_of(cond)
    if cond_dtype != np.bool_:
        raise TypeError(f"select: cond must be boolean, got {cond_dtype or type(cond).__name__}")
    on_true, on_false = _same_dtype("select", on_true, on_false)
    shape = np.broadcast_shapes(np.shape(cond), np.shape(on_true), np.shape(on_false))
    return lax.select(_broadcast(cond, shape), _broadcast(on_true, shape), _broadcast(on_false, shape))


def clamp(x: Any, lo: Any, hi: Any) -> jax.Array:
    """``jnp.clip(x, lo, hi)`` for an integer ``x`` (``lo <= hi``): ``min(max(x, lo), hi)`` elementwise.

    ``lo`` and ``hi`` are scalars: Python ints (taking ``x``'s dtype) or scalars of ``x``'s dtype.
    Integers only, so that no NaN question arises (``lax.clamp`` and ``jnp.clip`` may treat NaN bounds
    differently).

    Raises:
      TypeError: a float ``x``, a bound of another dtype, or a bound that is not a scalar.

    Example:
      >>> import jax.numpy as jnp
      >>> clamp(jnp.array([-5, 3, 40], jnp.int32), 0, 31).tolist()
      [0, 3, 31]
    """
    dtype = _dtype_of(x)
    if dtype is None or not np.issubdtype(dtype, np.integer):
        raise TypeError(f"clamp: x must be an integer array, got {dtype or type(x).__name__}")
    bounds = []
    for name, bound in (("lo", lo), ("hi", hi)):
        if np.ndim(bound) != 0:
            raise TypeError(f"clamp: {name} must be a scalar, got shape {np.shape(bound)}")
        _, bound = _same_dtype("clamp", x, bound)
        bounds.append(bound)
    return lax.clamp(bounds[0], x, bounds[1])


def pad_zeros(x: jax.Array, pads: Sequence[tuple[int, int]]) -> jax.Array:
    """``jnp.pad(x, pads)`` (zeros of ``x``'s dtype, ``pads`` one ``(before, after)`` pair per axis): one ``pad``
    equation, where ``jnp.pad`` leaves a nested ``jit`` and traces it for every new shape.

    Example:
      >>> import jax.numpy as jnp
      >>> pad_zeros(jnp.array([[1, 2]], jnp.uint32), [(0, 1), (1, 0)]).tolist()
      [[0, 1, 2], [0, 0, 0]]
    """
    if len(pads) != np.ndim(x):
        raise ValueError(
            f"pad_zeros: pads must have one (before, after) pair per axis of x, got {len(pads)} for {np.ndim(x)}"
        )
    return lax.pad(x, np.zeros((), x.dtype), [(int(before), int(after), 0) for before, after in pads])


def _dtype_of(value: Any) -> np.dtype | None:
    """The dtype of an array or NumPy scalar; None for a Python scalar."""
    dtype = getattr(value, "dtype", None)
    return None if dtype is None else np.dtype(dtype)


def _same_dtype(name: str, a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` of one dtype: a Python scalar becomes a NumPy scalar of the other's dtype."""
    da, db = _dtype_of(a), _dtype_of(b)
    if da is None and db is None:
        raise TypeError(f"{name}: give at least one operand a dtype (got two Python scalars)")
    if da is None:
        assert db is not None
        return _typed(a, db, name), b
    if db is None:
        return a, _typed(b, da, name)
    if da != db:
        raise TypeError(f"{name}: operands must have one dtype, got {da} and {db}")
    return a, b


def _typed(value: Any, dtype: np.dtype, name: str) -> np.ndarray:
    """The Python scalar ``value`` as a NumPy scalar of ``dtype``, refused where it would change."""
    refused = TypeError(f"{name}: {value!r} is not a {dtype} value")
    try:
        typed = np.asarray(value, dtype=dtype)
    except OverflowError:  # NumPy 2: an int outside the dtype's range
        raise refused from None
    # read back as a Python number (bfloat16, kind "V", has no exact .item()), compared exactly
    back = float(typed) if typed.dtype.kind == "V" or isinstance(value, float) else typed.item()
    if not (back == value or (back != back and value != value)):  # NaN stays NaN
        raise refused
    return typed


def _broadcast(value: Any, shape: tuple[int, ...]) -> Any:
    """``value`` broadcast to ``shape`` (trailing dimensions aligned, as NumPy's broadcasting)."""
    if np.shape(value) == shape:
        return value
    ndim = np.ndim(value)
    return lax.broadcast_in_dim(value, shape, tuple(range(len(shape) - ndim, len(shape))))
