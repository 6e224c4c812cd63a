"""quantize, matmul and conv on arrays sharded over 8 simulated CPU devices: bitwise identical to one device.

The sharded runs happen in a subprocess started with ``--xla_force_host_platform_device_count=8``, so
that the flag does not leak into the other tests. The subprocess writes its results to an .npz file;
this process recomputes every case on its single device and compares the bits. The case definitions
(`CASES_SOURCE`) are executed in both processes, so the inputs and options are the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.long  # run first (tests/conftest.py)

# Executed in both processes: the inputs, and the functions of (global) arrays that are compared.
CASES_SOURCE = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, fpemu

    KEY = jax.random.key(42)


    def inputs():
        rng = np.random.default_rng(7)

        def friendly(shape):  # FP8-rounded products of these sum exactly in float32, in any order
            return (rng.uniform(0.25, 3.75, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)

        return dict(
            x=(rng.standard_normal((64, 48)) * 100).astype(np.float32),
            a=friendly((64, 96)), b=friendly((96, 40)),
            an=rng.standard_normal((64, 96)).astype(np.float32), bn=rng.standard_normal((96, 40)).astype(np.float32),
            img=friendly((8, 3, 10, 10)), ker=friendly((16, 3, 3, 3)),
        )


    def mm(**options):
        return lambda a, b: fpemu.matmul(a, b, **options)


    CASES = {  # name: (input names, function)
        "quantize_nearest": (("x",), lambda x: fpemu.quantize(x, "e4m3fn")),
        "quantize_stochastic": (("x",), lambda x: fpemu.quantize(x, "e5m2", rounding="stochastic", key=KEY)),
        "matmul_fp8_fast_path": (("a", "b"), mm(lhs="e4m3fn", rhs="e5m2", out="bf16")),
        "matmul_stochastic_bf16_accumulator": (("an", "bn"), mm(
            lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=1, out="e4m3fn", rounding="stochastic",
            accumulate_rounding="stochastic", key=KEY)),
        "matmul_fp16_accumulator_every_4": (("a", "b"), mm(
            lhs="bf16", rhs="e4m3fn", accumulate="fp16", accumulate_every=4)),
        # bf16 operands: their products are exact in float32, so the sum is the same whether XLA rounds each
        # product or fuses it into an FMA with the addition (which it decides differently per sharding)
        "matmul_sequential_float32": (("an", "bn"), mm(lhs="bf16", rhs="bf16", accumulate="fp32", accumulate_every=1)),
        "conv_fp8_stochastic": (("img", "ker"), lambda x, w: fpemu.conv_general_dilated(
            x, w, (1, 1), "SAME", lhs="e4m3fn", rhs="e4m3fn", out="bf16", rounding="stochastic", key=KEY)),
    }
    """
)

# Executed in the subprocess only: every case under several meshes and shardings, results to an .npz.
SHARDED_SOURCE = textwrap.dedent(
    """
    import sys
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    assert len(jax.devices()) == 8, jax.devices()
    X = inputs()
    results = {}
    rows, cols = P("d", None), P(None, "d")
    SPECS = {  # case: the (input specs) to try on a 1-D mesh of 8 devices named "d"
        "quantize_nearest": [(rows,), (cols,)],
        "quantize_stochastic": [(rows,), (cols,)],
        "matmul_fp8_fast_path": [(rows, P()), (P(), cols), (cols, rows)],
        "matmul_stochastic_bf16_accumulator": [(rows, P()), (P(), cols), (cols, rows)],
        "matmul_fp16_accumulator_every_4": [(rows, P()), (cols, rows)],
        "matmul_sequential_float32": [(rows, P()), (P(), cols), (cols, P())],
        "conv_fp8_stochastic": [(P("d"), P()), (P(), P("d"))],
    }
    EXPLICIT = {  # Explicit axes (sharding in types): the contraction resharded whole, rows kept sharded
        "quantize_stochastic": [(rows,)],
        "matmul_fp8_fast_path": [(cols, rows)],
        "matmul_stochastic_bf16_accumulator": [(rows, P()), (cols, rows)],
        "matmul_fp16_accumulator_every_4": [(cols, rows)],
        "matmul_sequential_float32": [(rows, P())],
        "conv_fp8_stochastic": [(P("d"), P())],
    }
    for axis_type, specs_of in ((AxisType.Auto, SPECS), (AxisType.Explicit, EXPLICIT)):
        mesh = jax.make_mesh((8,), ("d",), axis_types=(axis_type,))
        for name, (names, fn) in CASES.items():
            for specs in specs_of.get(name, ()):
                args = [jax.device_put(X[n], NamedSharding(mesh, s)) for n, s in zip(names, specs)]
                out = jax.jit(fn)(*args)
                results[f"{axis_type.name}|{name}|{specs}"] = np.asarray(out)
    # a 2-D mesh: rows over "data", the contraction over "model"
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    for name in ("matmul_stochastic_bf16_accumulator", "matmul_fp8_fast_path"):
        names, fn = CASES[name]
        a = jax.device_put(X[names[0]], NamedSharding(mesh, P("data", "model")))
        b = jax.device_put(X[names[1]], NamedSharding(mesh, P("model", None)))
        results[f"2d|{name}"] = np.asarray(jax.jit(fn)(a, b))
    # eager (no jit) on a sharded array
    mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Auto,))
    names, fn = CASES["quantize_stochastic"]
    results["eager|quantize_stochastic"] = np.asarray(fn(jax.device_put(X["x"], NamedSharding(mesh, rows))))

    # shard_map: the function sees the local block, so quantize's random bits restart in every block
    x_rows = jax.device_put(X["x"], NamedSharding(mesh, rows))
    local = jax.shard_map(fn, mesh=mesh, in_specs=rows, out_specs=rows)
    results["shard_map_local|quantize_stochastic"] = np.asarray(local(x_rows))

    def folded(x):  # decorrelated shards: fold the shard index into the key
        key = jax.random.fold_in(KEY, jax.lax.axis_index("d"))
        return fpemu.quantize(x, "e5m2", rounding="stochastic", key=key)

    decorrelated = jax.shard_map(folded, mesh=mesh, in_specs=rows, out_specs=rows)
    results["shard_map_folded|quantize_stochastic"] = np.asarray(decorrelated(x_rows))
    np.savez(sys.argv[1], **{k.replace("/", "_"): v for k, v in results.items()})
    """
)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bits = {2: np.uint16, 4: np.uint32}[a.dtype.itemsize]
    nan = np.isnan(a.astype(np.float32))
    same_nan = np.array_equal(nan, np.isnan(b.astype(np.float32)))
    return bool(same_nan and np.array_equal(a.view(bits)[~nan], b.view(bits)[~nan]))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The subprocess's results: {key: array}."""
    path = tmp_path_factory.mktemp("sharding") / "results.npz"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    code = CASES_SOURCE + SHARDED_SOURCE
    run = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    with np.load(path) as data:
        return dict(data)


@pytest.fixture(scope="module")
def cases():
    namespace: dict = {}
    exec(CASES_SOURCE, namespace)  # our own source, shared with the subprocess
    return namespace


def test_every_sharded_result_is_bitwise_single_device(sharded, cases):
    """Auto and Explicit meshes, rows/columns/contraction sharded, 2-D mesh, eager: all equal one device."""
    X = cases["inputs"]()
    single = {name: np.asarray(fn(*(X[n] for n in names))) for name, (names, fn) in cases["CASES"].items()}
    compared = 0
    for key, result in sharded.items():
        if key.startswith("shard_map"):
            continue
        name = key.split("|")[1]
        assert _same_bits(result, single[name]), f"{key} differs from the single-device result"
        compared += 1
    assert compared == 17 + 7 + 2 + 1  # every case of the subprocess: Auto, Explicit, 2-D, eager


def test_shard_map_sees_local_blocks(sharded, cases):
    """Inside shard_map, quantize indexes the random bits from 0 in every block (documented in docs/matmul.md):
    each shard equals quantize of that block alone, and the result differs from the global one."""
    fpemu = cases["fpemu"]
    X = cases["inputs"]()
    x, key = X["x"], cases["KEY"]
    local = sharded["shard_map_local|quantize_stochastic"]
    blocks = [np.asarray(fpemu.quantize(block, "e5m2", rounding="stochastic", key=key)) for block in np.split(x, 8)]
    assert _same_bits(local, np.concatenate(blocks))
    assert not _same_bits(local, np.asarray(fpemu.quantize(x, "e5m2", rounding="stochastic", key=key)))
    # folding the shard index into the key gives each block its own stream
    folded = sharded["shard_map_folded|quantize_stochastic"]
    jax = cases["jax"]
    expected = [
        np.asarray(fpemu.quantize(block, "e5m2", rounding="stochastic", key=jax.random.fold_in(key, i)))
        for i, block in enumerate(np.split(x, 8))
    ]
    assert _same_bits(folded, np.concatenate(expected))
