"""MiniWoB++ as an environment kind: ``environment="miniwob:click-button"`` plus a seed.

The page (served by `webgym_rollout.sites`) shows a START cover; `start_episode` seeds the page's
random generator (``Math.seedrandom``), starts the episode (``core.startEpisodeReal()``) and waits for
``WOB_TASK_READY``. `read_state` reads the instruction (``core.getUtterance()``) and the outcome
(``WOB_DONE_GLOBAL``, ``WOB_REWARD_GLOBAL`` time-discounted, ``WOB_RAW_REWARD_GLOBAL`` 1 / -1,
``WOB_REWARD_REASON``). Screenshots are cropped to the task area `MINIWOB_CLIP`: the timer beside it
changes every frame and would defeat the "nothing changed" hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webgym_rollout.errors import InvalidRequest

__all__ = ["MINIWOB_CLIP", "Environment", "parse_environment", "read_state", "start_episode"]

MINIWOB_CLIP = {"x": 0, "y": 0, "width": 160, "height": 210}

_START = """([seed, maxMs]) => {
    if (maxMs !== null) { core.EPISODE_MAX_TIME = maxMs; }
    if (seed !== null) { Math.seedrandom(String(seed)); }
    core.startEpisodeReal();
}"""
_STATE = """() => ({
    utterance: String(core.getUtterance()),
    done: Boolean(WOB_DONE_GLOBAL),
    reward: Number(WOB_REWARD_GLOBAL),
    raw_reward: Number(WOB_RAW_REWARD_GLOBAL),
    reason: WOB_REWARD_REASON == null ? "" : String(WOB_REWARD_REASON),
})"""


@dataclass(frozen=True)
class Environment:
    """``web`` (any website) or ``miniwob`` with its task name."""

    kind: str
    task: str = ""

    @property
    def name(self) -> str:
        return f"miniwob:{self.task}" if self.kind == "miniwob" else "web"


def parse_environment(name: str) -> Environment:
    """``"web"`` or ``"miniwob:<task>"``; anything else is an `InvalidRequest` naming the value."""
    if name in ("", "web"):
        return Environment("web")
    kind, _, task = name.partition(":")
    if kind == "miniwob" and task and all(c.isalnum() or c in "-_." for c in task):
        return Environment("miniwob", task)
    raise InvalidRequest(f"unknown environment {name!r}: expected 'web' or 'miniwob:<task>'")


async def start_episode(page: Any, seed: int | None, *, max_time_s: float | None, timeout_s: float) -> None:
    """Start a seeded episode on a loaded MiniWoB page (Playwright `Page`)."""
    timeout_ms = timeout_s * 1000
    await page.wait_for_selector("#sync-task-cover", state="attached", timeout=timeout_ms)
    await page.evaluate(_START, [seed, None if max_time_s is None else int(max_time_s * 1000)])
    await page.wait_for_function("() => WOB_TASK_READY === true", timeout=timeout_ms)


async def read_state(page: Any) -> dict[str, Any]:
    """The episode's utterance and outcome as a dict with `EnvState`'s fields."""
    return await page.evaluate(_STATE)
