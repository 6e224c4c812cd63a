"""The named training recipes against their sources, and the validation of `Quantizer`, `GemmRecipe`, `TrainingRecipe`."""

import dataclasses
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import fpemu
from fpemu import scaled
from fpemu._training import (
    GEMMS,
    TRAINING_RECIPES,
    GemmRecipe,
    Quantizer,
    TrainingRecipe,
    nvfp4_recipe,
    training_recipe,
)

NAMES = ("fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8", "mxfp6", "mxfp4", "nvfp4")

# What the sources say, operand by operand (x: activation, w: weight, g: gradient):
# (format, scaling, block size, scale format, scale rule, tensor scale, rounding)
_E4_TENSOR = ("e4m3fn", "tensor", None, "fp32", "float", False, "nearest_even")  # TE current scaling, HYBRID
_E5_TENSOR = ("e5m2", "tensor", None, "fp32", "float", False, "nearest_even")
_E4_DELAYED = ("e4m3fn", "delayed", None, "fp32", "float", False, "nearest_even")  # TE DelayedScaling, HYBRID
_E5_DELAYED = ("e5m2", "delayed", None, "fp32", "float", False, "nearest_even")
_ROW = ("e4m3fn", "row", None, "fp32", "ceil", False, "nearest_even")  # torchao rowwise: power-of-two scales
_TILE = ("e4m3fn", "block", 128, "fp32", "ceil", False, "nearest_even")  # TE Float8BlockScaling default: pow2
_BLOCK128 = ("e4m3fn", "block_2d", 128, "fp32", "ceil", False, "nearest_even")


def _mx(fmt):
    return (fmt, "block", 32, "e8m0fnu", "ocp", False, "nearest_even")


_NV = ("e2m1fn", "block", 16, "e4m3fn", "float", True, "nearest_even")
_NV_W = ("e2m1fn", "block_2d", 16, "e4m3fn", "float", True, "nearest_even")
_NV_G = ("e2m1fn", "block", 16, "e4m3fn", "float", True, "stochastic")

# recipe: (x, w, g, wgrad Hadamard size, accumulate_every)
SPEC = {
    "fp8_current": (_E4_TENSOR, _E4_TENSOR, _E5_TENSOR, None, None),
    "fp8_delayed": (_E4_DELAYED, _E4_DELAYED, _E5_DELAYED, None, None),
    "fp8_rowwise": (_ROW, _ROW, _ROW, None, None),
    "fp8_blockwise": (_TILE, _BLOCK128, _TILE, None, 128),
    "mxfp8": (_mx("e4m3fn"), _mx("e4m3fn"), _mx("e5m2"), None, None),
    "mxfp6": (_mx("e2m3fn"), _mx("e2m3fn"), _mx("e3m2fn"), None, None),
    "mxfp4": (_mx("e2m1fn"), _mx("e2m1fn"), _mx("e2m1fn"), None, None),
    "nvfp4": (_NV, _NV_W, _NV_G, 16, None),
}


def _facts(q):
    return (
        q.format.name,
        q.scaling,
        q.block_size,
        q.scale_format.name,
        q.scale_rule,
        q.tensor_scale,
        q.rounding,
    )


def test_the_names_are_listed_in_table_order():
    assert TRAINING_RECIPES == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_each_recipe_matches_its_sources(name):
    x, w, g, hadamard, every = SPEC[name]
    r = training_recipe(name)
    assert r.name == name and str(r) == name
    assert (_facts(r.forward.lhs), _facts(r.forward.rhs)) == (x, w)  # y = x . W
    assert (_facts(r.dgrad.lhs), _facts(r.dgrad.rhs)) == (g, w)  # dx = g . W^T
    assert (_facts(r.wgrad.lhs), _facts(r.wgrad.rhs)) == (x, g)  # dW = x^T . g
    assert (r.forward.hadamard, r.dgrad.hadamard, r.wgrad.hadamard) == (None, None, hadamard)
    for gemm in GEMMS:
        assert r.gemm(gemm).accumulate is fpemu.get_format("fp32")
        assert r.gemm(gemm).accumulate_every == every
    assert r.keep_scopes == ("attention",)
    assert r.source.strip()


def test_delayed_scaling_follows_transformer_engines_defaults():
    r = training_recipe("fp8_delayed")
    assert (r.amax_history_len, r.amax_compute_algo, r.margin) == (1024, "max", 0)
    assert r.stateful
    assert [n for n in NAMES if training_recipe(n).stateful] == ["fp8_delayed"]


@pytest.mark.parametrize("name", NAMES)
def test_recipes_are_frozen_hashable_jit_static_arguments(name):
    r = training_recipe(name)
    assert hash(r) == hash(training_recipe(name)) and r == training_recipe(name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.forward.lhs.block_size = 3  # type: ignore[misc,union-attr]
    f = jax.jit(lambda x, recipe: x * recipe.amax_history_len, static_argnums=1)
    assert f(jnp.ones(2), r).tolist() == [1024.0, 1024.0]


def test_training_recipe_passes_a_recipe_through():
    custom = dataclasses.replace(training_recipe("mxfp8"), name="mine", keep_scopes=())
    assert training_recipe(custom) is custom


def test_nvfp4_switches_turn_off_what_transformer_engine_turns_off():
    assert nvfp4_recipe() == training_recipe("nvfp4")
    r = nvfp4_recipe(disable_rht=True, disable_stochastic_rounding=True, disable_2d_quantization=True)
    assert r.name == "nvfp4[disable_rht,disable_stochastic_rounding,disable_2d_quantization]"
    assert r.wgrad.hadamard is None
    assert r.dgrad.lhs.rounding == "nearest_even" and r.wgrad.rhs.rounding == "nearest_even"
    assert r.forward.rhs.scaling == "block" and r.forward.rhs == r.forward.lhs
    assert nvfp4_recipe(disable_2d_quantization=True).dgrad.lhs.rounding == "stochastic"
    with pytest.raises(TypeError, match="disable_rht must be a bool"):
        nvfp4_recipe(disable_rht=1)  # type: ignore[arg-type]


# -- bad names ------------------------------------------------------------------------------------------


def test_an_unknown_name_lists_every_name():
    with pytest.raises(ValueError, match="training recipe must be one of") as e:
        training_recipe("fp8")
    for name in NAMES:
        assert repr(name) in str(e.value)


def test_names_are_exact_and_lower_case():
    with pytest.raises(ValueError, match=r"did you mean 'mxfp8'"):
        training_recipe("MXFP8")
    with pytest.raises(TypeError, match="a training recipe name or a TrainingRecipe"):
        training_recipe(3)  # type: ignore[arg-type]


# -- Quantizer fields -----------------------------------------------------------------------------------


def test_quantizer_normalises_its_fields():
    q = Quantizer(format="float8_e4m3fn", scaling="block", block_size=32, scale_format="e8m0fnu")
    assert q.format is fpemu.get_format("e4m3fn") and q.scale_rule == "ocp"  # E8M0 scales: the OCP rule
    assert q == Quantizer(format="e4m3fn", scaling="block", block_size=32, scale_format="e8m0fnu", scale_rule="ocp")
    assert Quantizer(format="e4m3fn").scale_rule == "float"  # float32 scales: amax / max
    assert Quantizer(format="e4m3fn").scale_format is fpemu.get_format("fp32")
    assert "block_size=32" in repr(q) and "'e8m0fnu'" in repr(q)


BAD_QUANTIZERS = [
    ({"format": "e9m9"}, ValueError, r"Quantizer\.format: unknown format 'e9m9'"),
    ({"format": "e4m3fn", "scaling": "blocks"}, ValueError, r"Quantizer\.scaling must be one of 'none', 'tensor'"),
    ({"format": "e4m3fn", "scaling": "block"}, ValueError, r"Quantizer\.block_size is required"),
    ({"format": "e4m3fn", "scaling": "row", "block_size": 32}, ValueError, r"Quantizer\.block_size=32 is only used"),
    ({"format": "e4m3fn", "scaling": "block", "block_size": 0}, ValueError, r"Quantizer\.block_size must be an int >= 1"),
    ({"format": "e4m3fn", "scaling": "block", "block_size": 2.0}, TypeError, r"Quantizer\.block_size must be an int"),
    ({"format": "e4m3fn", "scale_format": "e8m0fnu", "scale_rule": "float"}, ValueError,
     r"Quantizer\.scale_rule='float' cannot be held .* use one of 'ocp', 'ceil', 'even', 'ceil_log2'"),
    ({"format": "e4m3fn", "scale_rule": "round"}, ValueError, r"Quantizer\.scale_rule must be one of 'ocp', 'ceil'"),
    ({"format": "e2m1fn", "scale_format": "e4m3fn", "scale_rule": "ceil"}, ValueError,
     r"Quantizer\.scale_rule must be 'float' with the narrow scale_format='e4m3fn'"),
    ({"format": "e2m1fn", "tensor_scale": True}, ValueError, r"Quantizer\.tensor_scale=True needs a narrow block"),
    ({"format": "e2m1fn", "tensor_scale": 1}, TypeError, r"Quantizer\.tensor_scale must be a bool"),
    ({"format": "e4m3fn", "rounding": "toward_zero"}, ValueError,
     r"Quantizer\.rounding must be one of 'nearest_even', 'stochastic'"),
    ({"format": "e4m3fn", "random_bits": 4}, ValueError, r"Quantizer\.random_bits is only used with rounding='stoch"),
    ({"format": "e4m3fn", "rounding": "stochastic", "random_bits": 40}, ValueError,
     r"Quantizer\.random_bits must be None or an int in \[1, 32\]"),
    ({"format": "e4m3fn", "scaling": "none", "scale_format": "e8m0fnu"}, ValueError,
     r"Quantizer\.scale_format, scale_rule and tensor_scale are only used with scaled quantizers"),
    ({"format": "e2m1fn", "scaling": "delayed", "scale_format": "e4m3fn"}, ValueError,
     r"Quantizer\.scaling='delayed' needs a single-level scale"),
    ({"format": "bf16", "scaling": "tensor"}, ValueError, r"Quantizer\(format='bf16', scaling='tensor'\): .*bf16"),
    ({"format": "e4m3fn", "saturate": "clamp"}, TypeError, r"Quantizer\.saturate must be a bool .* 'sat_finite'"),
    ({}, ValueError, r"Quantizer needs block_format= \(a fpemu.scaled block format or its name, such as 'mxfp8'\) or format="),
    ({"block_format": "mxfp9"}, ValueError, r"Quantizer\.block_format: unknown block format 'mxfp9'; did you mean 'mxfp8'"),
    ({"block_format": 8}, TypeError, r"Quantizer\.block_format: block_format must be a block format name or a fpemu"),
    ({"block_format": "e4m3fn"}, ValueError, r"Quantizer\.block_format: unknown block format 'e4m3fn'"),
    ({"block_format": "mxfp8", "scale_rule": "ceil"}, ValueError,
     r"Quantizer: give block_format= or the fields it holds \(format, block_size, scale_format, scale_rule, "
     r"tensor_scale, saturate\), not both: got block_format='mxfp8_e4m3' and scale_rule='ceil'"),
    ({"block_format": "mxfp8", "format": "e5m2"}, ValueError, r"not both: got block_format='mxfp8_e4m3' and format="),
    ({"block_format": "mxfp8", "scaling": "row"}, ValueError,
     r"Quantizer\.block_format='mxfp8_e4m3' has blocks of 32: scaling must be 'block' or 'block_2d' \(tiles of 32 x 32\), not 'row'"),
    ({"block_format": "fp8_e4m3", "scaling": "block"}, ValueError,
     r"Quantizer\.block_format='fp8_e4m3' has no block size .* scaling must be 'tensor', 'delayed' or 'row', not 'block'"),
    ({"block_format": "fp8_e4m3", "scaling": "none"}, ValueError,
     r"Quantizer\.scaling='none' has no scales: give format= \(the element format\) instead of block_format="),
    ({"block_format": "fp8_e4m3", "scaling": "rows"}, ValueError, r"Quantizer\.scaling must be one of 'none', 'tensor'"),
    ({"block_format": "nvfp4", "scaling": "delayed"}, ValueError, r"Quantizer\.block_format='nvfp4' has blocks of 16"),
    ({"block_format": scaled.BlockFormat(name="mx_m2", element="e4m3fn", block_size=32, scale_format="e8m0fnu",
                                         scale_rule="ocp", margin=2)}, ValueError,
     r"Quantizer\.block_format='mx_m2' has margin=2: a quantizer's margin is given when it quantizes"),
    ({"block_format": "mxfp8", "rounding": "stochastic", "random_bits": 0}, ValueError,
     r"Quantizer\.random_bits must be None or an int in \[1, 32\]"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "error", "message"), BAD_QUANTIZERS, ids=lambda v: str(v)[:40])
def test_bad_quantizer_fields_name_the_field_and_the_choices(fields, error, message):
    with pytest.raises(error, match=message):
        Quantizer(**fields)


@pytest.mark.parametrize("name", scaled.block_formats())
def test_a_quantizer_holds_the_block_format_it_is_given(name):
    """Given by name or as the object, the block format is held as it is (its name too); the quantizer's
    fields are read from it, and the quantizer equals the one its fields make."""
    fmt = scaled.get_block_format(name)
    q = Quantizer(block_format=name)
    assert q.block_format is fmt and Quantizer(block_format=fmt).block_format is fmt
    scaling = "tensor" if fmt.block_size is None else "block"
    fields = {"format": fmt.element, "scaling": scaling, "block_size": fmt.block_size, "scale_format": fmt.scale_format,
              "scale_rule": fmt.scale_rule, "tensor_scale": fmt.global_scale, "saturate": fmt.saturate}  # fmt: skip
    assert {k: getattr(q, k) for k in fields} == fields
    built = Quantizer(**fields)
    assert q == built and hash(q) == hash(built) and built.block_format.name == f"{fmt.element.name}/{scaling}"
    assert dataclasses.replace(q, rounding="stochastic").block_format.element is fmt.element


def test_a_block_formats_block_size_is_the_tile_side_of_a_2d_quantizer():
    q = Quantizer(block_format="nvfp4", scaling="block_2d")
    assert (q.scaling, q.block_size, q.tensor_scale) == ("block_2d", 16, True)
    assert q == Quantizer(format="e2m1fn", scaling="block_2d", block_size=16, scale_format="e4m3fn", tensor_scale=True)
    assert Quantizer(block_format="fp8_e5m2", scaling="delayed").scaling == "delayed"
    assert Quantizer(block_format="fp8_e4m3", scaling="row").block_size is None


def test_scaling_none_takes_any_format_quantize_takes():
    q = Quantizer(format="bf16", scaling="none")
    assert q.pow2 and repr(q) == "Quantizer(format='bf16', scaling='none')"


# -- GemmRecipe and TrainingRecipe fields ---------------------------------------------------------------

Q = Quantizer(format="e4m3fn")

BAD_GEMMS = [
    ({"lhs": "e4m3fn", "rhs": None}, TypeError, r"GemmRecipe\.lhs must be a Quantizer or None"),
    ({"lhs": Q, "rhs": 3}, TypeError, r"GemmRecipe\.rhs must be a Quantizer or None"),
    ({"lhs": Q, "rhs": Q, "hadamard": 12}, ValueError, r"GemmRecipe\.hadamard must be a power of two"),
    ({"lhs": Q, "rhs": Q, "hadamard": 1}, ValueError, r"GemmRecipe\.hadamard must be an int >= 2"),
    ({"lhs": Q, "rhs": Q, "accumulate": "e9m9"}, ValueError, r"GemmRecipe\.accumulate: unknown format"),
    ({"lhs": Q, "rhs": Q, "accumulate": "fp64"}, ValueError, r"GemmRecipe\.accumulate='fp64'"),
    ({"lhs": Q, "rhs": Q, "accumulate_every": 0}, ValueError, r"GemmRecipe\.accumulate_every must be an int >= 1"),
]


@pytest.mark.parametrize(("fields", "error", "message"), BAD_GEMMS, ids=lambda v: str(v)[:40])
def test_bad_gemm_fields_name_the_field(fields, error, message):
    with pytest.raises(error, match=message):
        GemmRecipe(**fields)


def test_gemm_recipe_takes_a_narrow_accumulator():
    g = GemmRecipe(lhs=Q, rhs=None, accumulate="bf16", accumulate_every=4)
    assert g.accumulate is fpemu.get_format("bf16") and g.quantizers == (Q, None)


def _recipe(**changes):
    fields = {"name": "r", "forward": GemmRecipe(lhs=Q, rhs=Q), "dgrad": GemmRecipe(lhs=Q, rhs=Q)}
    fields["wgrad"] = fields["forward"]
    return TrainingRecipe(**{**fields, **changes})


BAD_RECIPES = [
    ({"name": ""}, ValueError, r"TrainingRecipe\.name must be a non-empty string"),
    ({"forward": None}, TypeError, r"TrainingRecipe\.forward must be a GemmRecipe"),
    ({"wgrad": Q}, TypeError, r"TrainingRecipe\.wgrad must be a GemmRecipe"),
    ({"keep_scopes": ("attention", 3)}, TypeError, r"TrainingRecipe\.keep_scopes must hold non-empty strings"),
    ({"amax_history_len": 0}, ValueError, r"TrainingRecipe\.amax_history_len must be an int >= 1"),
    ({"amax_compute_algo": "mean"}, ValueError, r"TrainingRecipe\.amax_compute_algo must be one of 'max', 'most_rec"),
    ({"margin": 65}, ValueError, r"TrainingRecipe\.margin must be an int >= -64 and <= 64"),
    ({"source": None}, TypeError, r"TrainingRecipe\.source must be a string"),
]


@pytest.mark.parametrize(("fields", "error", "message"), BAD_RECIPES, ids=lambda v: str(v)[:40])
def test_bad_recipe_fields_name_the_field(fields, error, message):
    with pytest.raises(error, match=message):
        _recipe(**fields)


def test_keep_scopes_takes_one_name_or_several():
    assert _recipe(keep_scopes="attn").keep_scopes == ("attn",)
    assert _recipe(keep_scopes=["a", "b"]).keep_scopes == ("a", "b")
    with pytest.raises(ValueError, match=re.escape("which must be one of 'forward', 'dgrad', 'wgrad'")):
        _recipe().gemm("backward")


def test_the_docs_table_says_what_the_recipes_hold():
    """docs/training.md's recipe table: one row per name, in order, with each operand's element format."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    header = "| name | x | W | g |"
    rows = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert [c[0].strip("`") for c in cells] == list(NAMES)
    for name, x, w, g, *_ in cells:
        r = training_recipe(name.strip("`"))
        assert (x, w, g) == (r.forward.lhs.format.name, r.forward.rhs.format.name, r.dgrad.lhs.format.name)
