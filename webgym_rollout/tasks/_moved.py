"""The old paths of what issue 38 moved out of this package, kept for one release.

A module left at an old path is three lines: a docstring naming the new path and
``forward(__name__, "<new module>")``. A package whose modules all moved keeps only its
``__init__``, which installs a `Forwarder` for them (so the old files are gone, and a change made
to one of them on another branch merges into the file it moved to). Either way the old path warns
once, when first imported, with the warning pointed at the import that used it, and is the new
module itself in `sys.modules`, so an old import gets the very same objects
(``webgym_rollout.tasks.websites.shop.ShopSite is webgym_sites.shop.ShopSite``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType

__all__ = ["REMOVED_IN", "Forwarder", "forward", "moved_warning"]

REMOVED_IN = "0.4.0"
"""The release that drops the old paths."""


def moved_warning(old: str, new: str, stacklevel: int = 2) -> None:
    """A DeprecationWarning that `old` is `new` now, pointed `stacklevel` frames above the caller
    (Python skips the import machinery's frames)."""
    warnings.warn(f"{old} moved to {new}; import it from there ({old} goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=stacklevel + 1)


def forward(old: str, new: str) -> None:
    """Make the module being imported as `old` the module `new` (imported here), with the warning."""
    moved_warning(old, new, stacklevel=3)  # above forward and the old module: the import statement
    sys.modules[old] = importlib.import_module(new)


class Forwarder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules ``<package>.<name>`` of `moved` (name -> the module that holds it now) and
    loads each as that module, with the warning; any other name of `package` is not found."""

    def __init__(self, package: str, moved: Mapping[str, str]):
        self.package, self.moved = package, dict(moved)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != self.package or name not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.moved[spec.name.rpartition(".")[2]]
        moved_warning(spec.name, new)  # above create_module, past the import machinery: the import
        return importlib.import_module(new)  # keeps its own name, spec and loader

    def exec_module(self, module: ModuleType) -> None:
        """The new module ran when it was imported."""

    @classmethod
    def install(cls, package: str, moved: Mapping[str, str]) -> None:
        """Put a forwarder for `package` at the front of `sys.meta_path` (once)."""
        if not any(isinstance(finder, cls) and finder.package == package for finder in sys.meta_path):
            sys.meta_path.insert(0, cls(package, moved))
