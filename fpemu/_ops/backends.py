"""Which engine runs a rounding: the XLA path or a Pallas kernel, per platform, and where kernels compile.

`resolve_backend` turns `fpemu.quantize`'s ``backend=`` into the engine that runs; `interpret_mode`
turns a kernel's ``interpret=`` into interpret mode or a compiled kernel. Both read one fact: the
platform that compiles fpemu's Pallas kernels (`COMPILED_PLATFORM`: they are written for Triton).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

Backend = Literal["auto", "xla", "pallas"]
BACKENDS: tuple[str, ...] = ("auto", "xla", "pallas")

# The platform that compiles fpemu's Pallas kernels (fpemu.kernels): they are written for Triton.
COMPILED_PLATFORM = "gpu"

# What backend="auto" runs on each platform, from measurements (bench/RESULTS.md, "Backends"):
# - cpu: Pallas only interprets there (the kernel body becomes XLA ops in a loop over blocks),
#   measured 2-8x slower than the XLA path, never faster.
# - gpu: on an H200 (bench/RESULTS_gpu.md) the XLA path ran at 95% of the device's copy bandwidth
#   and the kernel at 89% (nearest-even; stochastic 75% and 64%): the XLA path, which also lets XLA
#   fuse the rounding into neighbouring ops.
# - tpu: the kernels are written for Triton (GPUs) only.
_AUTO_BACKEND = {"cpu": "xla", "gpu": "xla", "tpu": "xla"}


def resolve_backend(backend: Any, platform: str, float64: bool = False) -> str:
    """The engine that runs ``backend`` on ``platform`` for input of that width: "xla" or "pallas".

    Errors say why not. The Pallas kernels do not take float64 input when compiled: the
    Pallas-to-Triton lowering of jax 0.10 to 0.12 cannot emit uint64 constants with the top bit set
    (the sign mask of float64), so ``"auto"`` falls back to XLA there and ``"pallas"`` refuses
    (tests/kernels/test_triton_lowering.py pins the limitation).
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}; got {backend!r}")
    if backend == "auto":
        engine = _AUTO_BACKEND.get(platform, "xla")
        return "xla" if float64 else engine
    if backend == "pallas" and platform != COMPILED_PLATFORM:
        raise ValueError(
            f"backend='pallas' needs a GPU (fpemu's Pallas kernels are compiled with Triton), but JAX's "
            f"default backend is {platform!r}. Use backend='xla' or 'auto' (the same bits), or run the kernel "
            "in Pallas interpret mode with fpemu.kernels.quantize(..., interpret=True)"
        )
    if backend == "pallas" and float64:
        raise ValueError(
            "backend='pallas' does not take float64 input: Pallas cannot lower the float64 rounding to Triton "
            "(uint64 constants with the top bit set). Use backend='xla' or 'auto' (the same bits)"
        )
    return backend


def interpret_mode(interpret: Any, platform: str, *, kernel: str, xla_path: str) -> bool:
    """The validated ``interpret=`` of a kernel wrapper: None means interpret mode unless the
    platform compiles Pallas kernels; ``interpret=False`` elsewhere is a ValueError naming the
    kernel and its XLA counterpart."""
    if interpret is None:
        return platform != COMPILED_PLATFORM
    if not isinstance(interpret, (bool, np.bool_)):
        raise TypeError(f"interpret must be a bool or None, got {interpret!r}")
    if not interpret and platform != COMPILED_PLATFORM:
        raise ValueError(
            f"interpret=False: {kernel} compiles for GPUs (Triton) only, and the default backend is {platform!r}; "
            f"pass interpret=True (or None), or use {xla_path}"
        )
    return bool(interpret)


__all__ = ["BACKENDS", "COMPILED_PLATFORM", "Backend", "interpret_mode", "resolve_backend"]
