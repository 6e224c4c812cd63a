"""Both kernels lower to Triton for a GPU, on any machine.

CI has no GPU, so interpret mode checks what the kernels compute, and this checks that Pallas can
turn them into Triton kernels: JAX lowers a jitted function for the "cuda" platform without a GPU
(from jax 0.11 for an abstract GPU: `fpemu._jax.pallas.lowering_for_gpu`), and a kernel that
uses something Triton cannot express (a value slice, a gather, an index into a loaded array) fails
here. Compiling the Triton IR to PTX and running it still needs a GPU
(tests/kernels' `...Gpu` classes, bench/gpu.sh); what is known not to compile is checked here in
the Triton IR itself (`_UNLOWERABLE`).
"""

import contextlib
import functools
import io

import jax
import jax.numpy as jnp
import pytest

import fpemu
from fpemu import ROUNDING_MODES
from fpemu._core.format import fits
from fpemu._jax.pallas import lowering_for_gpu
from fpemu._ops import quantize as _quantize
from fpemu._ops import quantize_pallas as quantize_module
from fpemu._ops.matmul_config import MatmulOptions, matmul_config
from fpemu.kernels import matmul as matmul_module
from fpemu.kernels.matmul import BlockSizes as MatmulBlockSizes
from fpemu.kernels.matmul import matmul_pallas
from fpemu.kernels.quantize import BlockSizes, quantize_pallas

TRITON_CALL = "__gpu$xla.gpu.triton"
SMALL_FORMATS = [f.name for f in fpemu.formats() if f.bits <= 16]
# Operations that Pallas emits but Triton's NVIDIA backend cannot legalize, so the kernel fails to
# compile on a GPU only. Seen on an H200 (jax 0.11.2): `lax.clz` of a uint32 lowers to `math.ctlz`
# ("failed to legalize operation 'math.ctlz'"; the engine counts on the signed type, libdevice's
# __nv_clz), which failed every e8m0fnu and p3109_k8p1ue kernel.
_UNLOWERABLE = ("math.ctlz",)


def _abstract(value):
    """Arrays as `jax.ShapeDtypeStruct`s (lowered for an abstract GPU, they belong to no device)."""
    return jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype) if hasattr(v, "shape") else v, value)


@contextlib.contextmanager
def _triton_modules(buffer: io.StringIO):
    """Every kernel's ``pallas_call`` with ``debug=True``, which prints the Triton module it lowers to;
    the printout goes to ``buffer``."""
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(buffer):
        for module in (quantize_module, matmul_module):
            patch.setattr(module, "pallas_call", functools.partial(module.pallas_call, debug=True))
        yield


def _lowered_text(fn, *args, **kwargs) -> str:
    """The lowered program; checks the Triton modules in it for `_UNLOWERABLE` operations."""
    buffer = io.StringIO()
    with lowering_for_gpu(), _triton_modules(buffer):
        fn.clear_cache()  # a cached trace would not print its module
        text = fn.trace(*_abstract(args), **kwargs).lower(lowering_platforms=("cuda",)).as_text()
    modules = buffer.getvalue()
    assert "The Triton module for pallas_call" in modules
    for op in _UNLOWERABLE:
        assert f'"{op}"' not in modules and f" {op} " not in modules, f"{op} does not compile for NVIDIA GPUs"
    return text


def _quantize_cases():
    """Every format with nearest-even and stochastic rounding, every mode for two formats, and the
    saturate / subnormal options and narrow input dtypes for one."""
    cases = [(f, m, False, True, "float32") for f in SMALL_FORMATS for m in ("nearest_even", "stochastic")]
    cases += [(f, m, False, True, "float32") for f in ("e4m3fn", "e8m0fnu") for m in ROUNDING_MODES]
    cases += [("e5m2", "to_odd", True, False, "float32"), ("e4m3fn", "stochastic", True, True, "bfloat16")]
    cases += [("e2m1fn", "nearest_even", False, True, "float16")]
    return cases


@pytest.mark.parametrize("case", _quantize_cases(), ids=lambda c: "-".join(map(str, c)))
def test_quantize_kernel_lowers_to_triton(case):
    fmt, rounding, saturate, subnormals, dtype = case
    key = jax.random.key(0) if rounding == "stochastic" else None
    spec = _quantize.rounding_spec(fmt, rounding, saturate, subnormals, key, None)
    assert fits(spec.fmt, _quantize.input_format(jnp.dtype(dtype)))
    x = jnp.ones((5000,), dtype)  # ragged: 5 blocks of 1024, the last one padded
    text = _lowered_text(
        quantize_pallas, x, jnp.zeros((2,), jnp.uint32), spec=spec, block_sizes=BlockSizes(block=1024), interpret=False
    )
    assert TRITON_CALL in text


_MATMUL_CASES = {
    "fp8 bf16-dot": {"lhs": "e4m3fn", "rhs": "e4m3fn"},
    "fp16 f32-dot, out e2m1fn": {"lhs": "fp16", "rhs": "fp16", "out": "e2m1fn"},
    "unrounded": {},
    "bf16 accumulator every 3 (rank-1 steps)": {"lhs": "e4m3fn", "rhs": "e5m2", "accumulate": "bf16", "accumulate_every": 3},
    "fp32 every 128": {"lhs": "e4m3fn", "rhs": "e4m3fn", "accumulate": "fp32", "accumulate_every": 128},
    "stochastic everything": {
        "lhs": "e4m3fn", "rhs": "e2m1fn", "out": "bf16", "accumulate": "fp16", "accumulate_every": 16,
        "rounding": "stochastic", "accumulate_rounding": "stochastic",
    },
    "scales and saturation": {"lhs": "e4m3fn", "rhs": "e4m3fn", "saturate": True, "scaled": True},
    "e8m0 operand, bf16 result": {"lhs": "e8m0fnu", "rhs": "e4m3fn", "preferred_element_type": "bfloat16"},
}  # fmt: skip


@pytest.mark.parametrize("name", list(_MATMUL_CASES))
def test_matmul_kernel_lowers_to_triton(name):
    options = dict(_MATMUL_CASES[name])
    scaled = options.pop("scaled", False)
    stochastic = "stochastic" in (options.get("rounding"), options.get("accumulate_rounding"))
    key = jax.random.key(0) if stochastic else None
    fp32 = fpemu.get_format("fp32")
    cfg = matmul_config(fp32, fp32, MatmulOptions(key=key, **options))
    a, b = jnp.ones((40, 70)), jnp.ones((70, 24))  # ragged against 16-wide tiles
    scale = jnp.float32(2.0) if scaled else None
    for blocks in (
        MatmulBlockSizes(block_m=16, block_n=16, block_k=16),
        MatmulBlockSizes(block_m=32, block_n=16, block_k=64),
    ):
        text = _lowered_text(matmul_pallas, a, b, scale, scale, key, cfg=cfg, block_sizes=blocks, interpret=False)
        assert TRITON_CALL in text, name


@pytest.mark.long
@pytest.mark.parametrize("every", [16, 3])
def test_matmul_kernel_with_explicit_random_bits_lowers_to_triton(every):
    """Every stream's bits as kernel inputs, sliced in the kernel as Triton can (2-D ref slices)."""
    options = {
        "lhs": "e4m3fn", "rhs": "e2m1fn", "out": "bf16", "accumulate": "fp16", "accumulate_every": every,
        "rounding": "stochastic", "accumulate_rounding": "stochastic",
    }  # fmt: skip
    m, k, n = 40, 70, 24
    chunks = -(-k // every)
    random = {
        "lhs": jnp.zeros((m, k), jnp.uint32),
        "rhs": jnp.zeros((k, n), jnp.uint32),
        "accumulate": jnp.zeros((chunks, m, n), jnp.uint32),
        "out": jnp.zeros((m, n), jnp.uint32),
    }
    fp32 = fpemu.get_format("fp32")
    cfg = matmul_config(fp32, fp32, MatmulOptions(random=random, **options))
    a, b = jnp.ones((m, k)), jnp.ones((k, n))
    blocks = MatmulBlockSizes(block_m=16, block_n=16, block_k=16)
    text = _lowered_text(matmul_pallas, a, b, None, None, None, random, cfg=cfg, block_sizes=blocks, interpret=False)
    assert TRITON_CALL in text


def test_quantize_kernel_with_explicit_random_bits_lowers_to_triton():
    spec = _quantize.rounding_spec("e4m3fn", "stochastic", False, True, None, 8, random=0)
    x = jnp.ones((5000,), jnp.float32)
    words = jnp.zeros((5000,), jnp.uint32)
    text = _lowered_text(quantize_pallas, x, words, spec=spec, block_sizes=BlockSizes(block=1024), interpret=False)
    assert TRITON_CALL in text


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason="the Pallas-to-Triton lowering of jax 0.10 to 0.12 cannot emit uint64 constants with the top bit set "
    "(std::bad_cast), so float64 input is refused by backend='pallas' and the compiled kernel. Strict: "
    "when JAX lowers it, this fails and the refusal can be lifted.",
)
@pytest.mark.parametrize("rounding", ["nearest_even", "stochastic"])
def test_quantize_kernel_lowers_to_triton_for_float64(x64, rounding):
    key = jax.random.key(0) if rounding == "stochastic" else None
    spec = _quantize.rounding_spec("e4m3fn", rounding, False, True, key, None)
    x = jnp.ones((5000,), jnp.float64)
    text = _lowered_text(
        quantize_pallas, x, jnp.zeros((2,), jnp.uint32), spec=spec, block_sizes=BlockSizes(block=1024), interpret=False
    )
    assert TRITON_CALL in text
