"""What a sweep over seeds pays in compile time: a key made outside the jitted step against a key passed to it, and JAX's persistent compilation cache.

Usage::

    PYTHONPATH=. python3 bench/sweep_compile.py [--model mlp|transformer] [--recipe nvfp4] [--seeds 3]

The step is bench/training_sweep.py's (the digits MLP's Adam step, or the transformer block's), under
``Policy(dot=recipe)`` (a recipe with stochastic rounding, which needs a key). Rows, each a first call
(trace, lower, compile and one step) in seconds:

- ``key outside``: ``jax.jit(emulate(step, policy, key=jax.random.key(seed)))`` per seed: the key is a
  constant of the program, so each seed compiles it again;
- ``key as argument``: one ``jax.jit`` of ``lambda key, *a: emulate(step, policy, key=key)(*a)``, called
  with each seed's key: compiled once (docs/training.md, "Sweeps: compile once");
- ``persistent cache, cold`` / ``warm``: the ``key as argument`` step's first call in two fresh
  processes sharing a temporary ``jax_compilation_cache_dir``.

The same seed gives the same bits in both forms (checked here, and by
tests/training/test_emulate_training.py). Times are as noisy as the machine; compare rows of one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import training_sweep

import fpemu
from fpemu.tools.bench import machine_line


def _timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, out


def _keyed(step, policy):
    return jax.jit(lambda key, *a: fpemu.emulate(step, policy, key=key)(*a))


def _first_call_in_a_process(model: str, recipe: str, cache: str) -> float:
    """The ``key as argument`` step's first call in a fresh Python process with the persistent cache in ``cache``."""
    out = subprocess.run(
        [sys.executable, __file__, "--model", model, "--recipe", recipe, "--child-cache", cache],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(training_sweep.MODELS), default="mlp")
    parser.add_argument("--recipe", default="nvfp4", choices=list(fpemu.TRAINING_RECIPES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--child-cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    step, call_args = training_sweep.MODELS[args.model]()
    policy = fpemu.Policy(dot=args.recipe)
    if not policy.stochastic:
        parser.error(f"--recipe {args.recipe} takes no key; choose a recipe with stochastic rounding (nvfp4)")
    if args.child_cache:
        jax.config.update("jax_compilation_cache_dir", args.child_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        print(_timed(_keyed(step, policy), jax.random.key(0), *call_args)[0])
        return
    print(machine_line())
    print(f"model {args.model}, Policy(dot={args.recipe!r}); seconds of each first call")
    keyed = _keyed(step, policy)
    print("| seed | key outside | key as argument | same bits |")
    print("|---:|---:|---:|---|")
    for seed in range(args.seeds):
        key = jax.random.key(seed)
        outside, a = _timed(jax.jit(fpemu.emulate(step, policy, key=key)), *call_args)
        argument, b = _timed(keyed, key, *call_args)
        same = all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
        print(f"| {seed} | {outside:.2f} | {argument:.2f} | {same} |")
    with tempfile.TemporaryDirectory() as cache:
        cold = _first_call_in_a_process(args.model, args.recipe, cache)
        warm = _first_call_in_a_process(args.model, args.recipe, cache)
    print(f"\npersistent compilation cache, key as argument, seed 0: cold {cold:.2f} s, warm {warm:.2f} s")


if __name__ == "__main__":
    main()
