"""One browser session on the server side: a context and its page on one Chromium process.

A `Session` is what the pool's session table holds and what every operation acts on. Its `lock`
runs the operations of one session one at a time; its `navigation` tracker holds what the page
did (requests refused by the URL guard, navigations); its `tabs` close every other page the context
opens (popups); `dead` says whether anything can still run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from playwright.async_api import BrowserContext, Page

from webgym_rollout.browser.navigation import NavigationTracker
from webgym_rollout.browser.pages import PageHooks
from webgym_rollout.browser.processes import ChromiumProcess, Tabs

__all__ = ["Session"]


@dataclass(eq=False)
class Session:
    """A context + page on `process`, opened for one environment."""

    id: str
    process: ChromiumProcess
    context: BrowserContext
    page: Page
    hooks: type[PageHooks]
    """The page hooks of the session's environment (`webgym_rollout.browser.pages`)."""
    viewport: tuple[int, int]
    navigation: NavigationTracker
    tabs: Tabs
    """The context's pages: `page`, and the popups closed at once."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    crashed: bool = False
    """The page crashed, or its process died or stopped answering."""

    @property
    def dead(self) -> bool:
        """The page crashed or closed, or its browser died: nothing more can run on it."""
        return self.crashed or self.process.dead or self.page.is_closed()
