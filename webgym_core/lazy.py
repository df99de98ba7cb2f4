"""Packages whose public names import on first use, so that importing the package stays cheap
(``import webgym_rl`` must not import torch)::

    _EXPORTS = {"train": "webgym_rl.train", ...}      # name -> the module that defines it
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

and modules whose names moved elsewhere, still found at the old place for one release, with a
`DeprecationWarning` (`moved_names`)::

    __getattr__ = moved_names(__name__, {"TrainSettings": "webgym_rl.settings:TrainCommandSettings"})
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "moved_names"]


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of `package` (PEP 562): each name of `exports`
    is imported from its module when first asked for, then kept in the package's namespace."""
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


def moved_names(module: str, moves: Mapping[str, str],
                fallback: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of `module` for names that moved away: ``{"OldName":
    "new.module:NewName"}`` (``"new.module"`` alone: the same name). Asking for an old name warns
    (DeprecationWarning, naming the new place) and returns the object from its new place; kept for
    one release, then the entry goes. Other names go to `fallback` (a package's `lazy_exports`)."""
    def __getattr__(name: str) -> Any:
        if name not in moves:
            if fallback is not None:
                return fallback(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target, _, new_name = moves[name].partition(":")
        new_name = new_name or name
        warnings.warn(f"{module}.{name} moved to {target}.{new_name}; import it from there (the old "
                      "name goes in the next release)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(target), new_name)

    return __getattr__
