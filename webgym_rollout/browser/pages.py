"""Server-side page hooks: what the browser server does to the page of one kind of environment.

A session is opened for an ``environment`` string (``"web"``, ``"miniwob:click-button"``): the
name before ``:`` picks a `PageHooks` class, the rest is its argument. The hooks prepare a page
whose start URL has loaded (`PageHooks.start_page`: MiniWoB starts its seeded episode), read the
page's own state (`PageHooks.state_script`, `PageHooks.read_page`) and say which region
screenshots show (`PageHooks.clip`).

The registry is filled from outside: the task kinds (`webgym_rollout.tasks`) register their hooks
when they are imported, and the pool imports the modules `PoolSettings.page_modules` names when
it starts (by default the toolkit's task kinds; add a module of your own to serve a new kind). So
the browser server never imports the task kinds, and a new kind needs no change here. Only
``web`` (any website: nothing to prepare, no state, the whole viewport) is built in.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any, ClassVar

from webgym_rollout.errors import InvalidRequest

__all__ = ["PageHooks", "environment_names", "keeps_state", "load_page_modules", "page_hooks",
           "register_page_hooks", "state_probe"]


class PageHooks:
    """The hooks of one environment kind. Subclasses set `name` and override what they need."""

    name: ClassVar[str] = "web"
    """The environment name (what precedes ``:`` in the environment string)."""
    takes_argument: ClassVar[bool] = False
    """Its environment strings carry an argument (``miniwob:<task>``); ``web`` takes none."""
    clip: ClassVar[dict[str, int] | None] = None
    """Region of the page that screenshots show (None: the whole viewport)."""

    @classmethod
    async def start_page(cls, page: Any, argument: str, seed: int | None, *, max_time_s: float | None,
                         timeout_s: float) -> None:
        """Prepare a page (a Playwright `Page`) whose start URL has loaded."""

    state_script: ClassVar[str | None] = None
    """A JavaScript function (source, ``"() => ({done: ...})"``) returning the page's own state as
    `EnvState` fields; None: the kind keeps none. `read_page` evaluates it; an agent step
    (``act``) evaluates it in the round trip that tells whether the action navigated."""

    @classmethod
    async def read_page(cls, page: Any) -> dict[str, Any] | None:
        """The page's own state as `EnvState` fields, or None when the kind keeps none (override
        it for a state that a script alone cannot read; ``act`` then calls it after the action)."""
        if cls.state_script is None:
            return None
        return await page.evaluate(cls.state_script)


def _own_reader(hooks: type[PageHooks]) -> bool:
    return hooks.read_page.__func__ is not PageHooks.read_page.__func__  # type: ignore[attr-defined]


def state_probe(hooks: type[PageHooks]) -> str | None:
    """The script that reads a page's state in the same round trip as an action's navigation check:
    `hooks.state_script`, unless the hooks read their state some other way (their own `read_page`)."""
    return None if _own_reader(hooks) else hooks.state_script


def keeps_state(hooks: type[PageHooks]) -> bool:
    """Whether pages of these hooks have a state of their own to read (a script or a `read_page`)."""
    return hooks.state_script is not None or _own_reader(hooks)


_HOOKS: dict[str, type[PageHooks]] = {PageHooks.name: PageHooks}


def register_page_hooks(hooks: type[PageHooks]) -> None:
    """Serve environments named ``hooks.name`` with `hooks` (a later registration of a name wins)."""
    _HOOKS[hooks.name] = hooks


def load_page_modules(modules: Iterable[str]) -> None:
    """Import `modules`, whose import registers page hooks; one that cannot be imported raises
    `InvalidRequest` naming it."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InvalidRequest(f"page_modules: cannot import {module!r}: {exc}") from exc


def environment_names() -> list[str]:
    """The environment strings the registered hooks serve, e.g. ``['miniwob:<task>', 'web']``."""
    return sorted(f"{name}:<task>" if hooks.takes_argument else name for name, hooks in _HOOKS.items())


def page_hooks(environment: str) -> tuple[type[PageHooks], str]:
    """The hooks and their argument for an ``environment`` string; raises `InvalidRequest` naming the
    string when no registered kind serves it (or its argument is missing, unexpected or unsafe)."""
    name, _, argument = (environment or "web").partition(":")
    hooks = _HOOKS.get(name)
    safe = all(c.isalnum() or c in "-_." for c in argument)
    if hooks is None or not safe or hooks.takes_argument != bool(argument):
        known = ", ".join(f"'{known}'" for known in environment_names())
        raise InvalidRequest(f"unknown environment {environment!r}: expected one of {known}")
    return hooks, argument
