"""Training recipes as data: `GemmRecipe` (one GEMM's operands) and `TrainingRecipe` (a linear layer's three).

A linear layer ``y = x . W`` costs three GEMMs per training step, and a recipe says how each
operand of each is quantized:

- ``forward``: ``y = x . W`` (lhs: the activation ``x``, rhs: the weight ``W``), contracting the
  input features;
- ``dgrad``: ``dx = g . W^T`` (lhs: the cotangent ``g``, rhs: ``W``), contracting the output
  features;
- ``wgrad``: ``dW = x^T . g`` (lhs: ``x``, rhs: ``g``), contracting the tokens.

Each operand is quantized along *that* GEMM's contraction (`quantize_operand`), so a weight is
blocked along its input features in the forward GEMM and along its output features in dgrad, as
Transformer Engine and torchao compute both copies from the high-precision tensor. docs/training.md
tables the named recipes (`TRAINING_RECIPES`) with their sources.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal, cast, get_args

from fpemu._args import bool_arg, choice_arg, format_arg, int_arg
from fpemu._core.format import Format
from fpemu._core.registry import FormatLike, get_format
from fpemu._ops.matmul_config import MatmulOptions, matmul_config
from fpemu._training.hadamard import hadamard_size_arg
from fpemu._training.quantizer import Quantizer, Scaling

__all__ = [
    "AMAX_COMPUTE_ALGOS",
    "GEMMS",
    "INFERENCE_RECIPES",
    "OPERAND_TENSORS",
    "TRAINING_RECIPES",
    "GemmRecipe",
    "TrainingRecipe",
    "inference_recipe",
    "nvfp4_recipe",
    "recipe_by_name",
    "training_recipe",
]

AmaxComputeAlgo = Literal["max", "most_recent"]
AMAX_COMPUTE_ALGOS: tuple[str, ...] = get_args(AmaxComputeAlgo)
#: The three GEMMs of a linear layer, in the order of `TrainingRecipe`'s fields.
GEMMS: tuple[str, ...] = ("forward", "dgrad", "wgrad")
#: The tensor each GEMM operand (``"<gemm>.<lhs|rhs>"``) is: the activation ``x``, the weight ``w``,
#: the output's gradient ``g`` (Transformer Engine's input, weight and grad_output).
OPERAND_TENSORS: Mapping[str, str] = MappingProxyType(
    {"forward.lhs": "x", "forward.rhs": "w", "dgrad.lhs": "g", "dgrad.rhs": "w", "wgrad.lhs": "x", "wgrad.rhs": "g"}
)
_FP32 = get_format("fp32")
_MAX_MARGIN = 64


def _quantizer_field(value: Any, name: str) -> Quantizer | None:
    if value is None or isinstance(value, Quantizer):
        return value
    raise TypeError(f"{name} must be a Quantizer or None (left in high precision), got {type(value).__name__}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GemmRecipe:
    """One GEMM of a recipe: each operand's `Quantizer`, an optional Hadamard transform, the accumulator.

    Args:
      lhs, rhs: the operands' quantizers, or None to leave an operand as it is (high precision).
      hadamard: the size of a random Hadamard transform applied to both operands along the
        contraction before they are quantized (a power of two; NVFP4: 16 on wgrad), or None.
      accumulate: the running sum's format (`fpemu.dot_general`'s ``accumulate``; default float32).
      accumulate_every: products per chunk of the contraction; the running sum is rounded to
        ``accumulate`` after each (DeepSeek-V3's promotion to float32 every 128 products), or None
        (one float32 dot).

    Raises:
      TypeError, ValueError: naming the field, for an operand that is not a Quantizer, a Hadamard
        size that is not a power of two, an accumulator `fpemu.dot_general` does not take.

    Example:
      >>> q = Quantizer(format="e4m3fn")
      >>> GemmRecipe(lhs=q, rhs=q, accumulate_every=128).accumulate.name
      'fp32'
    """

    lhs: Quantizer | None
    rhs: Quantizer | None
    hadamard: int | None = None
    accumulate: FormatLike = "fp32"
    accumulate_every: int | None = None

    def __post_init__(self) -> None:
        lhs = _quantizer_field(self.lhs, "GemmRecipe.lhs")
        rhs = _quantizer_field(self.rhs, "GemmRecipe.rhs")
        hadamard = None if self.hadamard is None else hadamard_size_arg(self.hadamard, "GemmRecipe.hadamard")
        accumulate = format_arg(self.accumulate, "GemmRecipe.accumulate")
        every = self.accumulate_every
        if every is not None:
            every = int_arg(every, "GemmRecipe.accumulate_every", minimum=1)
        try:
            matmul_config(_FP32, _FP32, MatmulOptions(accumulate=accumulate, accumulate_every=every))
        except (ValueError, TypeError) as e:
            raise type(e)(f"GemmRecipe.{e}") from None
        for name, value in (
            ("lhs", lhs),
            ("rhs", rhs),
            ("hadamard", hadamard),
            ("accumulate", accumulate),
            ("accumulate_every", every),
        ):
            object.__setattr__(self, name, value)

    @property
    def quantizers(self) -> tuple[Quantizer | None, Quantizer | None]:
        """(lhs, rhs)."""
        return self.lhs, self.rhs

    def __repr__(self) -> str:
        parts = [f"lhs={self.lhs!r}", f"rhs={self.rhs!r}"]
        if self.hadamard is not None:
            parts.append(f"hadamard={self.hadamard}")
        acc = cast(Format, self.accumulate)
        if acc.name != "fp32":
            parts.append(f"accumulate={acc.name!r}")
        if self.accumulate_every is not None:
            parts.append(f"accumulate_every={self.accumulate_every}")
        return f"GemmRecipe({', '.join(parts)})"


def _scopes_field(value: Any) -> tuple[str, ...]:
    scopes = (value,) if isinstance(value, str) else value
    if not isinstance(scopes, Iterable):
        raise TypeError(f"TrainingRecipe.keep_scopes must be a tuple of scope names, got {type(value).__name__}")
    out = tuple(scopes)
    for s in out:
        if not isinstance(s, str) or not s:
            raise TypeError(f"TrainingRecipe.keep_scopes must hold non-empty strings, got {s!r}")
    return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TrainingRecipe:
    """A low-precision training recipe: how each of a linear layer's three GEMMs is quantized.

    Frozen and hashable (a ``jax.jit`` static argument). ``training_recipe(name)`` returns a named
    one; change fields with ``dataclasses.replace``.

    Args:
      name: a label.
      forward: ``y = x . W`` (lhs: activation, rhs: weight).
      dgrad: ``dx = g . W^T`` (lhs: the cotangent ``g``, rhs: weight).
      wgrad: ``dW = x^T . g`` (lhs: activation, rhs: the cotangent ``g``).
      keep_scopes: named scopes whose dots are left in high precision (by default attention's score
        and value products, as Transformer Engine does).
      amax_history_len: steps of amax history a delayed quantizer's scale looks back on (TE: 1024).
      amax_compute_algo: ``"max"`` (the largest amax of the history) or ``"most_recent"``.
      margin: Transformer Engine's ``margin``: scales are multiplied by ``2**margin``.
      source: where the recipe is defined (a Transformer Engine class, a torchao config, a paper).

    Raises:
      TypeError, ValueError: naming the field, for a GEMM that is not a `GemmRecipe`, bad scopes, a
        history length below 1, an unknown algorithm, a margin outside [-64, 64].

    Example:
      >>> r = training_recipe("fp8_delayed")
      >>> r.stateful, r.dgrad.lhs.format.name, r.amax_history_len
      (True, 'e5m2', 1024)
    """

    name: str
    forward: GemmRecipe
    dgrad: GemmRecipe
    wgrad: GemmRecipe
    keep_scopes: tuple[str, ...] = ("attention",)
    amax_history_len: int = 1024
    amax_compute_algo: AmaxComputeAlgo = "max"
    margin: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"TrainingRecipe.name must be a non-empty string, got {self.name!r}")
        for gemm in GEMMS:
            value = getattr(self, gemm)
            if not isinstance(value, GemmRecipe):
                raise TypeError(f"TrainingRecipe.{gemm} must be a GemmRecipe, got {type(value).__name__}")
        object.__setattr__(self, "keep_scopes", _scopes_field(self.keep_scopes))
        object.__setattr__(
            self, "amax_history_len", int_arg(self.amax_history_len, "TrainingRecipe.amax_history_len", minimum=1)
        )
        choice_arg(self.amax_compute_algo, AMAX_COMPUTE_ALGOS, "TrainingRecipe.amax_compute_algo")
        margin = int_arg(self.margin, "TrainingRecipe.margin", minimum=-_MAX_MARGIN, maximum=_MAX_MARGIN)
        object.__setattr__(self, "margin", margin)
        if not isinstance(self.source, str):
            raise TypeError(f"TrainingRecipe.source must be a string, got {type(self.source).__name__}")

    def gemm(self, which: str) -> GemmRecipe:
        """The `GemmRecipe` of ``"forward"``, ``"dgrad"`` or ``"wgrad"``."""
        return cast(GemmRecipe, getattr(self, choice_arg(which, GEMMS, "which")))

    @property
    def stateful(self) -> bool:
        """Whether any operand uses delayed scaling (then amax histories are carried as state)."""
        return any(
            q is not None and q.scaling == "delayed"
            for g in GEMMS
            for q in cast(GemmRecipe, getattr(self, g)).quantizers
        )

    def __str__(self) -> str:
        return self.name


# -- the named recipes -------------------------------------------------------------------------------

E4M3 = "e4m3fn"


def _linear(
    name: str,
    x: Quantizer,
    w: Quantizer,
    g: Quantizer,
    source: str,
    *,
    wgrad_hadamard: int | None = None,
    accumulate_every: int | None = None,
) -> TrainingRecipe:
    """A recipe from the three operands' quantizers: x and W forward, g and W dgrad, x and g wgrad."""
    return TrainingRecipe(
        name=name,
        forward=GemmRecipe(lhs=x, rhs=w, accumulate_every=accumulate_every),
        dgrad=GemmRecipe(lhs=g, rhs=w, accumulate_every=accumulate_every),
        wgrad=GemmRecipe(lhs=x, rhs=g, hadamard=wgrad_hadamard, accumulate_every=accumulate_every),
        source=source,
    )


def _per_tensor(scaling: Scaling) -> tuple[Quantizer, Quantizer]:
    return Quantizer(block_format="fp8_e4m3", scaling=scaling), Quantizer(block_format="fp8_e5m2", scaling=scaling)


def _mx(forward: str, gradient: str, source: str, name: str) -> TrainingRecipe:
    """An OCP MX recipe: the block formats ``forward`` (activations, weights) and ``gradient``."""
    fwd, grad = Quantizer(block_format=forward), Quantizer(block_format=gradient)
    return _linear(name, fwd, fwd, grad, source)


def nvfp4_recipe(
    *, disable_rht: bool = False, disable_stochastic_rounding: bool = False, disable_2d_quantization: bool = False
) -> TrainingRecipe:
    """NVFP4 training (Transformer Engine ``NVFP4BlockScaling``), with TE's three switches.

    E2M1 elements in 1 x 16 blocks along each GEMM's contraction, E4M3 block scales under a float32
    per-tensor scale; weights in 16 x 16 tiles (``disable_2d_quantization``: 1 x 16 blocks);
    gradients rounded stochastically (``disable_stochastic_rounding``: nearest even); a 16-point
    random Hadamard transform of both wgrad operands (``disable_rht``: none).

    Example:
      >>> nvfp4_recipe().wgrad.hadamard, nvfp4_recipe(disable_rht=True).wgrad.hadamard
      (16, None)
      >>> nvfp4_recipe(disable_rht=True).name
      'nvfp4[disable_rht]'
    """
    switches = {
        "disable_rht": bool_arg(disable_rht, "disable_rht"),
        "disable_stochastic_rounding": bool_arg(disable_stochastic_rounding, "disable_stochastic_rounding"),
        "disable_2d_quantization": bool_arg(disable_2d_quantization, "disable_2d_quantization"),
    }
    x = Quantizer(block_format="nvfp4")
    w = x if switches["disable_2d_quantization"] else dataclasses.replace(x, scaling="block_2d")
    g = x if switches["disable_stochastic_rounding"] else dataclasses.replace(x, rounding="stochastic")
    on = [k for k, v in switches.items() if v]
    return _linear(
        "nvfp4" + (f"[{','.join(on)}]" if on else ""),
        x,
        w,
        g,
        "Transformer Engine recipe.NVFP4BlockScaling; NVIDIA, 'Pretraining Large Language Models with NVFP4' "
        "(arXiv:2509.25149, 2025)",
        wgrad_hadamard=None if switches["disable_rht"] else 16,
    )


def _blockwise() -> TrainingRecipe:
    act = Quantizer(format=E4M3, scaling="block", block_size=128, scale_rule="ceil")
    weight = dataclasses.replace(act, scaling="block_2d")
    return _linear(
        "fp8_blockwise",
        act,
        weight,
        act,
        "DeepSeek-V3 technical report (arXiv:2412.19437), section 3.3; Transformer Engine recipe.Float8BlockScaling",
        accumulate_every=128,
    )


def _builtins() -> dict[str, TrainingRecipe]:
    cur_x, cur_g = _per_tensor("tensor")
    del_x, del_g = _per_tensor("delayed")
    row = Quantizer(format=E4M3, scaling="row", scale_rule="ceil")
    recipes = [
        _linear(
            "fp8_current",
            cur_x,
            cur_x,
            cur_g,
            "Transformer Engine recipe.Float8CurrentScaling(fp8_format=Format.HYBRID); torchao Float8LinearConfig "
            "(tensorwise)",
        ),
        _linear(
            "fp8_delayed",
            del_x,
            del_x,
            del_g,
            "Transformer Engine recipe.DelayedScaling(fp8_format=Format.HYBRID, margin=0, amax_history_len=1024, "
            "amax_compute_algo='max')",
        ),
        _linear("fp8_rowwise", row, row, row, "torchao Float8LinearConfig.from_recipe_name('rowwise')"),
        _blockwise(),
        _mx(
            "mxfp8_e4m3",
            "mxfp8_e5m2",
            "Transformer Engine recipe.MXFP8BlockScaling(fp8_format=Format.HYBRID); OCP MX v1.0",
            "mxfp8",
        ),
        _mx("mxfp6_e2m3", "mxfp6_e3m2", "OCP MX v1.0 (MXFP6 E2M3 / E3M2 elements)", "mxfp6"),
        _mx("mxfp4", "mxfp4", "OCP MX v1.0 (MXFP4 E2M1 elements)", "mxfp4"),
        nvfp4_recipe(),
    ]
    return {r.name: r for r in recipes}


def _inference(name: str, w: Quantizer, x: Quantizer | None, source: str) -> TrainingRecipe:
    """A forward-only recipe: the weight (the forward GEMM's rhs) quantized by ``w``, the activation
    by ``x`` (None: left as it is); dgrad and wgrad left in high precision."""
    high = GemmRecipe(lhs=None, rhs=None)
    return TrainingRecipe(name=name, forward=GemmRecipe(lhs=x, rhs=w), dgrad=high, wgrad=high, source=source)


def _inference_builtins() -> dict[str, TrainingRecipe]:
    channel = Quantizer(block_format="fp8_e4m3", scaling="row")  # one float32 scale amax / 448 per channel / token
    mx8, mx4, nv4 = (Quantizer(block_format=name) for name in ("mxfp8_e4m3", "mxfp4", "nvfp4"))
    ocp, nvidia = "OCP MX v1.0", "NVIDIA NVFP4 (TensorRT Model Optimizer, llm-compressor NVFP4)"
    recipes = [
        _inference(
            "fp8_weights",
            channel,
            None,
            "FP8 weight-only (W8A16) with channel-wise float32 scales: vLLM's FP8 Marlin path, llm-compressor",
        ),
        _inference("mxfp8_weights", mx8, None, f"{ocp} (MXFP8 E4M3 weights)"),
        _inference("mxfp4_weights", mx4, None, f"{ocp} (MXFP4 E2M1 weights; gpt-oss ships its MoE weights so)"),
        _inference("nvfp4_weights", nv4, None, f"{nvidia}, weights only (W4A16)"),
        _inference(
            "fp8_w8a8",
            channel,
            channel,
            "vLLM FP8 W8A8 / llm-compressor FP8_DYNAMIC: channel-wise weight scales, dynamic per-token activation "
            "scales",
        ),
        _inference("mxfp8_w8a8", mx8, mx8, f"{ocp} (MXFP8 weights and activations)"),
        _inference(
            "nvfp4_w4a4", nv4, nv4, f"{nvidia}, weights and activations (W4A4; activation tensor scale dynamic)"
        ),
    ]
    return {r.name: r for r in recipes}


_RECIPES = _builtins()
_INFERENCE = _inference_builtins()
#: The names of the built-in training recipes (`training_recipe`).
TRAINING_RECIPES: tuple[str, ...] = tuple(_RECIPES)
#: The names of the built-in inference recipes (`inference_recipe`): forward-only, weights the forward rhs.
INFERENCE_RECIPES: tuple[str, ...] = tuple(_INFERENCE)


def training_recipe(name: str | TrainingRecipe) -> TrainingRecipe:
    """A named training recipe (`TRAINING_RECIPES`, exact lower-case names), or a `TrainingRecipe` as it is.

    Raises:
      ValueError: for an unknown name, naming the closest and listing all.
      TypeError: for anything that is neither a name nor a `TrainingRecipe`.

    Example:
      >>> TRAINING_RECIPES
      ('fp8_current', 'fp8_delayed', 'fp8_rowwise', 'fp8_blockwise', 'mxfp8', 'mxfp6', 'mxfp4', 'nvfp4')
      >>> r = training_recipe("mxfp8")
      >>> r.forward.lhs.format.name, r.dgrad.lhs.format.name, r.wgrad.rhs.block_size
      ('e4m3fn', 'e5m2', 32)
    """
    return _named(name, "training", _RECIPES, "inference", _INFERENCE)


def inference_recipe(name: str | TrainingRecipe) -> TrainingRecipe:
    """A named inference recipe (`INFERENCE_RECIPES`, exact lower-case names), or a `TrainingRecipe` as it is.

    An inference recipe is a `TrainingRecipe` whose forward GEMM ``y = x . W`` quantizes the weight
    ``W`` (its rhs) and, for the ``*_w8a8``/``*_w4a4`` recipes, the activation ``x`` (its lhs); its
    dgrad and wgrad GEMMs quantize nothing (gradients stay in high precision). docs/inference.md
    tables them with their sources.

    Raises:
      ValueError: for an unknown name, naming the closest and listing both sets of recipes.
      TypeError: for anything that is neither a name nor a `TrainingRecipe`.

    Example:
      >>> INFERENCE_RECIPES
      ('fp8_weights', 'mxfp8_weights', 'mxfp4_weights', 'nvfp4_weights', 'fp8_w8a8', 'mxfp8_w8a8', 'nvfp4_w4a4')
      >>> r = inference_recipe("fp8_w8a8")
      >>> r.forward.lhs.scaling, r.forward.rhs.scaling, r.dgrad.lhs, r.wgrad.rhs
      ('row', 'row', None, None)
      >>> inference_recipe("mxfp4_weights").forward.lhs is None
      True
    """
    return _named(name, "inference", _INFERENCE, "training", _RECIPES)


_ARTICLE = {"training": "a", "inference": "an"}


def _named(
    name: Any, kind: str, table: dict[str, TrainingRecipe], other_kind: str, other: dict[str, TrainingRecipe]
) -> TrainingRecipe:
    """The recipe called ``name`` in ``table`` (the ``kind`` recipes: "training" or "inference"), or a
    `TrainingRecipe` as it is; a name of the ``other`` table is an error that names its function."""
    if isinstance(name, TrainingRecipe):
        return name
    a, other_a, names = _ARTICLE[kind], _ARTICLE[other_kind], tuple(table)
    if not isinstance(name, str):
        raise TypeError(f"recipe must be {a} {kind} recipe name or a TrainingRecipe, got {type(name).__name__}")
    if name in other:
        raise ValueError(
            f"{name!r} is {other_a} {other_kind} recipe, not {a} {kind} recipe: fpemu.{other_kind}_recipe({name!r}) "
            f"({kind} recipes: {', '.join(names)})"
        )
    key = name.strip().lower()
    if name not in table and key in table:
        raise ValueError(
            f"unknown {kind} recipe {name!r}: names are exact and lower case; did you mean {key!r}? "
            f"({kind} recipes: {', '.join(names)})"
        )
    return table[choice_arg(name, names, f"{kind} recipe")]


def recipe_by_name(name: str) -> TrainingRecipe | None:
    """The training or inference recipe called ``name`` (exactly), or None."""
    return _RECIPES.get(name) or _INFERENCE.get(name)
