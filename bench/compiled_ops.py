"""Count the instructions of the compiled `fpemu.quantize` for a few formats and modes.

A deterministic check that a refactoring did not change the computation (timings on a shared 2-core
machine are noisy): ``python bench/compiled_ops.py new`` counts the installed fpemu;
``python bench/compiled_ops.py old`` counts a checkout at /tmp/baseline (``git worktree add
/tmp/baseline <commit>``), with the editable install's finder removed. bench/RESULTS.md records a run.
"""

import importlib
import sys

FORMATS = ("e4m3fn", "e5m2", "e2m1fn", "bf16", "e8m0fnu")
MODES = ("nearest_even", "stochastic", "toward_zero")


def instructions(hlo_text: str) -> int:
    """Instructions of an optimized HLO module (parameters and the ENTRY line not counted)."""
    return sum(
        1 for line in hlo_text.splitlines() if " = " in line and "ENTRY" not in line and "parameter(" not in line
    )


def main(which: str) -> None:
    if which == "old":
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
        sys.path.insert(0, "/tmp/baseline")
    jax = importlib.import_module("jax")
    fpemu = importlib.import_module("fpemu")
    x = jax.numpy.ones((1024,), jax.numpy.float32)
    key = jax.random.key(0)
    for fmt in FORMATS:
        for mode in MODES:
            if mode == "stochastic":
                lowered = jax.jit(lambda v, k, f=fmt: fpemu.quantize(v, f, rounding="stochastic", key=k)).lower(x, key)
            else:
                lowered = jax.jit(lambda v, f=fmt, m=mode: fpemu.quantize(v, f, rounding=m)).lower(x)
            print(fmt, mode, instructions(lowered.compile().as_text()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "new")
