"""Delayed scaling: quantize with a scale computed from the amax history of earlier steps.

A functional state (`DelayedScalingState`) is passed in and a new one returned, as FP8 training
block formats do (Transformer Engine's ``DelayedScaling``, flax's fp8 ops); nothing is stored globally.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, cast, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from fpemu._args import axis_arg, choice_arg, float32_array, int_arg
from fpemu._core.modes import Rounding
from fpemu._jax.elementwise import select
from fpemu._scaled import bits as _bits
from fpemu._scaled.bits import ABS, INF, U32
from fpemu._scaled.block_format import BlockFormat, BlockFormatLike, block_format_arg
from fpemu._scaled.cores import Config, decode_scale_bits, qdq_jit, scale_of_amax, with_overrides
from fpemu._scaled.layout import Layout, group_max, group_shape
from fpemu.deprecation import renamed_keyword, warn_renamed
from fpemu.scaled._array import BlockArray, quantize_jit
from fpemu.scaled._quantize import prepare, prepare_random

F32 = jnp.float32
Reduction = Literal["max", "most_recent"]
REDUCTIONS: tuple[str, ...] = get_args(Reduction)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["amax_history", "scale"], meta_fields=[])
@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class DelayedScalingState:
    """The state of delayed scaling, a pytree of two float32 arrays.

    ``amax_history``: shape ``(history_length, *scale_shape)``, row 0 the most recent step's amax
    (NaN or inf if that step's group held one). ``scale``: the decode scale the next step uses,
    in `BlockArray`'s scale shape (``(1,) * ndim`` per tensor).
    """

    amax_history: jax.Array
    scale: jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DelayedScaling:
    """Delayed scaling: each step is quantized with the scale derived from the amax history so far.

    Step ``t`` quantizes ``x_t`` with ``state.scale`` (computed at step ``t - 1``), then pushes
    ``amax(x_t)`` into the history and computes the next scale from the reduced history with the
    block format's rule (and margin). While the reduced amax is 0 or not finite, the scale is kept. The
    initial state has scale 1 and a zero history.

    For ``"float"`` block formats the elements are ``round(fl(x * fl(1 / scale)))``: the decode scale is
    what the state holds, as in flax (``x / scale``, which XLA compiles to that product).

    Args:
      block_format: a single-level block format (name or `BlockFormat`): float32 or E8M0 scales, any granularity.
      history_length: how many steps the history keeps (>= 1).
      reduction: ``"max"`` (the largest amax in the history) or ``"most_recent"``.
      axis: the axis of per-slice or block scales, or None for one scale per tensor.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import scaled
      >>> ds = scaled.DelayedScaling(block_format="fp8_e4m3", history_length=4)
      >>> state = ds.init(jnp.zeros(3))
      >>> y, state = ds.quantize_dequantize(jnp.array([1.0, 2.0, 896.0]), state)   # scale 1: 896 saturates
      >>> y.tolist(), state.scale.tolist()
      ([1.0, 2.0, 448.0], [2.0])
      >>> y, state = ds.quantize_dequantize(jnp.array([1.0, 2.0, 896.0]), state)   # now scaled by 2
      >>> y.tolist()
      [1.0, 2.0, 896.0]
    """

    block_format: BlockFormatLike = "fp8_e4m3"
    history_length: int = 1024
    reduction: Reduction = "max"
    axis: int | None = None

    def __post_init__(self) -> None:
        block_format = block_format_arg(self.block_format)
        if block_format.scale_kind == "narrow":
            raise ValueError(
                f"DelayedScaling needs a single-level block format (float32 or E8M0 scales), got {block_format.name} "
                f"with {block_format.scale_format.name} block scales"
            )
        object.__setattr__(self, "block_format", block_format)
        object.__setattr__(self, "history_length", int_arg(self.history_length, "history_length", minimum=1))
        choice_arg(self.reduction, REDUCTIONS, "reduction")
        if self.axis is not None:
            object.__setattr__(self, "axis", int_arg(self.axis, "axis"))
        if self.axis is None and block_format.block_size is not None:
            raise ValueError(
                f"block format {block_format.name} has blocks along an axis: axis must be an int, not None"
            )

    @property
    def recipe(self) -> BlockFormat:
        """Deprecated: `block_format` (the name of an earlier release; warns)."""
        warn_renamed("DelayedScaling.recipe", "DelayedScaling.block_format")
        return cast(BlockFormat, self.block_format)

    def _layout(self, shape: tuple[int, ...]) -> Layout:
        axis = None if self.axis is None else self.axis % len(shape)
        return Layout(axis, block_format_arg(self.block_format).block_size)  # a BlockFormat since __post_init__

    def init(self, x: jax.Array | np.ndarray | tuple[int, ...]) -> DelayedScalingState:
        """The initial state for arrays shaped like ``x`` (an array or a shape): scale 1, zero history."""
        shape = tuple(x) if isinstance(x, (tuple, list)) else tuple(np.shape(x))
        if self.axis is not None:
            axis_arg(self.axis, len(shape), of=f"shape {shape}")
        gshape = group_shape(shape, self._layout(shape))
        return DelayedScalingState(jnp.zeros((self.history_length, *gshape), F32), jnp.ones(gshape, F32))

    def _config(
        self, x: Any, rounding: Any, key: Any, random_bits: Any, random: Any = None
    ) -> tuple[jax.Array, Config]:
        return prepare(x, self.block_format, self.axis, rounding, key, random_bits, True, {}, random=random)

    def _check_state(self, x: jax.Array, state: DelayedScalingState) -> None:
        if not isinstance(state, DelayedScalingState):
            raise TypeError(
                f"state must be a DelayedScalingState (make the first one with init(x)), got {type(state).__name__}"
            )
        gshape = group_shape(x.shape, self._layout(x.shape))
        if tuple(state.scale.shape) != gshape or tuple(state.amax_history.shape) != (self.history_length, *gshape):
            raise ValueError(
                f"state does not fit x of shape {x.shape}: expected scale {gshape} and history "
                f"{(self.history_length, *gshape)}, got {tuple(state.scale.shape)} and "
                f"{tuple(state.amax_history.shape)} (make it with init(x))"
            )

    def update(self, x: jax.Array | np.ndarray, state: DelayedScalingState) -> DelayedScalingState:
        """The next state: ``amax(x)`` pushed into the history, and the scale recomputed from it."""
        x, cfg = self._config(x, "nearest_even", None, None)
        self._check_state(x, state)
        return _update(x, state, cfg, self.reduction)

    def quantize(
        self,
        x: jax.Array | np.ndarray,
        state: DelayedScalingState,
        *,
        rounding: Rounding = "nearest_even",
        key: jax.Array | None = None,
        random_bits: int | None = None,
        random: ArrayLike | None = None,
    ) -> tuple[BlockArray, DelayedScalingState]:
        """(``x`` quantized with ``state.scale``, the next state); ``random``: instead of ``key``, the
        elements' random bits, as `BlockArray.from_array` takes them."""
        x, cfg = self._config(x, rounding, key, random_bits, random)
        self._check_state(x, state)
        sa = quantize_jit(x, prepare_random(key, random, x, cfg), jax.lax.stop_gradient(state.scale), cfg, x.dtype)
        return sa, _update(x, state, cfg, self.reduction)

    def quantize_dequantize(
        self,
        x: jax.Array | np.ndarray,
        state: DelayedScalingState,
        *,
        rounding: Rounding = "nearest_even",
        key: jax.Array | None = None,
        random_bits: int | None = None,
        random: ArrayLike | None = None,
    ) -> tuple[jax.Array, DelayedScalingState]:
        """(``x`` quantized with ``state.scale`` and dequantized, the next state); straight-through
        gradient; ``random`` as in `quantize`."""
        x, cfg = self._config(x, rounding, key, random_bits, random)
        self._check_state(x, state)
        y = qdq_jit(x, prepare_random(key, random, x, cfg), jax.lax.stop_gradient(state.scale), cfg)
        return y, _update(x, state, cfg, self.reduction)


# ``DelayedScaling(recipe=...)``, the field's name of an earlier release, is taken for one release.
DelayedScaling.__init__ = renamed_keyword("recipe", "block_format", "fpemu.scaled.DelayedScaling")(  # type: ignore[method-assign]
    DelayedScaling.__init__
)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _update(x: jax.Array, state: DelayedScalingState, cfg: Config, reduction: str) -> DelayedScalingState:
    block_format = cfg.block_format
    layout = Layout(cfg.axis, block_format.block_size)
    xb = _bits.to_bits(jax.lax.stop_gradient(x).astype(F32))
    amax = group_max(xb & U32(ABS), layout)
    old = _bits.to_bits(jax.lax.stop_gradient(state.amax_history))
    history = jnp.concatenate([amax[None], old[:-1]], axis=0)
    reduced = jnp.max(history, axis=0) if reduction == "max" else history[0]  # NaN bit patterns win
    keep = (reduced == U32(0)) | (reduced >= U32(INF))
    scale = select(keep, _bits.to_bits(state.scale), decode_scale_bits(reduced, block_format))
    return DelayedScalingState(_bits.from_bits(history), _bits.from_bits(scale))


def scale_from_amax(amax: ArrayLike, block_format: BlockFormatLike, *, margin: int | None = None) -> jax.Array:
    """The float32 decode scale that ``block_format``'s rule (and margin) gives an amax: the scale of
    delayed scaling, computed from an amax history's reduced value instead of the tensor's own amax.

    Special values first: a NaN or infinite amax gives a NaN scale (as a group holding NaN or ±inf
    under current scaling); an amax of 0 (an empty history) gives 1, Transformer Engine's initial
    scale; the sign is ignored (|amax|). Otherwise the scale is the one current scaling gives a group
    whose largest magnitude is ``amax``, bit for bit: ``2**k`` for power-of-two scale formats (E8M0's
    ``2**-127`` included, as a float32 subnormal), ``fl(1 / enc)`` with ``enc = fl(M / amax)``
    clipped for the ``"float"`` rule, where a subnormal amax is exact too. Elementwise over ``amax``.

    Args:
      amax: the amax (float16, bfloat16 or float32; any shape, one scale per element).
      block_format: a single-level `BlockFormat` or its name (float32 or E8M0 scales); a two-level one
        (NVFP4's E4M3 block scales under a tensor scale) needs both amaxes and is refused.
      margin: overrides the block format's ``margin`` (scales times ``2**margin``), as in
        `quantize_dequantize`; None keeps it.

    Raises:
      TypeError: a non-floating ``amax``, a float64 JAX array, or host float64 data (Python floats,
        NumPy float64) that float32 does not hold exactly.
      ValueError: a block format with narrow (two-level) scales; a margin outside [-64, 64]; an unknown
        name (`UnknownBlockFormatError`).

    Example:
      >>> import jax.numpy as jnp
      >>> scale_from_amax(jnp.array([1792.0, 0.0, jnp.inf]), "fp8_e4m3").tolist()  # 1792 / 448 = 4
      [4.0, 1.0, nan]
      >>> scale_from_amax(jnp.float32(1.0), "mxfp8").item()  # 2**(0 - 8): E4M3's emax is 8
      0.00390625
    """
    fmt = with_overrides(block_format, {"margin": margin})
    if fmt.scale_kind == "narrow":
        raise ValueError(
            f"scale_from_amax: block_format {fmt.name!r} has narrow ({fmt.scale_format.name}) block scales under a "
            "tensor scale: two amaxes make its scales; give a block format with float32 or E8M0 scales"
        )
    return scale_of_amax(float32_array(amax, "amax").astype(F32), fmt)
