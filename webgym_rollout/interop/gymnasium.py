"""`WebGymEnv`: a `WebEnv` as a Gymnasium environment (``pip install 'webgym[interop]'``).

::

    import gymnasium
    from webgym_rollout.interop import register

    register()                                            # the webgym/... ids (idempotent)
    env = gymnasium.make("webgym/miniwob-click-test-v0")  # starts a browser server and a site server
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step('<tool_call>{"name": ...}</tool_call>')
    env.close()                                           # stops what it started

The API is synchronous: the asynchronous `WebEnv` and its `BrowserClient` run on an event loop of
their own, in a thread the environment starts (with the browser server, when it runs one).

Spaces. The observation is a ``Dict``: ``screenshot``, the image the policy is shown as a uint8
``Box`` of shape (height, width, 3) (the viewport; MiniWoB's task area, 210 x 160), and the text
fields ``instruction``, ``url``, ``title`` and ``text`` (the text observation of the observation
modes, `Observation.text`; "" in image-only modes), each a `UnicodeText`. The action is the model's
reply (a `UnicodeText`), read by the protocol parser the runner uses
(`webgym_rollout.agent.protocol.parse_response`).

Rewards. 0 until the episode ends; then the task kind's judge: a MiniWoB page's own reward
(`ProgrammaticJudge`: 1 when the page reports success), a local site's ground truth (`SiteJudge`).
``terminated``: the agent answered or the page ended the episode; ``truncated``: the step budget ran
out (the kind's horizon, or ``horizon``), or the infrastructure failed.

Mistakes and failures. An agent's mistake is data, as in `WebEnv`: an unparseable reply, a click
on nothing or a refused URL is a no-op step whose ``info["step"].action_error`` says why. An
infrastructure failure during a step (a crashed browser, a lost session, a browser server that
stopped answering) is handled here, one level above the `BrowserError` that `WebEnv` raises: the
episode ends with ``truncated=True``, reward 0, ``info["infrastructure_failure"] = True`` and
``info["error"]`` naming the error's kind. A judge that cannot read a site's truth at the episode's
end (`JudgeError`) likewise: the episode ends as it did, with reward 0 and the same two keys. Its reward
says nothing of the agent: drop the episode (TRL: reward ``None``) rather than score it 0. `reset`
raises the typed error (`BrowserError` and its subclasses: there is no step to carry it), and so
does a step refused for a wrong bearer token (`Unauthorized`: every episode would fail the same way).

Every ``info`` holds ``infrastructure_failure`` (bool), ``error`` ("" or ``kind: message``),
``task_id`` and ``horizon``; a step's also ``step`` (the recorded trajectory `Step`; None when the
infrastructure failed before one was recorded), ``answer`` and, at the end, ``verdicts`` (the
judge's `Verdict`s).

Ids. `register` registers ``webgym/miniwob-<task>-v0`` for each MiniWoB++ page the ``miniwob``
package ships and ``webgym/site-<site>-v0`` for each local site (``shop``, ``reference``,
``travel``). A MiniWoB env seeds the page from the environment's own random generator (so
``reset(seed=...)`` picks the page's seed); a site env draws its task from that site's generated
tasks (`webgym_sites.generate.site_tasks`, ``site_tasks`` of them drawn with ``task_seed``) and plays
it on a fresh site session. ``reset(options={"task": task})`` plays a given `Task` row instead.
Gymnasium 1.x registers ids when a module calls ``gymnasium.register`` (it no longer reads the
``gymnasium.envs`` entry points), so this module registers them when imported, which also makes
``gymnasium.make("webgym_rollout.interop.gymnasium:webgym/site-shop-v0")`` work; `register` does the
same, explicitly. The ids are registered ``nondeterministic``: a live page's timings, and a site
session's fresh id, differ between two runs of one seed.

Services. Without ``browser_url`` the environment runs a browser server on 127.0.0.1 (one
Chromium, allowlisting the site server's ``host:port`` only); without ``sites_url`` a site server on
127.0.0.1 (its ground truth read in-process). Both start on the first `reset` (``gymnasium.make``
stays cheap) and `close` stops them. A site server elsewhere (``sites_url``) must be served with
its default seeds; its ground truth is read from ``truth_url`` with ``truth_token``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import logging
import string
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

try:
    import gymnasium
    import numpy as np
    from gymnasium import spaces
except ImportError as exc:  # optional: interop
    raise ImportError("webgym_rollout.interop.gymnasium needs Gymnasium: pip install 'webgym[interop]'"
                      ) from exc

from webgym_data.importers.miniwob import miniwob_task
from webgym_data.schema import Task
from webgym_rollout.agent.policies import PolicyOutput
from webgym_rollout.agent.protocol import Observation, parse_response
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.env import WebEnv
from webgym_rollout.errors import BrowserError, EpisodeOver, JudgeError, Unauthorized
from webgym_rollout.judge.judges import JudgeResult, ProgrammaticJudge
from webgym_rollout.judge.site import SiteJudge
from webgym_rollout.settings import EnvSettings, ObservationSettings
from webgym_rollout.tasks.kind import kind_class
from webgym_rollout.tasks.miniwob import MINIWOB_CLIP, html_dir
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, TaskOutcome
from webgym_sites.generate import SITES, site_tasks

__all__ = ["NAMESPACE", "GymSettings", "UnicodeText", "WebGymEnv", "env_ids", "register"]

log = logging.getLogger(__name__)
T = TypeVar("T")

NAMESPACE = "webgym"
"""The namespace of the registered ids (``webgym/miniwob-click-test-v0``)."""
_ENTRY_POINT = f"{__name__}:WebGymEnv"
_TEXT_MAX = 1 << 20
"""The longest text an observation field holds (longer texts are cut)."""
_REPLY_MAX = 8192
"""The longest reply the action space samples (any reply is taken)."""


class UnicodeText(spaces.Text):
    """Any Unicode string of `min_length` to `max_length` characters. Gymnasium's `Text` holds only
    the characters of its charset; web pages and replies hold any. Samples are drawn from printable
    ASCII (`sample`); `contains` takes every string within the length bounds."""

    def __init__(self, max_length: int, *, min_length: int = 0,
                 seed: int | np.random.Generator | None = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (
            other.min_length, other.max_length)

    __hash__ = None  # type: ignore[assignment]  # mutable (its random generator), like every Space


@dataclass(frozen=True)
class GymSettings:
    """How a `WebGymEnv` reaches its browsers and sites and what it shows; every field is also a
    keyword of ``gymnasium.make(id, ...)``."""

    browser_url: str | None = None
    """A browser server to use (``webgym-rollout serve``); None: run one on 127.0.0.1."""
    browser_token: str | None = None
    """That browser server's bearer token, if it wants one."""
    sites_url: str | None = None
    """A site server to use (``webgym-rollout serve-sites``, default seeds); None: run one on 127.0.0.1."""
    truth_url: str | None = None
    """The truth listener of the site server at `sites_url` (site ids need it there)."""
    truth_token: str | None = None
    """The truth listener's bearer token."""
    chromium: str | None = None
    """Chromium of the browser server this environment runs (None: `PoolSettings`' default,
    ``WEBGYM_CHROMIUM``)."""
    horizon: int | None = None
    """Steps before the episode is truncated (None: the task kind's own budget)."""
    split: str = "train"
    """The horizon table a site task's budget comes from (train or test)."""
    viewport: str = "1280x720"
    """Browser viewport WIDTHxHEIGHT (the screenshot's size, except MiniWoB's task area)."""
    observation_modes: tuple[str, ...] = ("screenshot",)
    """The observation modes (`ObservationSettings.modes`): screenshot, som, axtree, elements."""
    site_tasks: int = 100
    """How many tasks a site id draws from (`webgym_sites.generate.site_tasks`)."""
    task_seed: int = 0
    """The seed those tasks are drawn with."""
    step_timeout_s: float = 300.0
    """Longest wait for one reset or step before it fails (`TimeoutError`)."""

    def __post_init__(self) -> None:
        if self.horizon is not None and self.horizon < 1:
            raise ValueError(f"horizon: must be >= 1, got {self.horizon}")
        if self.site_tasks < 1:
            raise ValueError(f"site_tasks: must be >= 1, got {self.site_tasks}")
        if self.split not in ("train", "test"):
            raise ValueError(f"split: train or test, got {self.split!r}")
        if self.truth_url and not self.truth_token:
            raise ValueError("truth_token: truth_url needs the truth listener's bearer token")
        ObservationSettings(self.observation_modes)  # raises ValueError naming a bad mode
        EnvSettings(viewport=self.viewport)  # likewise for the viewport


class _LoopThread:
    """An asyncio event loop in a daemon thread; `run` waits for one coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="webgym-gymnasium", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def stop(self) -> None:
        """Cancel what still runs on the loop, let closed connections finish closing, stop the thread."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(_wind_down(), 30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


async def _wind_down() -> None:
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    await asyncio.sleep(0.05)  # transports that were closed call their callbacks
    await asyncio.get_running_loop().shutdown_asyncgens()


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    if not parts.hostname or port is None:
        raise ValueError(f"sites_url: {url!r} needs an http(s) scheme and a host")
    return f"{parts.hostname}:{port}"


class WebGymEnv(gymnasium.Env):
    """A `WebEnv` as a Gymnasium environment (see the module docstring). `environment` names the
    task kind and its argument as a task row does: ``miniwob:click-test`` or ``site:shop``; other
    kinds (``web``) play only the tasks given by ``reset(options={"task": task})``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 1}
    """``render_fps``: nominal, for video recorders (a step takes as long as the page does)."""

    def __init__(self, environment: str, settings: GymSettings | None = None, *,
                 render_mode: str | None = None, **overrides: Any):
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode: {render_mode!r}; the modes are {self.metadata['render_modes']}")
        self.settings = dataclasses.replace(settings or GymSettings(), **overrides)
        cls, self.argument = kind_class(environment)  # InvalidRequest names an unknown environment
        self.kind_name, self.environment, self.render_mode = cls.name, environment, render_mode
        if self.kind_name == "site" and self.argument not in SITES:
            raise ValueError(f"environment: no local site {self.argument!r} (the sites: {', '.join(SITES)})")
        if self.kind_name == "site" and self.settings.sites_url and not self.settings.truth_url:
            raise ValueError("truth_url: a site environment on a site server it does not run needs that "
                             "server's truth listener (truth_url, truth_token) to judge its episodes")
        width, height = (MINIWOB_CLIP["width"], MINIWOB_CLIP["height"]) if self.kind_name == "miniwob" \
            else EnvSettings(viewport=self.settings.viewport).viewport_size
        self.observation_space = spaces.Dict({
            "screenshot": spaces.Box(0, 255, shape=(height, width, 3), dtype=np.uint8),
            "instruction": UnicodeText(_TEXT_MAX), "url": UnicodeText(_TEXT_MAX),
            "title": UnicodeText(_TEXT_MAX), "text": UnicodeText(_TEXT_MAX)})
        self.action_space = UnicodeText(_REPLY_MAX)
        self._loop: _LoopThread | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._sites: Any = None
        self._env: WebEnv | None = None
        self._facts: Callable[[str], Any] | None = None
        self._tasks: list[Task] = []
        self._task: Task | None = None
        self._started_at = 0.0
        self._last: dict[str, Any] | None = None
        self._episodes = 0
        self.browser_url = ""
        """The browser server the environment uses (once `reset` started or reached it)."""
        self.sites_url = ""
        """The site server the environment uses (likewise)."""

    # ----------------------------------------------------------------------------------- API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode on a fresh browser session: the task the seeded generator draws, or
        ``options["task"]``. Raises the typed `BrowserError` when the infrastructure fails."""
        super().reset(seed=seed)
        env = self._start()
        task = (options or {}).get("task") or self._draw_task()
        if not isinstance(task, Task):
            raise TypeError(f"options['task']: a webgym_data.schema.Task, got {type(task).__name__}")
        self._episodes += 1
        self._task, self._started_at = task, time.time()
        observation = self._run(env.reset(task, split=self.settings.split,
                                          episode_id=f"gymnasium-{self._episodes}"))
        self._last = self._observation(observation)
        return self._copy(self._last), self._info(env)

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Carry out the reply `action` (see the module docstring). Raises `EpisodeOver` when no
        episode is under way (before `reset`, after the episode ended)."""
        if not isinstance(action, str):
            raise TypeError(f"step() takes the model's reply as a str, got {type(action).__name__}")
        env = self._env
        if env is None or self._last is None:
            raise EpisodeOver("no episode was started: call reset() before step()")
        output = PolicyOutput(response=action, parsed=parse_response(action), messages=[], model="gymnasium")
        try:
            result = self._run(env.step(output))
        except Unauthorized:
            raise
        except BrowserError as exc:  # the infrastructure's failure: the episode ends, the agent is not scored
            log.warning("episode of task %s: the infrastructure failed (%s: %s)", self._task_id(), exc.kind,
                        exc)
            self._run(env.close())
            return self._copy(self._last), 0.0, False, True, self._info(env, failure=exc, step=None)
        self._last = self._observation(result.observation)
        info = self._info(env, step=result.info["step"])
        reward = 0.0
        if result.terminated or result.truncated:
            try:
                judged = self._run(self._judge_episode(env, truncated=result.truncated))
            except JudgeError as exc:  # the truth could not be read: no verdict, the agent is not scored
                log.warning("episode of task %s: the judge failed (%s: %s)", self._task_id(), exc.kind, exc)
                info.update(self._info(env, failure=exc))
            else:
                reward, info["verdicts"] = judged.reward, list(judged.verdicts)
        return self._copy(self._last), float(reward), result.terminated, result.truncated, info

    def render(self) -> np.ndarray | None:
        """The last screenshot (``rgb_array``), or None without a render mode."""
        if self.render_mode is None or self._last is None:
            return None
        return self._last["screenshot"].copy()

    def close(self) -> None:
        """Close the session and stop what this environment started (idempotent)."""
        loop, self._loop = self._loop, None
        try:
            if loop is not None:
                env, stack, self._env, self._stack = self._env, self._stack, None, None
                try:
                    with contextlib.suppress(Exception):  # a session on a server that is gone
                        if env is not None:
                            loop.run(env.close(), 60)
                    if stack is not None:
                        loop.run(stack.aclose(), 120)  # the client, then the browser server
                finally:
                    loop.stop()
        finally:
            sites, self._sites = self._sites, None
            if sites is not None:
                sites.stop()
        super().close()

    # ------------------------------------------------------------------------------- helpers

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return self._loop.run(coroutine, self.settings.step_timeout_s)

    def _start(self) -> WebEnv:
        """The `WebEnv`, with the site server, the loop thread, the browser server and the client it
        needs started on the first call."""
        if self._env is not None:
            return self._env
        settings = self.settings
        sites_url = settings.sites_url
        facts = None
        if sites_url is None:
            from webgym_rollout.tasks.sites import SiteServer  # lazy: the site server's modules

            self._sites = SiteServer("127.0.0.1", 0).start()
            sites_url, facts = self._sites.base_url, self._sites.facts
        elif settings.truth_url:
            from webgym_sites.truth import TruthClient  # lazy: httpx, for a site server elsewhere only

            facts = TruthClient(settings.truth_url, settings.truth_token or "").facts
        try:
            self._loop = _LoopThread()
            client = self._run(self._open_client(sites_url))
        except BaseException:
            self.close()
            raise
        horizons = {self.kind_name: settings.horizon} if settings.horizon is not None else {}
        self.sites_url = sites_url
        env_settings = EnvSettings(viewport=settings.viewport, sites_url=sites_url, horizons=horizons,
                                   observation=ObservationSettings(settings.observation_modes))
        self._env = WebEnv(client, env_settings)
        if self.kind_name == "site":
            self._tasks = site_tasks(settings.site_tasks, seed=settings.task_seed, base_url=sites_url,
                                     sites=(self.argument,))
        self._facts = facts
        return self._env

    async def _open_client(self, sites_url: str) -> BrowserClient:
        """On the loop thread: the browser server (unless `browser_url`) and a client of it, both
        closed by ``self._stack``."""
        self._stack = stack = contextlib.AsyncExitStack()
        url = self.settings.browser_url
        if url is None:
            # lazy: fastapi, uvicorn, playwright
            from webgym_rollout.browser.pool import PoolSettings
            from webgym_rollout.browser.server import ServerSettings, running_server

            chromium = {"executable_path": self.settings.chromium} if self.settings.chromium else {}
            pool = PoolSettings(browsers=1, contexts_per_browser=2, allow_hosts=(_host_port(sites_url),),
                                **chromium)
            url, _pool = await stack.enter_async_context(
                running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)))
        self.browser_url = url
        return await stack.enter_async_context(BrowserClient(url, token=self.settings.browser_token))

    def _draw_task(self) -> Task:
        if self.kind_name == "miniwob":
            return miniwob_task(self.argument, int(self.np_random.integers(0, 2**31 - 1)))
        if self.kind_name == "site":
            return self._tasks[int(self.np_random.integers(0, len(self._tasks)))]
        raise ValueError(f"a {self.environment!r} environment plays the tasks it is given: "
                         "reset(options={'task': task})")

    async def _judge_episode(self, env: WebEnv, *, truncated: bool) -> JudgeResult:
        assert self._task is not None
        episode = Episode(task=self._task, episode_id=f"gymnasium-{self._episodes}",
                          split=self.settings.split, instruction=env.instruction or self._task.task_name,
                          policy_model="gymnasium",
                          status=EpisodeStatus.TIMEOUT if truncated else EpisodeStatus.OK, answer=env.answer,
                          outcome=env.outcome or TaskOutcome(), started_at=self._started_at,
                          duration_s=time.time() - self._started_at, steps=list(env.steps))
        kind_name = kind_class(self._task.environment)[0].name
        if kind_name == "miniwob":
            return await ProgrammaticJudge().score(episode)
        if kind_name == "site" and self._facts is not None:
            return await SiteJudge(self._facts, [*self._tasks, self._task]).score(episode)
        return JudgeResult(0.0, (), "none")  # a website: the judge of a run decides (a rubric judge)

    def _observation(self, observation: Observation) -> dict[str, Any]:
        space = self.observation_space["screenshot"]
        return {"screenshot": _pixels(observation.screenshot, space.shape),
                "instruction": observation.instruction[:_TEXT_MAX], "url": observation.url[:_TEXT_MAX],
                "title": observation.title[:_TEXT_MAX], "text": observation.text[:_TEXT_MAX]}

    @staticmethod
    def _copy(observation: dict[str, Any]) -> dict[str, Any]:
        return {**observation, "screenshot": observation["screenshot"].copy()}

    def _task_id(self) -> str:
        return self._task.task_id if self._task is not None else ""

    def _info(self, env: WebEnv, *, failure: Exception | None = None, **more: Any) -> dict[str, Any]:
        info: dict[str, Any] = {"task_id": self._task_id(), "horizon": env.horizon,
                                "infrastructure_failure": failure is not None,
                                "error": f"{getattr(failure, 'kind', 'error')}: {failure}" if failure else ""}
        if "step" in more:
            info.update(step=more["step"], answer=env.answer)
        return info


def _pixels(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The screenshot (PNG or JPEG) as a uint8 array of `shape` (height, width, 3); resized to it
    when the page's screenshot has another size (a device scale factor)."""
    from PIL import Image  # optional: rollout (pillow)

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        height, width = shape[0], shape[1]
        if rgb.size != (width, height):
            rgb = rgb.resize((width, height))
        return np.asarray(rgb, dtype=np.uint8).copy()


def env_ids() -> list[str]:
    """The ids `register` registers: one per MiniWoB++ page the ``miniwob`` package ships (none
    without it) and one per local site."""
    try:
        pages = sorted(path.stem for path in (html_dir() / "miniwob").glob("*.html"))
    except ImportError:
        pages = []
    return [f"{NAMESPACE}/miniwob-{page}-v0" for page in pages] + [f"{NAMESPACE}/site-{site}-v0"
                                                                   for site in SITES]


def register() -> list[str]:
    """Register the ids of `env_ids` with Gymnasium (those already registered are left alone);
    returns them."""
    ids = env_ids()
    for env_id in ids:
        if env_id in gymnasium.registry:
            continue
        name = env_id.removeprefix(f"{NAMESPACE}/").removesuffix("-v0")
        kind, _, argument = name.partition("-")
        gymnasium.register(env_id, entry_point=_ENTRY_POINT, nondeterministic=True,
                           kwargs={"environment": f"{kind}:{argument}"})
    return ids


register()  # Gymnasium's convention: importing the module registers its ids (see the module docstring)
