"""Names that moved, kept importable for one release: each warns and names what replaced it."""

import importlib
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import fpemu.scaled as scaled
from fpemu.testing import scaled_reference


def test_the_scaled_reference_moved_to_the_testing_layer():
    sys.modules.pop("fpemu.scaled.reference", None)  # an earlier import would not warn again
    with pytest.warns(
        DeprecationWarning, match=r"fpemu.scaled.reference is deprecated.*fpemu.testing.scaled_reference"
    ):
        old = importlib.import_module("fpemu.scaled.reference")
    for name in ("Result", "assert_equal", "exponent", "quantize", "split"):
        assert getattr(old, name) is getattr(scaled_reference, name)


RENAMED = [
    ("Recipe", "BlockFormat"),
    ("RecipeLike", "BlockFormatLike"),
    ("UnknownRecipeError", "UnknownBlockFormatError"),
    ("get_recipe", "get_block_format"),
    ("recipes", "block_formats"),
    ("ScaledArray", "BlockArray"),
    ("MatmulRecipe", "MatmulFormat"),
    ("MATMUL_RECIPES", "MATMUL_FORMATS"),
]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_a_renamed_scaled_name_is_the_new_object_and_warns_with_its_new_name(old, new):
    with pytest.warns(DeprecationWarning, match=rf"fpemu\.scaled\.{old} is deprecated.*use fpemu\.scaled\.{new}\b"):
        value = getattr(scaled, old)
    assert value is getattr(scaled, new)
    assert old not in scaled.__all__ and new in scaled.__all__


def test_from_import_of_a_renamed_name_warns_too():
    with pytest.warns(DeprecationWarning, match="use fpemu.scaled.BlockArray"):
        from fpemu.scaled import ScaledArray

    assert ScaledArray is scaled.BlockArray


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Recipes'"):
        scaled.Recipes  # noqa: B018


def _x():
    return jnp.linspace(-3.0, 3.0, 64, dtype=jnp.float32).reshape(2, 32)


@pytest.mark.parametrize(
    "call",
    [
        lambda s, kw: s.quantize_dequantize(_x(), **kw),
        lambda s, kw: s.quantize_dequantize_split(_x(), **kw)[0],
        lambda s, kw: s.BlockArray.from_array(_x(), **kw).dequantize(),
    ],
    ids=["quantize_dequantize", "quantize_dequantize_split", "from_array"],
)
def test_the_recipe_keyword_still_works_warns_and_gives_the_same_bits(call):
    new = call(scaled, {"block_format": "mxfp4"})
    with pytest.warns(DeprecationWarning, match=r"\(recipe=\.\.\.\) is deprecated.*use block_format="):
        old = call(scaled, {"recipe": "mxfp4"})
    np.testing.assert_array_equal(np.asarray(old).view(np.uint32), np.asarray(new).view(np.uint32))


def test_the_old_and_the_new_keyword_together_are_refused():
    with pytest.raises(TypeError, match=r"pass block_format= only \(recipe= is its deprecated name\)"):
        scaled.quantize_dequantize(_x(), recipe="mxfp4", block_format="mxfp4")


@pytest.mark.long
def test_codes_packing_and_matmul_take_the_old_keyword_with_a_warning():
    sa = scaled.BlockArray.from_array(_x(), "mxfp4")
    with pytest.warns(DeprecationWarning, match="BlockArray.recipe is deprecated.*BlockArray.block_format"):
        assert sa.recipe is sa.block_format
    with pytest.warns(DeprecationWarning, match=r"from_codes\(recipe=\.\.\.\)"):
        again = scaled.BlockArray.from_codes(sa.codes(), sa.scale, recipe="mxfp4")
    with pytest.warns(DeprecationWarning, match=r"from_packed\(recipe=\.\.\.\)"):
        unpacked = scaled.BlockArray.from_packed(sa.pack(), recipe="mxfp4", shape=(2, 32))
    for other in (again, unpacked):
        np.testing.assert_array_equal(np.asarray(other.dequantize()), np.asarray(sa.dequantize()))
    a = np.asarray(_x())
    b = np.ones((32, 3), np.float32)
    with pytest.warns(DeprecationWarning, match=r"scaled\.matmul\(recipe=\.\.\.\) is deprecated.*use fmt="):
        old = scaled.matmul(a, b, recipe="mxfp4")
    np.testing.assert_array_equal(np.asarray(old), np.asarray(scaled.matmul(a, b, fmt="mxfp4")))


def test_delayed_scaling_takes_the_old_field_name_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"DelayedScaling\(recipe=\.\.\.\) is deprecated.*use block_format="):
        ds = scaled.DelayedScaling(recipe="fp8_e4m3", history_length=4)
    assert ds == scaled.DelayedScaling(block_format="fp8_e4m3", history_length=4)
    with pytest.warns(DeprecationWarning, match="DelayedScaling.recipe is deprecated"):
        assert ds.recipe is ds.block_format


def test_the_scaled_reference_takes_the_old_keyword_with_a_warning_and_gives_the_same_answer():
    x = np.asarray(_x())
    new = scaled_reference.quantize(x, block_format="mxfp4")
    with pytest.warns(
        DeprecationWarning,
        match=r"scaled_reference\.quantize\(recipe=\.\.\.\) is deprecated.*use block_format=",
    ):
        old = scaled_reference.quantize(x, recipe="mxfp4")
    for name in ("values", "scale", "dequantized"):  # bit for bit
        scaled_reference.assert_equal(getattr(old, name), getattr(new, name))
    two_level = scaled_reference.quantize(x, "nvfp4")  # a tensor scale apart: split's non-trivial path
    with pytest.warns(DeprecationWarning, match=r"scaled_reference\.split\(recipe=\.\.\.\).*use block_format="):
        old_split = scaled_reference.split(two_level, recipe="nvfp4")
    new_split = scaled_reference.split(two_level, block_format="nvfp4")
    for a, b in zip(old_split, new_split, strict=True):
        scaled_reference.assert_equal(a, b)
    with pytest.warns(DeprecationWarning, match=r"scaled_reference\.exponent\(recipe=\.\.\.\).*use block_format="):
        assert scaled_reference.exponent(12.0, recipe="mxfp4") == scaled_reference.exponent(12.0, block_format="mxfp4")


def test_the_scaled_reference_refuses_the_old_and_the_new_keyword_together():
    with pytest.raises(TypeError, match=r"pass block_format= only \(recipe= is its deprecated name\)"):
        scaled_reference.quantize(np.asarray(_x()), recipe="mxfp4", block_format="mxfp4")
