"""MiniWoB++ as a task kind: ``environment="miniwob:click-button"`` plus a seed. Every
MiniWoB-specific line of the rollout side is here.

The pages ship in the ``miniwob`` package (`html_dir`) and are served on 127.0.0.1 by
`webgym_rollout.tasks.sites`. A page shows a START cover; `MiniWobTask.start_page` seeds its random
generator (``Math.seedrandom``), starts the episode (``core.startEpisodeReal()``) and waits for
``WOB_TASK_READY``. `MiniWobTask.read_page` reads the instruction (``core.getUtterance()``) and the
outcome (``WOB_DONE_GLOBAL``, ``WOB_REWARD_GLOBAL`` time-discounted, ``WOB_RAW_REWARD_GLOBAL`` 1 / -1,
``WOB_REWARD_REASON``). Screenshots are cropped to the task area (`MiniWobPage.clip`): the timer
beside it changes every frame and would defeat the "nothing changed" hash.

A MiniWoB episode's instruction is the page's utterance, its reward the page's raw reward (read
after every step: an episode ends when the page says it is done), and its step budget
`MiniWobTask.default_horizon`, 6 steps (short, single-page tasks; `--horizons miniwob=N` sets another).
"""

from __future__ import annotations

import difflib
import urllib.error
import urllib.request
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from webgym_rollout.browser.guard import is_loopback_host
from webgym_rollout.browser.pages import PageHooks
from webgym_rollout.browser.protocol import EnvState
from webgym_rollout.tasks.kind import TaskKind
from webgym_rollout.trajectory.contract import TaskOutcome

if TYPE_CHECKING:
    from webgym_rollout.browser.client import BrowserSession
    from webgym_rollout.settings import EnvSettings

__all__ = ["MINIWOB_CLIP", "MiniWobPage", "MiniWobTask", "html_dir", "task_names", "task_url", "unknown_task"]

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


def html_dir() -> Path:
    """The ``html`` folder shipped in the ``miniwob`` package (raises ImportError naming the fix)."""
    try:
        import miniwob  # optional: miniwob
    except ImportError as exc:
        raise ImportError("the 'miniwob' package is missing: pip install 'webgym[rollout]'") from exc
    folder = Path(miniwob.__file__).resolve().parent / "html"
    if not (folder / "miniwob").is_dir():
        raise ImportError(f"{folder} has no miniwob/ pages; reinstall the 'miniwob' package")
    return folder


@lru_cache(maxsize=1)
def task_names() -> frozenset[str]:
    """The MiniWoB++ tasks the installed ``miniwob`` package ships (its pages' names); empty when
    the package is not installed here (the site server may still have it)."""
    try:
        folder = html_dir() / "miniwob"
    except ImportError:
        return frozenset()
    return frozenset(page.stem for page in folder.glob("*.html"))


def unknown_task(name: str, sites_url: str | None = None) -> str:
    """What is wrong with MiniWoB++ task `name` ("" when the package ships it, when it is not
    installed here, or when the site server at `sites_url` serves the page: a site of your own may add
    pages of the same kind): it names the environment and the closest shipped task names."""
    names = task_names()
    if not names or name in names or (sites_url and site_serves(sites_url, name)):
        return ""
    close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
    hint = (f"did you mean {' or '.join(repr(f'miniwob:{c}') for c in close)}?" if close
            else "its page names are the tasks, e.g. 'miniwob:click-button'")
    served = f", nor does the site server at {sites_url} serve it" if sites_url else ""
    return (f"environment 'miniwob:{name}': the miniwob package has no task {name!r} ({len(names)} tasks "
            f"in {html_dir() / 'miniwob'}){served}; {hint}")


@lru_cache(maxsize=1024)
def site_serves(sites_url: str, name: str) -> bool:
    """Whether the site server at `sites_url` answers the page of task `name` (2xx); False when it
    does not, cannot be reached, or is not on this machine (only a loopback address or ``localhost``
    is asked: a check looks up no name). Asked once per server and name."""
    if not is_loopback_host(urlsplit(sites_url).hostname or ""):
        return False
    request = urllib.request.Request(task_url(sites_url, name), method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return 200 <= answer.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def task_url(sites_url: str, task: str) -> str:
    """The page of MiniWoB task `task` (e.g. ``click-button``) on a site server at `sites_url`."""
    return f"{sites_url.rstrip('/')}/miniwob/{task}.html"


class MiniWobPage(PageHooks):
    """Server side: start the seeded episode once the page has loaded; read the page's reward."""

    name = "miniwob"
    takes_argument = True
    clip: ClassVar[dict[str, int] | None] = MINIWOB_CLIP
    state_script: ClassVar[str | None] = _STATE

    @classmethod
    async def start_page(cls, page: Any, argument: str, seed: int | None, *, max_time_s: float | None,
                         timeout_s: float) -> None:
        timeout_ms = timeout_s * 1000
        await page.wait_for_selector("#sync-task-cover", state="attached", timeout=timeout_ms)
        await page.evaluate(_START, [seed, None if max_time_s is None else int(max_time_s * 1000)])
        await page.wait_for_function("() => WOB_TASK_READY === true", timeout=timeout_ms)


class MiniWobTask(TaskKind):
    """A MiniWoB++ page, seeded with the task's ``env_seed``; the page reports the reward."""

    name = "miniwob"
    page = MiniWobPage
    keeps_reward: ClassVar[bool] = True
    default_horizon: ClassVar[int | None] = 6  # short, single-page tasks

    def check(self, settings: EnvSettings) -> None:
        problem = unknown_task(self.argument, settings.sites_url)
        if problem:  # its page would be a 404: refused before any browser opens it
            raise ValueError(f"task {self.task.task_id}: {problem}")
        if not settings.sites_url:
            raise ValueError(f"sites_url: task {self.task.task_id} is a MiniWoB task ({self.environment}); "
                             "give the site server's URL (webgym-rollout serve-sites; --sites-url)")

    def start_url(self, settings: EnvSettings) -> str:
        self.check(settings)
        return task_url(str(settings.sites_url), self.argument)

    async def setup(self, session: BrowserSession) -> str:
        state = await session.env_state()
        return state.utterance or self.task.task_name

    async def validate(self, session: BrowserSession) -> TaskOutcome:
        return self.outcome(await session.env_state())

    def outcome(self, state: EnvState | None) -> TaskOutcome:
        state = state or EnvState()
        return TaskOutcome(done=state.done, raw_reward=state.raw_reward, reason=state.reason)
