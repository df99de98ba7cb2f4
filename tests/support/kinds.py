"""Task kinds a test defines for itself: the registries (`webgym_rollout.tasks.kind`'s kinds, the
browser's page hooks) as they were before, once the test is done, so that the other tests see the
shipped kinds only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from webgym_rollout.browser import pages
from webgym_rollout.tasks import kind as kinds


@contextlib.contextmanager
def kinds_restored() -> Iterator[None]:
    """Whatever registers kinds inside the block (defining or importing a `TaskKind` subclass) is
    undone when it ends."""
    saved_kinds, saved_hooks = dict(kinds._KINDS), dict(pages._HOOKS)
    try:
        yield
    finally:
        kinds._KINDS.clear()
        kinds._KINDS.update(saved_kinds)
        pages._HOOKS.clear()
        pages._HOOKS.update(saved_hooks)


@contextlib.contextmanager
def kind_registered(cls: type[kinds.TaskKind]) -> Iterator[None]:
    """`cls` registered (as its definition registered it) for the block only."""
    with kinds_restored():
        kinds._KINDS[cls.name] = cls
        pages.register_page_hooks(cls.page)
        yield
