"""The old paths of what issue 38 moved out of this package, kept for one release.

A module left at an old path is three lines: a docstring naming the new path and
``forward(__name__, "<new module>")``. `forward` warns once, when the old path is first imported,
with the warning pointed at the import that used it, then puts the new module in the old one's
place in `sys.modules`, so an old import gets the very same objects
(``webgym_rollout.tasks.websites.shop.ShopSite is webgym_sites.shop.ShopSite``).
"""

from __future__ import annotations

import importlib
import sys
import warnings

__all__ = ["REMOVED_IN", "forward", "moved_warning"]

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
