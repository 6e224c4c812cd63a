"""The table of block formats against the specs (OCP MX v1.0, NVIDIA NVFP4), and `BlockFormat` validation."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.scaled import MXINT8_ELEMENT, BlockFormat, get_block_format

# (recipe, element, block size, scale format, rule, global scale, element bits) as the specs state them
SPEC = [
    ("mxfp8_e4m3", "e4m3fn", 32, "e8m0fnu", "ocp", False, 8),
    ("mxfp8_e5m2", "e5m2", 32, "e8m0fnu", "ocp", False, 8),
    ("mxfp6_e3m2", "e3m2fn", 32, "e8m0fnu", "ocp", False, 6),
    ("mxfp6_e2m3", "e2m3fn", 32, "e8m0fnu", "ocp", False, 6),
    ("mxfp4", "e2m1fn", 32, "e8m0fnu", "ocp", False, 4),
    ("mxint8", MXINT8_ELEMENT, 32, "e8m0fnu", "ocp", False, 8),
    ("nvfp4", "e2m1fn", 16, "e4m3fn", "float", True, 4),
    ("fp8_e4m3", "e4m3fn", None, "fp32", "float", False, 8),
    ("fp8_e5m2", "e5m2", None, "fp32", "float", False, 8),
]


@pytest.mark.parametrize(("name", "element", "block", "scale", "rule", "global_scale", "bits"), SPEC, ids=str)
def test_table_matches_the_specs(name, element, block, scale, rule, global_scale, bits):
    r = get_block_format(name)
    assert r.element is fpemu.get_format(element)
    assert (r.block_size, r.scale_format.name, r.scale_rule, r.global_scale) == (block, scale, rule, global_scale)
    assert r.element.bits == bits
    assert r.saturate and r.margin == 0


def test_recipes_lists_every_name():
    assert scaled.block_formats() == tuple(s[0] for s in SPEC)


def test_mx_element_maxima_and_emax_come_from_the_registry():
    # OCP MX v1.0 table: emax_elem 8, 15, 4, 2, 2 and 0 (MXINT8), max 448, 57344, 28, 7.5, 6, 127/64
    got = {n: (get_block_format(n).element.emax, get_block_format(n).element.max) for n in scaled.block_formats()[:6]}
    assert got == {
        "mxfp8_e4m3": (8, 448.0),
        "mxfp8_e5m2": (15, 57344.0),
        "mxfp6_e3m2": (4, 28.0),
        "mxfp6_e2m3": (2, 7.5),
        "mxfp4": (2, 6.0),
        "mxint8": (0, 127 / 64),
    }


def test_mxint8_element_values_are_k_over_64():
    values = [float(v) for v in fpemu.testing.reference.values(MXINT8_ELEMENT)]
    assert values == [k / 64 for k in range(128)]


def test_mxint8_element_is_the_registrys_ocp_int8():
    """One source of format facts: the recipe's element (and the public alias) is the registry's format."""
    fmt = fpemu.get_format("int8_ocp")
    assert get_block_format("mxint8").element is fmt and MXINT8_ELEMENT is fmt
    assert fmt.twos_complement and (fmt.max, fmt.min) == (127 / 64, -2.0)


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_negative", "nearest_away"])
def test_mxint8_saturates_symmetrically_to_127_over_64(rounding):
    """OCP INT8 holds -2.0 (code 0x80), but the mxint8 recipe never produces it: the block's scale puts
    the amax in [1, 2), and elements that round beyond ±127/64 saturate to ±127/64, as the OCP MX
    reference code clamps. -1.9921875 (255/128) is the tie between -127/64 and -2.0."""
    x = np.zeros((1, 32), np.float32)
    x[0, :5] = [-1.9921875, -1.99609375, 1.99609375, -1.5, 1.9921875]  # amax < 2: scale 2**0
    sa = scaled.BlockArray.from_array(jnp.asarray(x), "mxint8", rounding=rounding)
    assert int(sa.scale[0, 0]) == 127
    assert sa.values[0, :5].tolist() == [-127 / 64, -127 / 64, 127 / 64, -1.5, 127 / 64]
    assert sa.codes()[0, :5].tolist() == [-127, -127, 127, -96, 127]
    qdq = scaled.quantize_dequantize(jnp.asarray(x), "mxint8", rounding=rounding)
    assert qdq[0, :5].tolist() == [-127 / 64, -127 / 64, 127 / 64, -1.5, 127 / 64]


def test_even_rule_uses_the_int8_elements_six_fraction_bits():
    """The 'even' rule rounds amax to the element's precision in its top binade: k/64 in [1, 2) has 7
    significant bits, so amax 1.9921875 (= 255/128, 8 bits) rounds up to 2 and takes the next scale."""
    r = BlockFormat(name="mxint8_even", element="int8_ocp", block_size=32, scale_format="e8m0fnu", scale_rule="even")
    x = np.zeros((1, 32), np.float32)
    for amax, k in [(1.9921875, 1), (1.98828125, 0), (-1.9921875, 1)]:
        x[0, 0] = amax
        assert int(scaled.BlockArray.from_array(jnp.asarray(x), r).scale[0, 0]) - 127 == k, amax


def test_aliases():
    assert get_block_format("mxfp8") is get_block_format("mxfp8_e4m3")
    assert get_block_format("mxfp4_e2m1") is get_block_format("mxfp4")
    r = get_block_format("mxfp4")
    assert get_block_format(r) is r


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("MXFP8", "'mxfp8'"),
        ("Mxfp4", "'mxfp4'"),
        ("NVFP4", "'nvfp4'"),
        (" mxint8", "'mxint8'"),
        ("FP8_E4M3", "'fp8_e4m3'"),
    ],
)
def test_recipe_names_are_exact_and_lower_case(name, suggestion):
    """As format names are (fpemu.get_format): a name that differs only in case is an error naming the recipe."""
    with pytest.raises(
        scaled.UnknownBlockFormatError, match="block format names are exact and lower case; did you mean " + suggestion
    ):
        get_block_format(name)


@pytest.mark.parametrize(
    ("name", "recipes"),
    [
        ("e4m3fn", ["'mxfp8_e4m3' (blocks of 32, e8m0fnu scales)", "'fp8_e4m3' (a fp32 scale per tensor or slice)"]),
        ("e2m1fn", ["'mxfp4'", "'nvfp4' (blocks of 16, e4m3fn scales, a float32 tensor scale)"]),
        ("float8_e5m2", ["'mxfp8_e5m2'", "'fp8_e5m2'"]),
        ("int8_ocp", ["'mxint8'"]),
        ("E3M2FN", ["'mxfp6_e3m2'"]),
    ],
)
def test_a_format_name_is_answered_as_a_format_with_its_recipes(name, recipes):
    with pytest.raises(scaled.UnknownBlockFormatError) as info:
        get_block_format(name)
    message = str(info.value)
    fmt = fpemu.get_format(name.lower())
    assert f"{fmt.name!r} is an element format, not a block format" in message
    assert f"fpemu.quantize(x, {fmt.name!r})" in message
    for recipe in recipes:
        assert recipe in message
    assert ("exact and lower case" in message) == (name != name.lower())


@pytest.mark.parametrize("name", ["E4M3", "e4m3"])
def test_e4m3_as_a_recipe_points_to_ocp_e4m3fn(name):
    """'e4m3' is the IEEE-like format (max 240) which no recipe uses; OCP E4M3 is e4m3fn."""
    with pytest.raises(scaled.UnknownBlockFormatError) as info:
        get_block_format(name)
    message = str(info.value)
    assert "'e4m3fn'" in message and "max 448" in message and "'e4m3' is the IEEE-like one, max 240" in message
    assert "'fp8_e4m3'" in message and "'mxfp8_e4m3'" in message


def test_a_format_without_recipes_lists_the_recipes():
    with pytest.raises(
        scaled.UnknownBlockFormatError, match=r"'bf16' is an element format.*block formats: mxfp8_e4m3, "
    ):
        get_block_format("bf16")


def test_unknown_recipe():
    with pytest.raises(scaled.UnknownBlockFormatError, match=r"did you mean 'nvfp4'"):
        get_block_format("nvfp5")
    with pytest.raises(TypeError, match="block_format must be a block format name"):
        get_block_format(3)


def test_rule_aliases():
    def make(rule):
        return BlockFormat(name="r", element="e2m1fn", block_size=32, scale_format="e8m0fnu", scale_rule=rule)

    assert make("floor").scale_rule == "ocp"
    assert make("round_up").scale_rule == "ceil" == make("rceil").scale_rule


def test_bits_per_element():
    assert get_block_format("mxfp4").bits_per_element == 4.25
    assert get_block_format("nvfp4").bits_per_element == 4.5
    assert get_block_format("fp8_e4m3").bits_per_element == 8


def test_recipes_are_hashable_and_frozen():
    r = get_block_format("mxfp4")
    assert hash(r) == hash(dataclasses.replace(r))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.block_size = 16  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"element": "e9m9"}, "element: unknown format 'e9m9'"),
        ({"scale_rule": "nearest"}, "scale_rule must be one of 'ocp', 'ceil', 'even', 'ceil_log2', 'float'"),
        ({"block_size": 0}, "block_size must be an int >= 1, got 0"),
        ({"block_size": 3.0}, "block_size must be an int, got float 3.0"),
        ({"scale_format": "e8m0fnu", "scale_rule": "float"}, "holds only powers of two"),
        ({"scale_format": "e4m3fn", "scale_rule": "ocp"}, "narrow float: scale_rule must be 'float'"),
        ({"scale_format": "e2m1fn", "scale_rule": "float"}, "NaN code"),
        ({"element": "e8m0fnu"}, "element must be a signed format with zero"),
        ({"element": "fp32"}, "at most 16 bits"),
        ({"element": "bf16"}, "too wide or too fine"),
        ({"global_scale": True}, "global_scale=True needs a narrow block scale format"),
        ({"margin": 1.5}, "margin must be an int"),
        ({"saturate": 1}, "saturate must be a bool"),
        ({"element": "e2m3fn", "scale_format": "bf16", "scale_rule": "float"}, "8 significant bits"),
    ],
)
def test_invalid_recipes_name_the_field(kwargs, match):
    base = {"name": "bad", "element": "e2m1fn", "block_size": 32, "scale_format": "fp32", "scale_rule": "ocp"}
    with pytest.raises(ValueError, match=match):
        BlockFormat(**{**base, **kwargs})


def test_overrides_in_quantize_rename_the_recipe():
    sa = scaled.BlockArray.from_array(jnp.ones((1, 32)), "mxfp4", scale_rule="ceil", margin=1)
    assert sa.block_format.name == "mxfp4[scale_rule=ceil,margin=1]"
    assert sa.block_format.scale_rule == "ceil" and sa.block_format.margin == 1
    sa = scaled.BlockArray.from_array(jnp.ones((1, 32)), "mxfp4", block_size=16)
    assert sa.scale.shape == (1, 2)


def test_allowed_roundings():
    assert len(get_block_format("mxfp4").allowed_roundings) == 7
    assert get_block_format("nvfp4").allowed_roundings == ("nearest_even", "nearest_away", "toward_zero", "stochastic")


@pytest.mark.parametrize("name", scaled.block_formats())
def test_has_tensor_scale_names_nvfp4_and_per_tensor_float_scales(name):
    recipe = scaled.get_block_format(name)
    along_an_axis = {"nvfp4": True}.get(name, False)  # the global scale; MX scales are powers of two
    assert recipe.has_tensor_scale(0) is along_an_axis
    assert recipe.has_tensor_scale(None) is (name in ("nvfp4", "fp8_e4m3", "fp8_e5m2"))
    pow2 = dataclasses.replace(recipe, scale_rule="ceil") if recipe.scale_kind == "fp32" else recipe
    assert pow2.has_tensor_scale(None) is recipe.global_scale  # power-of-two per-tensor scales stay in
