"""`fpemu.deprecation`: the one warning of every renamed name, at the line that used the old name."""

import warnings

import pytest

from fpemu.deprecation import renamed_keyword, warn_renamed


@renamed_keyword("recipe", "block_format", "f")
def f(x, *, block_format=None):
    return x, block_format


class Old:
    @property
    def recipe(self):
        warn_renamed("Old.recipe", "Old.block_format")
        return 1


def test_the_warning_names_the_replacement_at_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert f(1, recipe="mxfp4") == (1, "mxfp4")
        assert Old().recipe == 1
    assert [str(w.message) for w in caught] == [
        "f(recipe=...) is deprecated and will be removed in the next release; use block_format=",
        "Old.recipe is deprecated and will be removed in the next release; use Old.block_format",
    ]
    assert all(w.category is DeprecationWarning and w.filename == __file__ for w in caught)


def test_the_new_keyword_passes_without_a_warning_and_both_are_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(2, block_format="nvfp4") == (2, "nvfp4")
    with pytest.raises(TypeError, match=r"f: pass block_format= only \(recipe= is its deprecated name\)"):
        f(3, recipe="a", block_format="b")
