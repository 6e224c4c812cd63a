"""Make ``fpemu.kernels`` importable from a plain checkout on ``PYTHONPATH``.

The Pallas kernels live in the repository's top-level ``kernels/`` folder and are installed as the
subpackage ``fpemu.kernels`` (``[tool.setuptools.package-dir]`` in pyproject.toml). An installed
fpemu (wheel or editable) finds them by itself. A checkout put on ``PYTHONPATH`` without installing
has no ``fpemu/kernels/`` folder, so this finder maps the one name ``fpemu.kernels`` (and its
submodules, through the package's ``__path__``) to ``<checkout>/kernels``. Nothing else is mapped.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

_NAME = "fpemu.kernels"


class _KernelsFinder(importlib.abc.MetaPathFinder):
    def __init__(self, folder: Path) -> None:
        self._init = folder / "__init__.py"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _NAME:
            return None
        return importlib.util.spec_from_file_location(
            _NAME, self._init, submodule_search_locations=[str(self._init.parent)]
        )


def install() -> None:
    """Add the finder when fpemu runs from a checkout whose ``kernels/`` is not installed."""
    package = Path(__file__).resolve().parent
    folder = package.parent / "kernels"
    checkout = (package.parent / "pyproject.toml").is_file() and (folder / "__init__.py").is_file()
    if (package / "kernels").is_dir() or not checkout:
        return  # installed (the kernels sit inside the package), or not a checkout of fpemu
    if importlib.machinery.PathFinder.find_spec(_NAME, [str(package)]) is not None:
        return
    if not any(isinstance(f, _KernelsFinder) for f in sys.meta_path):
        sys.meta_path.append(_KernelsFinder(folder))
