"""Names of an earlier release, kept for one release: `warn_renamed` and `renamed_keyword`.

Every renamed public name of fpemu (`fpemu.scaled`'s, `fpemu.testing`'s and the tools') goes through
these two, so that each says the same words: ``"<old> is deprecated and will be removed in the next
release; use <new>"``, a `DeprecationWarning` at the caller's line. docs/scaling.md tables the names.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["renamed_keyword", "warn_renamed"]

_F = TypeVar("_F", bound=Callable[..., Any])


def warn_renamed(old: str, new: str, stacklevel: int = 2) -> None:
    """The `DeprecationWarning` of ``old``, a name of an earlier release, naming ``new``; ``stacklevel``
    counts from the caller of `warn_renamed` (2: the line that called the caller, as a deprecated
    property or module ``__getattr__`` wants).

    Example:
      >>> with warnings.catch_warnings(record=True) as caught:
      ...     warnings.simplefilter("always")
      ...     warn_renamed("fpemu.scaled.Recipe", "fpemu.scaled.BlockFormat")
      >>> caught[0].category.__name__, str(caught[0].message)
      ('DeprecationWarning', 'fpemu.scaled.Recipe is deprecated and will be removed in the next release; use fpemu.scaled.BlockFormat')
    """
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def renamed_keyword(old: str, new: str, what: str) -> Callable[[_F], _F]:
    """A decorator: the keyword argument ``old`` (a name of an earlier release) is still taken for one
    release, as ``new``, with a `DeprecationWarning` that names ``new``; both at once is a TypeError.
    ``what`` names the function in the messages (``"fpemu.scaled.quantize_dequantize"``).

    Example:
      >>> @renamed_keyword("recipe", "block_format", "f")
      ... def f(block_format):
      ...     return block_format
      >>> with warnings.catch_warnings(record=True) as caught:
      ...     warnings.simplefilter("always")
      ...     value = f(recipe="mxfp4")
      >>> value, str(caught[0].message)
      ('mxfp4', 'f(recipe=...) is deprecated and will be removed in the next release; use block_format=')
      >>> f(recipe="mxfp4", block_format="nvfp4")
      Traceback (most recent call last):
      TypeError: f: pass block_format= only (recipe= is its deprecated name)
    """

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{what}: pass {new}= only ({old}= is its deprecated name)")
                warn_renamed(f"{what}({old}=...)", f"{new}=")
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return cast(_F, call)

    return wrap
