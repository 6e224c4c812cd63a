"""Why stochastic rounding matters: a running sum kept in bfloat16.

Add 0.001 ten thousand times to an accumulator stored in bf16. With round-to-nearest, once the sum
reaches a few units each increment is below half a bf16 ulp and the sum stops growing (stagnation).
With stochastic rounding each addition is unbiased, so the expected sum stays on track. This is the
effect that makes low-precision training with stochastic rounding work.

Run: python examples/stochastic_accumulation.py [--steps N]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

import fpemu


def accumulate(steps: int, increment: float, rounding: str, key: jax.Array) -> float:
    """Sum ``increment`` ``steps`` times, rounding the accumulator to bf16 after every addition."""

    def body(i, total):
        kw = {"key": jax.random.fold_in(key, i)} if rounding == "stochastic" else {}
        return fpemu.quantize(total + jnp.float32(increment), "bf16", rounding=rounding, **kw)

    return float(jax.lax.fori_loop(0, steps, body, jnp.float32(0.0)))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--increment", type=float, default=0.001)
    args = parser.parse_args(argv)
    exact = args.steps * args.increment
    print(f"sum of {args.steps} x {args.increment} (exact: {exact:g}), accumulator in bf16:")
    results = {}
    for rounding in ("nearest_even", "toward_zero", "stochastic"):
        total = accumulate(args.steps, args.increment, rounding, jax.random.key(0))
        results[rounding] = total
        print(f"  {rounding:<13} {total:10.4f}   relative error {abs(total - exact) / exact:7.2%}")
    return results


if __name__ == "__main__":
    main()
