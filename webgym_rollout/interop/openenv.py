"""An OpenEnv server over `WebGymEnv`: ``webgym-rollout serve-openenv`` (``pip install 'webgym[interop]'``).

The server speaks OpenEnv's environment protocol as ``openenv-core`` defines it: it is built with
openenv-core's own `HTTPEnvServer` over `WebGymOpenEnv`, an openenv `Environment`, so its routes are
openenv's: ``GET /health``, ``/schema``, ``/metadata``, ``/state``, ``POST /reset``, ``/step`` and
the ``/ws`` session (``reset``, ``step``, ``state`` and ``close`` messages). Over plain HTTP every
request gets a fresh environment (openenv's design), so an episode runs over ``/ws``, one
environment per connection: openenv's `EnvClient` (or `WebGymOpenEnvClient`, typed, here) uses it::

    webgym-rollout serve-openenv --port 8600 --max-sessions 4 &

    from webgym_rollout.interop import WebGymAction, WebGymOpenEnvClient

    with WebGymOpenEnvClient(base_url="http://127.0.0.1:8600").sync() as env:
        result = env.reset(seed=3, task="miniwob:click-test")
        result = env.step(WebGymAction(reply='<tool_call>{"name": ...}</tool_call>'))
        result.reward, result.done, result.observation.error

Models. The action is `WebGymAction` (``reply``: the model's reply, read by the runner's parser).
The observation is `WebGymObservation`: ``instruction``, ``url``, ``title``, ``text`` (the text
observation of the observation modes), ``screenshot`` (the image the policy is shown, a PNG
encoded as base64, standard alphabet, no ``data:`` prefix; `WebGymObservation.screenshot_png`
decodes it), ``task_id``, ``step`` (the step's record: the `Step` fields but the screenshot, as
JSON), ``verdicts`` (the judge's, at the end), ``truncated``, ``infrastructure_failure`` and
``error``, with openenv's ``done`` and ``reward``. The state is `WebGymState`: ``episode_id``,
``step_count``, ``task_id``, ``environment``, ``horizon``.

Tasks. ``reset`` takes openenv's ``seed`` and ``episode_id`` and two fields of its own: ``task``,
the environment as a task row names it (``miniwob:click-test``, ``site:shop``) or a Gymnasium id of
`webgym_rollout.interop.gymnasium` (``webgym/miniwob-click-test-v0``, ``webgym/site-shop-v0``),
default the server's ``--environment``; and ``task_id``, one task of a site environment's generated
tasks (``--site-tasks`` of them, drawn with ``--task-seed``) instead of the one the seed draws. The
episode runs as in `WebGymEnv`: reward 0 until the end, then the task kind's judge (a MiniWoB page's
own reward, a local site's ground truth).

Errors. An agent's mistake (a reply that does not parse, a click on nothing) is a no-op step whose
``error`` says why, ``infrastructure_failure`` false. An infrastructure failure (a browser server
that stopped answering, a crashed browser, a truth listener that does not answer, a step longer
than ``--step-timeout-s``) ends the episode
with ``done``, ``infrastructure_failure`` true, ``error`` naming its kind and ``reward`` None: drop
the episode, do not score it 0. A ``reset`` the infrastructure fails is answered the same way. A
request the server cannot take (an unknown ``task``, a ``task_id`` it does not hold, an action
without ``reply``) is openenv's error message (its client raises).

Services and security. The server runs a browser server on 127.0.0.1 (a context per session, a
Chromium per six of them, allowlisting the site server's ``host:port`` only: the egress guard of
``webgym-rollout serve``) and a site server (with its truth listener), unless given
``--browser-url`` and ``--sites-url`` (with ``--truth-url``, ``--truth-token``). Each session has
its own `WebGymEnv`, over the shared servers. It binds 127.0.0.1; another address needs
``--token``, and since openenv's client sends no headers, the token is the first segment of the
URL path: clients use ``base_url="http://host:8600/<token>"`` (the server answers nothing else).
Every request passes the browser server's Host and Origin check (`webgym_rollout.browser.callers`),
the websocket handshake included.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import io
import logging
import re
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import (
        Action,
        ConcurrencyConfig,
        EnvironmentMetadata,
        Observation,
        State,
    )
    from pydantic import Field
except ImportError as exc:  # optional: interop
    raise ImportError("webgym_rollout.interop.openenv needs openenv-core: pip install 'webgym[interop]'"
                      ) from exc

import click
import numpy as np
from fastapi import FastAPI, WebSocketDisconnect
from fastapi.responses import JSONResponse

from webgym_core.settings import flat, load_settings, settings_options
from webgym_data.schema import Task
from webgym_rollout.browser.callers import CallerCheck, Refusal
from webgym_rollout.browser.guard import is_loopback_host
from webgym_rollout.errors import BrowserError, EpisodeOver
from webgym_rollout.interop.gymnasium import NAMESPACE, GymSettings, WebGymEnv, _LoopThread
from webgym_sites.generate import site_tasks

__all__ = ["OpenEnvSettings", "WebGymAction", "WebGymObservation", "WebGymOpenEnv", "WebGymOpenEnvClient",
           "WebGymState", "create_openenv_app", "environment_of", "serve_openenv_command"]

log = logging.getLogger(__name__)

_CONTEXTS_PER_BROWSER = 6
"""Sessions per Chromium of a browser server this runs (`PoolSettings.contexts_per_browser`'s default)."""
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,}")
"""A token fits one URL path segment unescaped, and is not short."""


# ------------------------------------------------------------------------------------- models


class WebGymAction(Action):
    """One step's action: the model's reply, as the policy wrote it."""

    reply: str = Field(description="The model's reply; its <tool_call> is the action (the runner's parser "
                                   "reads it; a reply without a valid one is a no-op step with an error)")


class WebGymObservation(Observation):
    """What the policy is shown after a reset or a step, and how the step went."""

    instruction: str = Field(default="", description="The task's instruction")
    url: str = Field(default="", description="The page's URL")
    title: str = Field(default="", description="The page's title")
    text: str = Field(default="", description="The text observation of the observation modes ('' in "
                                              "image-only modes)")
    screenshot: str = Field(default="", description="The image the policy is shown: a PNG as base64 "
                                                    "(standard alphabet, no data: prefix); '' when none")
    task_id: str = Field(default="", description="The task played")
    step: dict[str, Any] | None = Field(default=None, description="The step's record (the trajectory Step's "
                                                                  "fields but its screenshot); None at reset "
                                                                  "and when the infrastructure failed first")
    verdicts: list[dict[str, Any]] = Field(default_factory=list, description="The judge's verdicts, at the "
                                                                             "episode's end")
    truncated: bool = Field(default=False, description="The episode ended without the agent or the page "
                                                       "ending it (the horizon, or a failure)")
    infrastructure_failure: bool = Field(default=False, description="A browser or server failure ended the "
                                                                    "episode: reward is None, drop it")
    error: str = Field(default="", description="'' or why the step did not go as asked: the agent's "
                                               "mistake, or 'kind: message' of the infrastructure's failure")

    def screenshot_png(self) -> bytes:
        """The screenshot's PNG bytes (b"" when there is none)."""
        return base64.b64decode(self.screenshot) if self.screenshot else b""


class WebGymState(State):
    """The session's episode: openenv's id and step count, and the task played."""

    task_id: str = Field(default="", description="The task of the current episode")
    environment: str = Field(default="", description="Its environment (miniwob:click-test, site:shop)")
    horizon: int | None = Field(default=None, description="Its step budget")


# ----------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class OpenEnvSettings:
    """Settings of ``webgym-rollout serve-openenv``: where it listens, who may call it, how many
    sessions it holds, and (flat) the `GymSettings` each session's environment gets."""

    host: str = "127.0.0.1"
    """Address to bind; anything but a loopback address requires --token."""
    port: int = 8600
    """Port to bind (0 picks a free one)."""
    token: str | None = field(default=None, metadata={"env": "WEBGYM_OPENENV_TOKEN"})
    """The secret first segment of every URL path (openenv's client sends no headers): clients use
    base_url http://HOST:PORT/TOKEN. At least 16 characters of A-Z a-z 0-9 . _ ~ -; required off
    loopback."""
    server_names: tuple[str, ...] = ()
    """More names clients reach the server by (the Host header): ``name`` or ``name:port``; any
    other Host gets 421, so that no web page reaches it through DNS rebinding."""
    max_sessions: int = 4
    """Concurrent sessions (websocket connections), each with its own environment."""
    session_timeout_s: float | None = None
    """Close a session idle this long (None: never)."""
    environment: str = "miniwob:click-test"
    """The task a reset plays without a ``task`` field: an environment (``miniwob:click-test``,
    ``site:shop``) or a Gymnasium id (``webgym/site-shop-v0``)."""
    episode: GymSettings = flat(GymSettings)
    """Each session's `WebGymEnv`: the servers it attaches to (none: this server runs them), the
    horizon, the viewport, the observation modes, the site tasks."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be in 0..65535, got {self.port}")
        if self.token is not None and not _TOKEN.fullmatch(self.token):
            raise ValueError("token: at least 16 characters of A-Z a-z 0-9 . _ ~ - (a URL path segment), "
                             "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'")
        if not self.token and not is_loopback_host(self.host):
            raise ValueError(f"host: refusing to bind {self.host} without --token: anyone who reaches it "
                             "could drive the browsers. Pass --token SECRET (clients put it first in the URL "
                             "path) or bind 127.0.0.1")
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions: must be >= 1, got {self.max_sessions}")
        if self.session_timeout_s is not None and self.session_timeout_s <= 0:
            raise ValueError(f"session_timeout_s: must be > 0, got {self.session_timeout_s}")
        environment_of(self.environment)  # a ValueError naming a malformed one
        CallerCheck(self.host, self.port, server_names=self.server_names)  # a ValueError naming server_names


def environment_of(name: str) -> str:
    """The environment a ``task`` names: ``miniwob:click-test`` as given, a Gymnasium id
    ``webgym/miniwob-click-test-v0`` as ``miniwob:click-test``."""
    if name.startswith(f"{NAMESPACE}/"):
        kind, dash, argument = name.removeprefix(f"{NAMESPACE}/").removesuffix("-v0").partition("-")
        if dash and argument and name.endswith("-v0"):
            return f"{kind}:{argument}"
        raise ValueError(f"task: {name!r} is not a {NAMESPACE}/<kind>-<name>-v0 id")
    if ":" not in name:
        raise ValueError(f"task: {name!r} names no environment (miniwob:click-test, site:shop, "
                         f"{NAMESPACE}/site-shop-v0)")
    return name


# ----------------------------------------------------------------------------------- services


class _Services:
    """The browser server and site server the sessions share (started with the app unless the
    settings attach to running ones), and the sessions still open (closed before they stop). A
    browser server this runs has an event loop of its own, in a thread: openenv's routes call
    environments' synchronous `close` on the app's loop, and a close waits for the browser server."""

    def __init__(self, settings: OpenEnvSettings):
        self.settings = settings
        self.episode = settings.episode
        self.sessions: set[WebGymOpenEnv] = set()
        self._sites: Any = None
        self._browsers: _LoopThread | None = None
        self._stack = contextlib.AsyncExitStack()
        self._tasks: dict[str, list[Task]] = {}

    async def start(self) -> None:
        episode = self.episode
        if episode.sites_url is None:
            from webgym_rollout.tasks.sites import SiteServer  # lazy: the site server's modules

            self._sites = sites = SiteServer("127.0.0.1", 0).start()
            episode = dataclasses.replace(episode, sites_url=sites.base_url, truth_url=sites.truth_url,
                                          truth_token=sites.truth_token)
        if episode.browser_url is None:
            self._browsers = _LoopThread()
            url = await self._on_browser_loop(self._start_browser_server(episode))
            episode = dataclasses.replace(episode, browser_url=url, browser_token=None)
        self.episode = episode
        log.info("openenv sessions use the browser server %s and the site server %s", episode.browser_url,
                 episode.sites_url)

    async def _start_browser_server(self, episode: GymSettings) -> str:
        """On the browser loop: a browser server allowlisting the site server, a context per session
        and a Chromium per `_CONTEXTS_PER_BROWSER` of them."""
        # lazy: playwright, and the browser server's modules
        from webgym_rollout.browser.pool import PoolSettings
        from webgym_rollout.browser.server import ServerSettings, running_server

        chromium = {"executable_path": episode.chromium} if episode.chromium else {}
        slots = self.settings.max_sessions + 1  # one spare, for plain HTTP resets
        browsers = -(-slots // _CONTEXTS_PER_BROWSER)
        pool = PoolSettings(browsers=browsers, contexts_per_browser=-(-slots // browsers),
                            allow_hosts=(_host_port(episode.sites_url or ""),), **chromium)
        url, _pool = await self._stack.enter_async_context(
            running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)))
        return url

    async def _on_browser_loop(self, coroutine: Any) -> Any:
        assert self._browsers is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._browsers.loop))

    async def stop(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(session.close) for session in list(self.sessions)),
                             return_exceptions=True)
        try:
            if self._browsers is not None:
                try:
                    await self._on_browser_loop(self._stack.aclose())  # the browser server, its Chromium
                finally:
                    await asyncio.to_thread(self._browsers.stop)
                    self._browsers = None
        finally:
            if self._sites is not None:
                self._sites.stop()

    def site_task(self, environment: str, task_id: str) -> Task:
        """The task `task_id` among the generated tasks of the site `environment` names."""
        kind, _, site = environment.partition(":")
        if kind != "site":
            raise ValueError(f"task_id: only a site environment's tasks have ids here, not {environment!r}'s")
        if site not in self._tasks:
            self._tasks[site] = site_tasks(self.episode.site_tasks, seed=self.episode.task_seed,
                                           base_url=self.episode.sites_url or "", sites=(site,))
        for task in self._tasks[site]:
            if task.task_id == task_id:
                return task
        raise ValueError(f"task_id: no task {task_id!r} among the {len(self._tasks[site])} generated tasks "
                         f"of {environment} (--site-tasks, --task-seed)")


def _host_port(url: str) -> str:
    from urllib.parse import urlsplit  # lazy: only when this server runs the browser server

    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 80}"


# -------------------------------------------------------------------------------- environment


class WebGymOpenEnv(Environment[WebGymAction, WebGymObservation, WebGymState]):
    """One session's environment: a `WebGymEnv` over the server's shared services, played through
    openenv's `reset` / `step` / `state` (see the module docstring). Cheap to make: it starts its
    `WebGymEnv` on the first reset."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    """Each session has its own `WebGymEnv` and browser session; the servers they share are made
    for many clients."""

    def __init__(self, services: _Services):
        super().__init__()
        self._services = services
        self._gym: WebGymEnv | None = None
        self._state = WebGymState()
        self._over = True

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              task_id: str | None = None, **unknown: Any) -> WebGymObservation:
        """Start an episode of `task` (default: the server's ``--environment``): the task the seed
        draws, or the site task `task_id`."""
        if unknown:
            raise ValueError(f"reset: unknown field(s) {', '.join(sorted(unknown))}; it takes seed, "
                             "episode_id, task and task_id")
        environment = environment_of(task or self._services.settings.environment)
        options = {"task": self._services.site_task(environment, task_id)} if task_id else None
        gym = self._gym_for(environment)
        self._state = WebGymState(episode_id=episode_id or uuid.uuid4().hex, environment=environment)
        self._over = False
        try:
            observation, info = gym.reset(seed=seed, options=options)
        except (BrowserError, TimeoutError) as exc:  # the infrastructure's failure: an observation says so
            return self._failed(exc)
        self._state.task_id, self._state.horizon = info["task_id"], info["horizon"]
        return _observation(observation, info)

    def step(self, action: WebGymAction, timeout_s: float | None = None, **kwargs: Any) -> WebGymObservation:
        """Carry out the reply; an agent's mistake and an infrastructure failure are observations
        (see the module docstring)."""
        gym = self._gym
        if gym is None or self._over:
            return WebGymObservation(done=True, task_id=self._state.task_id,
                                     error="episode_over: no episode under way; reset first (over plain HTTP "
                                           "every request gets a fresh environment: use the /ws session)")
        try:
            observation, reward, terminated, truncated, info = gym.step(action.reply)
        except (BrowserError, EpisodeOver, TimeoutError) as exc:  # Unauthorized (WebGymEnv raises it) too;
            return self._failed(exc)  # TimeoutError: no answer within --step-timeout-s
        self._state.step_count += 1
        done = terminated or truncated
        self._over = done
        if info["infrastructure_failure"]:
            self._drop_gym()
            return _observation(observation, info, done=True, truncated=True, reward=None, failure=True)
        return _observation(observation, info, done=done, truncated=truncated, reward=reward)

    @property
    def state(self) -> WebGymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="webgym", version=_version(),
            description="Visual web tasks in real Chromium (MiniWoB++ pages, local sites with ground truth): "
                        "the action is the model's reply, the observation the screenshot (base64 PNG) and "
                        f"the page's text; reset(task=...) picks the environment (default "
                        f"{self._services.settings.environment}).")

    def close(self) -> None:
        """Close this session's `WebGymEnv` (idempotent)."""
        self._drop_gym()
        self._services.sessions.discard(self)

    def _gym_for(self, environment: str) -> WebGymEnv:
        if self._gym is not None and self._gym.environment == environment:
            return self._gym
        gym = WebGymEnv(environment, self._services.episode)  # an unknown environment raises here
        self._drop_gym()
        self._gym = gym
        self._services.sessions.add(self)
        return gym

    def _drop_gym(self) -> None:
        gym, self._gym = self._gym, None
        if gym is not None:
            gym.close()

    def _failed(self, exc: BaseException) -> WebGymObservation:
        kind = getattr(exc, "kind", type(exc).__name__)
        if isinstance(exc, EpisodeOver):
            return WebGymObservation(done=True, task_id=self._state.task_id, error=f"{kind}: {exc}")
        log.warning("session of task %s: the infrastructure failed (%s: %s)", self._state.task_id, kind, exc)
        self._over = True
        self._drop_gym()
        return WebGymObservation(done=True, truncated=True, reward=None, task_id=self._state.task_id,
                                 infrastructure_failure=True, error=f"{kind}: {exc}")


def _observation(observation: dict[str, Any], info: dict[str, Any], *, done: bool = False,
                 truncated: bool = False, reward: float | None = None, failure: bool = False
                 ) -> WebGymObservation:
    step = info.get("step")
    error = info["error"] if failure else (step.action_error if step is not None else "")
    return WebGymObservation(
        done=done, reward=reward, instruction=observation["instruction"], url=observation["url"],
        title=observation["title"], text=observation["text"],
        screenshot=_png_base64(observation["screenshot"]), task_id=info["task_id"], step=_step_record(step),
        truncated=truncated, infrastructure_failure=failure, error=error,
        verdicts=[dataclasses.asdict(verdict) for verdict in info.get("verdicts", ())])


def _step_record(step: Any) -> dict[str, Any] | None:
    if step is None:
        return None
    record = dataclasses.asdict(step)
    del record["screenshot"]  # the observation's screenshot
    record["logprobs"] = list(record["logprobs"])
    return record


def _png_base64(pixels: np.ndarray) -> str:
    from PIL import Image  # optional: rollout (pillow)

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _version() -> str:
    import importlib.metadata  # lazy: metadata only

    try:
        return importlib.metadata.version("webgym")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------------------------- client


class WebGymOpenEnvClient(EnvClient[WebGymAction, WebGymObservation, WebGymState]):
    """openenv's `EnvClient` for this server, typed: `step` takes a `WebGymAction` (or the reply as
    a str), results hold `WebGymObservation`s, `state` is a `WebGymState`. Asynchronous, as every
    openenv client; ``.sync()`` gives the synchronous wrapper."""

    def _step_payload(self, action: WebGymAction | str) -> dict[str, Any]:
        action = WebGymAction(reply=action) if isinstance(action, str) else action
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[WebGymObservation]:
        observation = WebGymObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                        done=payload.get("done", False))
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> WebGymState:
        return WebGymState(**payload)


# -------------------------------------------------------------------------------------- server


class _Guard:
    """Plain ASGI middleware for HTTP requests and websocket handshakes alike: the caller check
    (Host, Origin), then, with a token, the token as the first path segment (stripped before the
    app sees the path). A refused websocket handshake is closed (HTTP 403)."""

    def __init__(self, app: Any, check: CallerCheck, token: str | None):
        self.app, self.check, self.token = app, check, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.check.refusal(scope["headers"])
        if refusal is None and self.token:
            scope, refusal = self._strip_token(scope)
        if refusal is None and scope["type"] == "websocket":
            # openenv-core 0.3 closes a session's socket after the client's "close" message, and
            # raises when the client has hung up already, as its client does: nothing is lost
            with contextlib.suppress(WebSocketDisconnect):
                await self.app(scope, receive, send)
        elif refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            log.info("refused a websocket: %s", refusal.message)  # not its path: it may hold the token
            await send({"type": "websocket.close", "code": 1008})
        else:
            await JSONResponse({"error": refusal.kind, "message": refusal.message},
                               status_code=refusal.status)(scope, receive, send)

    def _strip_token(self, scope: Any) -> tuple[Any, Refusal | None]:
        first, _, rest = scope["path"][1:].partition("/")
        if not secrets.compare_digest(first.encode(), self.token.encode()):
            return scope, Refusal(401, "unauthorized", "missing or wrong token: it is the first segment of "
                                                       "the URL path (base_url http://HOST:PORT/TOKEN)")
        path = "/" + rest
        return {**scope, "path": path, "raw_path": path.encode()}, None


def create_openenv_app(settings: OpenEnvSettings) -> FastAPI:
    """The FastAPI app: openenv's `HTTPEnvServer` routes over `WebGymOpenEnv` sessions, behind the
    caller check and the token; its startup starts the services, its shutdown closes the sessions
    and stops them."""
    services = _Services(settings)
    app = FastAPI(title="webgym OpenEnv server", version=_version())
    app.state.services = services
    app.router.on_startup.append(services.start)  # before openenv's own handlers
    app.router.on_shutdown.append(services.stop)
    concurrency = ConcurrencyConfig(max_concurrent_envs=settings.max_sessions,
                                    session_timeout=settings.session_timeout_s)
    server = HTTPEnvServer(functools.partial(WebGymOpenEnv, services), WebGymAction, WebGymObservation,
                           concurrency_config=concurrency)
    server.register_routes(app)
    app.state.callers = check = CallerCheck(settings.host, settings.port, server_names=settings.server_names)
    app.add_middleware(_Guard, check=check, token=settings.token)
    return app


@click.command("serve-openenv")
@settings_options(OpenEnvSettings)
def serve_openenv_command(config: str | None, **flags: Any) -> None:
    """Serve the web tasks as an OpenEnv environment (openenv-core's protocol: /reset, /step,
    /state, /health, /schema, /metadata and the /ws session); needs webgym[interop].

    \b
    Example:
      webgym-rollout serve-openenv --port 8600 --max-sessions 4 --environment miniwob:click-test
      curl http://127.0.0.1:8600/health
      # attach to running servers instead of starting them:
      webgym-rollout serve-openenv --browser-url http://127.0.0.1:8300 \\
          --sites-url http://127.0.0.1:8400 --truth-url http://127.0.0.1:8401 --truth-token "$TRUTH"
      # on a shared network a token is required; clients put it first in the URL path:
      webgym-rollout serve-openenv --host 0.0.0.0 --token "$WEBGYM_OPENENV_TOKEN" --server-names envs.lan
    """
    import uvicorn  # optional: uvicorn

    try:
        settings = load_settings(OpenEnvSettings, config, flags)
    except ValueError as exc:  # SettingsError and the checks of __post_init__, naming the field
        raise click.UsageError(str(exc)) from exc
    app = create_openenv_app(settings)
    click.echo(f"OpenEnv server on http://{settings.host}:{settings.port} ({settings.max_sessions} sessions, "
               f"default task {settings.environment})")
    # access_log off: with a token, the paths hold it
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=10)
