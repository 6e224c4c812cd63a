"""What a GPU's FP8 GEMM computes: run the designed and random dot products of
tests/hopper_fp8_cases.py through ``jnp.dot`` of float8 operands with a float32 result, and record
the results for fpemu's model of the accumulator (tests/ops/test_hopper_fp8.py compares them).

Usage (on the GPU machine, from the repository root; then, on any machine, ``--export`` keeps what
the tests compare in tests/data/hopper_fp8.npz)::

    PYTHONPATH=. python3 bench/hopper_fp8_probe.py OUT.npz [--quick] [--random-from-k K]
    PYTHONPATH=. python3 bench/hopper_fp8_probe.py --export tests/data/hopper_fp8.npz RAW.npz [RAW.npz ...]

Records, in OUT.npz: the device, JAX version and which GEMM XLA chose (cuBLAS or Triton: the
custom call in the compiled program); for each designed set, the float32 results of its rows
(each row one dot product, computed as the diagonal of a (4096, K) @ (K, 4096) product: a shape
cuBLAS runs with its ordinary tensor-core kernels); for each random kind and K, the top-left
256 x 256 results of a (1024, K) @ (K, 1024) product and a SHA-256 of the whole product. With
``precision=HIGHEST`` the same, where it differs from the default.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import hopper_fp8_cases as cases

ROWS = 4096  # designed rows per product (the diagonal of ROWS x ROWS)
SIDE = 1024  # random products are SIDE x K @ K x SIDE
KEEP = 256  # of which the top-left KEEP x KEEP results are stored


def _dot(precision):
    def f(a, b):
        return lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=precision, preferred_element_type=jnp.float32)

    return jax.jit(f)


def _backend(fn, a, b, verbose: bool = False) -> str:
    """Which GEMM XLA compiled: the custom-call targets and fusion kinds of the optimized program
    (with ``verbose``, its custom-call and fusion lines too)."""
    text = fn.lower(a, b).compile().as_text()
    if verbose:
        for line in text.splitlines():
            if "custom-call" in line or "fusion(" in line or "__triton" in line:
                print("    |", line.strip()[:1500])
    targets = sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))
    kinds = sorted(set(re.findall(r'"kind":"([^"]+)"', text)))
    fast = sorted(set(re.findall(r'"(?:fast_accum|enable_fast_accum)":\s*([a-z]+)', text)))
    return f"targets={targets} kinds={kinds} fast_accum={fast}"


KEEP_IN_TESTS = 32  # random results kept as values in the tests' file (the rest as a SHA-256)


def export(out: str, raws: list[str]) -> None:
    """The tests' file from probe outputs: every designed result; of each random product, the top-left
    32 x 32 results and the SHA-256 of the recorded 256 x 256 block (`KEEP`)."""
    record: dict[str, np.ndarray] = {}
    for raw in raws:
        with np.load(raw) as data:
            for key in data.files:
                value = data[key]
                if key.startswith("random/") and not key.endswith("sha256"):
                    record[key + "/block_sha256"] = np.array(hashlib.sha256(value[:KEEP, :KEEP].tobytes()).hexdigest())
                    value = value[:KEEP_IN_TESTS, :KEEP_IN_TESTS]
                elif key.endswith("sha256"):
                    continue  # the whole product's hash: the tests recompute the stored block only
                record.setdefault(key, value)
    np.savez_compressed(out, **record)
    print(f"wrote {out}: {len(record)} arrays")


def main() -> None:
    if sys.argv[1:2] == ["--export"]:
        export(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--quick", action="store_true", help="small sets (checks the script on CPU)")
    parser.add_argument("--random-from-k", type=int, default=0, help="only the random sets from this K on")
    args = parser.parse_args()
    device = jax.devices()[0]
    record: dict[str, np.ndarray] = {
        "device": np.array(f"{device.platform} {device.device_kind}"),
        "jax": np.array(jax.__version__),
    }
    log = print
    log(f"device {device.platform} {device.device_kind}, jax {jax.__version__}")
    precisions = {"default": None, "highest": lax.Precision.HIGHEST}
    rows = 256 if args.quick else ROWS
    side, keep = (128, 64) if args.quick else (SIDE, KEEP)
    t0 = time.perf_counter()

    # designed sets
    for name, (a, b, _labels) in (cases.all_designed() if not args.random_from_k else {}).items():
        if args.quick:
            a, b = a[:300], b[:300]
        k = a.shape[1]
        chunks = -(-a.shape[0] // rows)
        pad = chunks * rows - a.shape[0]
        a8 = np.pad(a, ((0, pad), (0, 0))).astype(cases.E4M3)
        b8 = np.pad(b, ((0, pad), (0, 0))).astype(cases.E4M3)
        for mode, precision in precisions.items():
            fn = _dot(precision)
            out = []
            for c in range(chunks):
                x = jnp.asarray(a8[c * rows : (c + 1) * rows])
                y = jnp.asarray(b8[c * rows : (c + 1) * rows].T)
                if c == 0:
                    log(f"designed {name} K={k} {mode}: {_backend(fn, x, y, verbose=name == 'align')}")
                out.append(np.diagonal(np.asarray(fn(x, y))))
            res = np.concatenate(out)[: a.shape[0]]
            if mode == "default":
                record[f"designed/{name}"] = res
            elif not np.array_equal(res.view(np.uint32), record[f"designed/{name}"].view(np.uint32)):
                record[f"designed/{name}/{mode}"] = res
                log(f"  {mode} differs from default on {np.sum(res != record[f'designed/{name}'])} rows")
        # the same rows at another shape (1024 rows a product): does the kernel choice change bits?
        small = 1024 if not args.quick else 128
        fn = _dot(None)
        n = min(a.shape[0], 4 * small)
        out = []
        for c in range(-(-n // small)):
            x = jnp.asarray(a8[c * small : (c + 1) * small])
            y = jnp.asarray(b8[c * small : (c + 1) * small].T)
            out.append(np.diagonal(np.asarray(fn(x, y))))
        other = np.concatenate(out)[:n]
        same = np.array_equal(other.view(np.uint32), record[f"designed/{name}"][:n].view(np.uint32))
        log(f"  at {small} rows a product: {'same bits' if same else 'DIFFERENT bits'} on the first {n} rows")
        if not same:
            record[f"designed/{name}/shape{small}"] = other
        log(f"  [{time.perf_counter() - t0:.1f} s]")
        np.savez_compressed(args.out, **record)  # kept if a time limit stops the run later

    # random sets
    combos = [("e4m3fn", "e4m3fn", k) for k in cases.RANDOM_KS]
    combos += [("e5m2", "e4m3fn", 128), ("e4m3fn", "e5m2", 128), ("e5m2", "e5m2", 128), ("e5m2", "e4m3fn", 1024)]
    dtypes = {"e4m3fn": cases.E4M3, "e5m2": cases.E5M2}
    for lhs, rhs, k in combos:
        if (args.quick and k > 256) or k < args.random_from_k:
            continue
        for kind in cases.RANDOM_KINDS:
            if (lhs, rhs) != ("e4m3fn", "e4m3fn") and kind != "normal":
                continue
            a, _ = cases.random_operands(kind, side, side, k, 1, dtypes[lhs])
            _, b = cases.random_operands(kind, side, side, k, 2, dtypes[rhs])
            x, y = jnp.asarray(a.astype(dtypes[lhs])), jnp.asarray(b.astype(dtypes[rhs]))
            key = f"random/{lhs}/{rhs}/{kind}/{k}"
            for mode, precision in precisions.items():
                fn = _dot(precision)
                if kind == cases.RANDOM_KINDS[0]:
                    log(f"{key} {mode}: {_backend(fn, x, y)}")
                full = np.asarray(fn(x, y))
                digest = hashlib.sha256(full.tobytes()).hexdigest()
                if mode == "default":
                    record[key] = full[:keep, :keep]
                    record[key + "/sha256"] = np.array(digest)
                elif digest != str(record[key + "/sha256"]):
                    record[f"{key}/{mode}"] = full[:keep, :keep]
                    record[f"{key}/{mode}/sha256"] = np.array(digest)
                    log(f"  {key}: {mode} differs from default")
        log(f"  [{time.perf_counter() - t0:.1f} s]")
        np.savez_compressed(args.out, **record)
    np.savez_compressed(args.out, **record)
    log(f"wrote {args.out} ({len(record)} arrays) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
