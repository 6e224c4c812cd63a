"""`ScalifyConfig`: how `scalify` rounds scales, in a `contextvars` context (thread- and task-safe)."""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from fpemu._args import int_arg
from fpemu.scalify._pow2 import Pow2RoundMode, pow2_mode_arg

__all__ = ["ScalifyConfig", "get_scalify_config"]


@dataclasses.dataclass(frozen=True, slots=True)
class ScalifyConfig:
    """The configuration of `scalify`, also a context manager that makes it current.

    Fields:
      rounding_mode: how propagated scales are rounded to powers of two (`Pow2RoundMode`; default
        ``DOWN``, as jax-scalify). ``STOCHASTIC`` draws from ``seed`` (or the ``key`` given to
        `scalify`), folded with the rounding site and the value rounded: reproducible.
      scale_dtype: the dtype of the scales `scalify` creates for unscaled operands (None: the
        dtype of the other operands' scales, else of the operand itself).
      seed: the seed of ``STOCHASTIC`` rounding when `scalify` is given no key (keyword-only: jax-scalify's
        two fields may be given by position, in its order, as there).

    The configuration is read when a scalified function is traced or called, and it is part of
    the cache key of everything `scalify` compiles (nested ``jax.jit`` bodies). A ``jax.jit``
    around a scalified function caches its first trace: jit once per configuration.

    Example:
      >>> from fpemu import scalify as jsa
      >>> with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.NONE):
      ...     jsa.core.get_scalify_config().rounding_mode
      <Pow2RoundMode.NONE: 0>
      >>> jsa.core.get_scalify_config().rounding_mode
      <Pow2RoundMode.DOWN: 1>
    """

    rounding_mode: Pow2RoundMode = Pow2RoundMode.DOWN
    scale_dtype: Any = None
    _: dataclasses.KW_ONLY  # jax-scalify's two fields take positions, as there; fpemu's own are named
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "rounding_mode", pow2_mode_arg(self.rounding_mode, "ScalifyConfig.rounding_mode"))
        if self.scale_dtype is not None:
            dtype = np.dtype(self.scale_dtype)
            if not jnp.issubdtype(dtype, jnp.floating):
                raise ValueError(f"ScalifyConfig.scale_dtype must be a floating-point dtype or None, got {dtype}")
            object.__setattr__(self, "scale_dtype", dtype)
        object.__setattr__(self, "seed", int_arg(self.seed, "ScalifyConfig.seed", minimum=0, maximum=2**32 - 1))

    def __enter__(self) -> ScalifyConfig:
        token = _CONFIG.set(self)
        _TOKENS.set((*_TOKENS.get(), token))
        return self

    def __exit__(self, *exc: Any) -> None:
        tokens = _TOKENS.get()
        _TOKENS.set(tokens[:-1])
        _CONFIG.reset(tokens[-1])


_CONFIG: contextvars.ContextVar[ScalifyConfig] = contextvars.ContextVar("fpemu_scalify_config", default=ScalifyConfig())  # noqa: B039 - a frozen config
_TOKENS: contextvars.ContextVar[tuple] = contextvars.ContextVar("fpemu_scalify_config_tokens", default=())


def get_scalify_config() -> ScalifyConfig:
    """The current `ScalifyConfig` (the innermost ``with ScalifyConfig(...)``, else the default)."""
    return _CONFIG.get()
