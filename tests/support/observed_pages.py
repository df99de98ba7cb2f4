"""Real pages read through a real browser server, for the observation tests: a MiniWoB++ task or a
local site's page, with its screenshot, its elements and accessibility tree (one ``page_info``) and,
for MiniWoB, its instruction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.browser.protocol import PageInfo, Screenshot
from webgym_rollout.browser.server import ServerSettings, running_server
from webgym_rollout.tasks.miniwob import task_url


@dataclass(frozen=True)
class ObservedPage:
    screenshot: Screenshot
    info: PageInfo
    utterance: str
    """The MiniWoB task's instruction ("" for other pages)."""


@asynccontextmanager
async def browser_server(chromium_path: str, sites_url: str) -> AsyncIterator[str]:
    """A browser server on 127.0.0.1 whose pages may reach the site server at `sites_url` only."""
    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=4,
                        allow_hosts=(sites_url.removeprefix("http://"),))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _):
        yield url


async def observe(server_url: str, url: str, *, environment: str = "web", seed: int | None = None,
                  viewport: tuple[int, int] = (1280, 720)) -> ObservedPage:
    async with BrowserClient(server_url) as client:
        session = await client.create_session(url, environment=environment, seed=seed, viewport=viewport)
        try:
            shot = await session.screenshot()
            info = await session.page_info(elements=True, axtree=True)
            utterance = (await session.env_state()).utterance
        finally:
            await session.close()
    return ObservedPage(shot, info, utterance)


async def observe_miniwob(server_url: str, sites_url: str, task: str, seed: int) -> ObservedPage:
    return await observe(server_url, task_url(sites_url, task), environment=f"miniwob:{task}", seed=seed)
