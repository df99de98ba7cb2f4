"""The rollout runner: drive episodes against browser servers with a policy, judge them, write rows.

``webgym-rollout run`` reads tasks, plays ``attempts`` episodes of each and writes the trajectory
dataset (`webgym_rollout.trajectory` rows, through `webgym_rollout.dataset`).

Two schedulers share one episode state machine (`_Episode`: observe -> decide -> apply):

- ``async`` (the default): `concurrency` episodes run at once, each on its own; when one ends the
  next task starts at once. There is no barrier between steps or episodes, so a slow policy reply
  or a slow page holds back only its own episode.
- ``sync``: the naive baseline kept for comparison. A batch of `batch_size` episodes advances in
  lockstep: every live episode observes, then one batched policy call (all requests of the step
  gathered) decides for all, then all act; the next batch starts only when the whole batch is done.

An episode ends on the agent's ``answer``, on its horizon (per difficulty level and split), when
the environment says it is done (MiniWoB), or on a terminal error. A `BrowserError` that a fresh
session can cure (crash, timeout, lost session, unreachable server) restarts the episode on a new
session up to `RunSettings.session_retries` times, then the episode is recorded with status
``error:<kind>``. Agent mistakes (unparseable replies, clicks on nothing) are data on the step.
Judging runs after the browser session is closed, concurrently with the next episodes.

Resume: rows are written by `webgym_rollout.dataset` in atomic shards listed in a manifest; with
``--resume`` the (task_id, attempt) pairs already in the manifest are skipped, so an interrupted run
finishes with every episode exactly once.

Errors raised to the caller::

    ValueError                               settings that contradict each other (names the field)
    webgym_data.schema.TaskValidationError   a task file/row is unreadable (names file, row, field)
    webgym_rollout.errors.RolloutError
     ├── BrowserError
     │    └── Unauthorized                   wrong or missing browser-server token: stops the run
     └── TrajectoryDatasetError              (webgym_rollout.dataset)
          └── DatasetExists                  --out holds a run and --resume was not given

Every other failure stays inside its episode and becomes its status: ``error:<kind>`` for a
`BrowserError` after the retries, a `PolicyError` or a `JudgeError`; ``blocked`` for `SiteBlocked`;
``error:internal`` (logged with its traceback) for a bug. ``timeout`` means the horizon was reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import click

from webgym_data.schema import Task, TaskValidationError
from webgym_rollout.errors import (
    BrowserError,
    InvalidRequest,
    NavigationRefused,
    PolicyError,
    RolloutError,
    ServerBusy,
    SiteBlocked,
    Unauthorized,
)

__all__ = ["RunReport", "RunSettings", "episode_id", "horizon_for", "load_tasks", "run", "run_command"]

log = logging.getLogger(__name__)

LEVELS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class RunSettings:
    """Settings of ``webgym-rollout run``."""

    tasks: Path
    """Task source: a JSONL file of task rows, a parquet file, or a task dataset folder
    (``data/<split>-*.parquet`` as written by ``webgym-data build``)."""
    servers: tuple[str, ...]
    """Browser server base URLs; new sessions go to the least-loaded one."""
    out: Path
    """Output folder of the trajectory dataset (parquet shards + manifest)."""
    policy: Literal["random", "openai"] = "random"
    """``random`` (clicks element centres, types words of the instruction; no model) or ``openai``
    (any OpenAI-compatible chat endpoint: vLLM, the CPU policy server, an API)."""
    policy_base_url: str | None = None
    """Base URL of the OpenAI-compatible policy endpoint (``.../v1``); needed for ``openai``."""
    policy_model: str | None = None
    """Model name sent to the policy endpoint; needed for ``openai``."""
    judge: Literal["programmatic", "rubric"] = "programmatic"
    """``programmatic`` (the environment's own reward, MiniWoB) or ``rubric`` (an LLM judge)."""
    judge_base_url: str | None = None
    """Base URL of the OpenAI-compatible judge endpoint; needed for ``rubric``."""
    judge_model: str | None = None
    """Model name of the judge; needed for ``rubric``."""
    sites_url: str | None = None
    """Base URL of the local site server (``webgym-rollout serve-sites``); MiniWoB tasks need it."""
    concurrency: int = 8
    """Async mode: number of episodes running at once."""
    attempts: int = 1
    """Episodes per task (independent attempts, e.g. for RL)."""
    split: Literal["train", "test"] = "train"
    """Which split of a task folder to run; also picks the horizon table."""
    resume: bool = False
    """Continue an interrupted run in `out`: skip episodes the manifest already lists."""
    mode: Literal["async", "sync"] = "async"
    """``async`` (no barriers) or ``sync`` (lockstep batches, the baseline for comparison)."""
    batch_size: int = 8
    """Sync mode: episodes per lockstep batch."""
    seed: int = 0
    """Seed of the random policy; each episode derives its own from it and the episode id."""
    temperature: float = 1.0
    """Sampling temperature of the ``openai`` policy (RL rollouts sample; 0 for evaluation).
    No per-request seed is sent: attempts of one task must be able to differ."""
    limit: int | None = None
    """Run only the first N tasks (after the split is chosen)."""
    train_horizons: tuple[int, int, int] = (10, 20, 30)
    """Step budget for easy / medium / hard tasks in the train split."""
    test_horizons: tuple[int, int, int] = (30, 50, 70)
    """Step budget for easy / medium / hard tasks in the test split."""
    miniwob_horizon: int = 6
    """Step budget of MiniWoB tasks (short, single-page tasks)."""
    session_retries: int = 2
    """How many times an episode whose browser session failed is restarted on a fresh session."""
    viewport: tuple[int, int] = (1280, 720)
    """Browser viewport (width, height) in pixels."""
    iteration: int = 0
    """RL iteration number written into every row."""
    shard_episodes: int = 16
    """Episodes per parquet shard; a shard is also flushed when the run ends."""
    judge_concurrency: int = 8
    """Judge calls running at once."""
    browser_token: str | None = None
    """Bearer token of the browser servers (needed when they bind a non-loopback address)."""
    progress: bool = True
    """Show live progress (rich) on the terminal."""

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("servers: at least one browser server URL is needed (--server)")
        for name in ("concurrency", "attempts", "batch_size", "miniwob_horizon", "shard_episodes",
                     "judge_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.session_retries < 0:
            raise ValueError(f"session_retries must be >= 0, got {self.session_retries}")
        if self.policy == "openai" and not (self.policy_base_url and self.policy_model):
            raise ValueError("policy 'openai' needs policy_base_url and policy_model "
                             "(--policy-base-url, --policy-model)")
        if self.judge == "rubric" and not (self.judge_base_url and self.judge_model):
            raise ValueError("judge 'rubric' needs judge_base_url and judge_model "
                             "(--judge-base-url, --judge-model)")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be >= 0, got {self.limit}")

    @property
    def workers(self) -> int:
        """Episodes in flight at once in the chosen mode."""
        return self.concurrency if self.mode == "async" else self.batch_size


def horizon_for(task: Task, settings: RunSettings) -> int:
    """The step budget of `task`: MiniWoB tasks get `miniwob_horizon`, web tasks the table of
    their split indexed by difficulty level."""
    if task.environment.startswith("miniwob:"):
        return settings.miniwob_horizon
    table = settings.test_horizons if settings.split == "test" else settings.train_horizons
    return table[LEVELS.index(task.difficulty_level)]


# ---------------------------------------------------------------------------------------- tasks

def _task_files(path: Path, split: str) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TaskValidationError("no such file or folder", file=str(path))
    for pattern in (f"data/{split}-*.parquet", f"**/{split}-*.parquet", f"**/{split}.parquet",
                    f"**/{split}*.jsonl", "**/*.parquet", "**/*.jsonl"):
        found = sorted(p for p in path.glob(pattern) if p.is_file())
        if found:
            return found
    raise TaskValidationError(f"holds no '{split}' task shards (data/{split}-*.parquet) and no "
                              "parquet or JSONL files", file=str(path))


def _rows(path: Path) -> Iterable[tuple[int, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise TaskValidationError(f"not a readable parquet file: {exc}", file=str(path)) from None
        yield from enumerate(table.to_pylist())
        return
    if path.suffix not in (".jsonl", ".json"):
        raise TaskValidationError("expected a .jsonl or .parquet task file", file=str(path))
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskValidationError(f"invalid JSON: {exc.msg} (column {exc.colno})",
                                          file=str(path), row=number) from None


def load_tasks(path: Path | str, *, split: str = "train", limit: int | None = None) -> list[Task]:
    """Read and validate tasks from a JSONL/parquet file or a task dataset folder.

    Raises `TaskValidationError` naming the file, row and field of the first bad row, and for a
    task id that appears twice (resume identifies episodes by task id and attempt).
    """
    tasks: list[Task] = []
    seen: dict[str, tuple[str, int]] = {}
    for file in _task_files(Path(path), split):
        for number, row in _rows(file):
            task = Task.from_row(row, file=str(file), row_index=number)
            if task.task_id in seen:
                first_file, first_row = seen[task.task_id]
                raise TaskValidationError(f"duplicate task_id {task.task_id!r} (first in {first_file} "
                                          f"row {first_row})", file=str(file), row=number, field="task_id")
            seen[task.task_id] = (str(file), number)
            tasks.append(task)
            if limit is not None and len(tasks) >= limit:
                return tasks
    return tasks


# ------------------------------------------------------------------------------------- episodes

# Errors a fresh session can cure; the others (a refused URL, a blocked site, a malformed request)
# would fail again the same way, so the episode is recorded at once.
_FINAL_BROWSER_ERRORS = (NavigationRefused, SiteBlocked, InvalidRequest)
# How long an episode waits for a free session slot (ServerBusy on create) before it counts as an error.
_BUSY_WAIT_S = 120.0


def episode_id(task_id: str, attempt: int, iteration: int) -> str:
    """Stable id of one episode: the same (task, attempt, iteration) always gets the same id."""
    return hashlib.sha256(f"{task_id}\x1f{attempt}\x1f{iteration}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Job:
    task: Task
    attempt: int
    horizon: int
    episode_id: str


@dataclass
class _Step:
    """One recorded step (before it becomes a trajectory row's step)."""

    index: int
    screenshot: bytes
    screenshot_sha256: str
    messages: str
    response: str
    action: str
    action_error: str
    memory: str
    url: str
    title: str
    policy_s: float
    execute_s: float = 0.0
    screenshot_s: float = 0.0
    same_as_next: bool = False
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def row(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "screenshot": {"bytes": self.screenshot, "path": None},
            "screenshot_sha256": self.screenshot_sha256,
            "messages": self.messages,
            "response": self.response,
            "action": self.action,
            "action_error": self.action_error,
            "memory": self.memory,
            "url": self.url,
            "title": self.title,
            "same_as_next": self.same_as_next,
            "finish_reason": self.finish_reason,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "latency": {"policy_s": self.policy_s, "execute_s": self.execute_s,
                        "screenshot_s": self.screenshot_s},
        }


@dataclass
class _Stats:
    """Live counters for the progress display and the final report."""

    started: float = field(default_factory=time.monotonic)
    total: int = 0
    done: int = 0
    running: int = 0
    judging: int = 0
    steps: int = 0
    successes: int = 0
    errors: Counter = field(default_factory=Counter)
    session_retries: int = 0
    parse_errors: int = 0
    queue_depths: dict[str, int] = field(default_factory=dict)

    @property
    def elapsed(self) -> float:
        return max(1e-9, time.monotonic() - self.started)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed


class _Context:
    """What every episode of a run shares."""

    def __init__(self, settings: RunSettings, client: Any, policy: Any, stats: _Stats,
                 needs_elements: bool):
        self.settings, self.client, self.policy, self.stats = settings, client, policy, stats
        self.needs_elements = needs_elements


class _Episode:
    """One episode as a state machine: `observe`, `decide` and `apply` advance it by one step.

    The schedulers only call these three (through `guarded`) and read `finished`; every browser or
    policy failure is turned into a retry on a fresh session or a final status here.
    """

    def __init__(self, job: _Job, ctx: _Context):
        self.job, self.ctx = job, ctx
        self.retries_left = ctx.settings.session_retries
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self.status = ""
        self.finished = False
        self.duration_s = 0.0
        self._session: Any = None
        self._reset()

    def _reset(self) -> None:
        """Forget the steps of a failed try: the episode restarts from its first step."""
        self.steps: list[_Step] = []
        self.rounds: list[Any] = []
        self.instruction = self.job.task.task_name
        self.answer = ""
        self.env: Any = None
        self._shot: Any = None
        self._url, self._title = "", ""
        self._elements: tuple[Any, ...] = ()
        self._last_error = ""
        self._output: Any = None
        self._shot_s = 0.0

    @property
    def _is_miniwob(self) -> bool:
        return self.job.task.environment.startswith("miniwob:")

    # ------------------------------------------------------------------ the three step phases

    async def observe(self) -> None:
        """Make sure there is a session and a current screenshot (first step: open the session)."""
        if self._session is None:
            await self._open()
        if self._shot is None:
            await self._take_screenshot()
        if self.ctx.needs_elements:
            info = await self._session.page_info(elements=True)
            self._elements = tuple(info.elements)
            self._url, self._title = info.url, info.title

    async def decide(self) -> None:
        """Ask the policy for this step's action."""
        from webgym_rollout.agent import Observation

        shot = self._shot
        observation = Observation(
            instruction=self.instruction, screenshot=shot.data,
            # Grid coordinates refer to the screenshot; MiniWoB shots are cropped at (0, 0) and shot at
            # scale 1, so the screenshot's size is the pixel frame actions are given in.
            viewport=(shot.width, shot.height), step=len(self.steps), url=self._url, title=self._title,
            history=tuple(self.rounds), elements=self._elements, last_action_error=self._last_error,
            episode_id=self.job.episode_id)
        self._output = await self.ctx.policy.act(observation)

    async def apply(self) -> None:
        """Carry out the decided action, record the step, and take the next observation."""
        from webgym_rollout.agent import Round
        from webgym_rollout.client import BrowserAction

        output, shot = self._output, self._shot
        self._output = None
        parsed = output.parsed
        action = parsed.action
        step = _Step(index=len(self.steps), screenshot=shot.data, screenshot_sha256=shot.sha256,
                     messages=output.messages_json, response=output.response,
                     action=action.to_json() if action is not None else "",
                     action_error=parsed.error, memory=parsed.memory, url=self._url, title=self._title,
                     policy_s=float(output.latency_s), screenshot_s=self._shot_s,
                     finish_reason=output.finish_reason, prompt_tokens=output.prompt_tokens,
                     completion_tokens=output.completion_tokens)
        self.steps.append(step)
        self.ctx.stats.steps += 1
        ended = ""
        if action is None:
            self.ctx.stats.parse_errors += 1  # an agent mistake: a no-op step
        elif action.ends_episode:
            self.answer, ended = action.text, "ok"
        else:
            began = time.perf_counter()
            browser_action = action.to_browser_action((shot.width, shot.height))
            if browser_action is None:  # navigate
                try:
                    state = await self._session.navigate(action.url)
                    self._url, self._title, step.action_error = state.url, state.title, state.error
                except (NavigationRefused, SiteBlocked) as exc:
                    step.action_error = str(exc)  # the agent chose a forbidden URL: its mistake, a no-op
            else:
                result = await self._session.execute(BrowserAction(**browser_action))
                self._url, self._title, step.action_error = result.url, result.title, result.error
            step.execute_s = time.perf_counter() - began
        if not ended and len(self.steps) >= self.job.horizon:
            ended = "timeout"
        if self._is_miniwob and ended != "ok":
            if ended:
                self.env = await self._session.env_state()
            else:
                # Both are needed unless the episode is done; asking together saves a round trip.
                env, shot = await asyncio.gather(self._session.env_state(), self._take_screenshot(),
                                                 return_exceptions=True)
                for outcome in (env, shot):
                    if isinstance(outcome, BaseException):
                        raise outcome
                self.env = env
            if self.env.done:
                ended = "ok"
        elif not ended:
            await self._take_screenshot()
        self._last_error = step.action_error
        if ended:
            self.rounds.append(Round(step=step.index, screenshot=step.screenshot, response=step.response,
                                     action=action, url=step.url, title=step.title,
                                     action_error=step.action_error))
            await self._finish(ended)
            return
        step.same_as_next = self._shot.sha256 == step.screenshot_sha256
        self.rounds.append(Round(step=step.index, screenshot=step.screenshot, response=step.response,
                                 action=action, url=step.url, title=step.title,
                                 page_changed=not step.same_as_next, action_error=step.action_error))

    async def guarded(self, phase: Callable[[], Awaitable[None]]) -> bool:
        """Run one phase; True if it completed. A failure becomes a restart on a fresh session (the
        step is abandoned: the caller skips the episode's remaining phases) or a final status."""
        if self.finished:
            return False
        try:
            await phase()
            return True
        except Unauthorized:
            await self._close_session()
            raise  # every episode would fail the same way: stop the run
        except BrowserError as exc:
            await self._close_session()
            if isinstance(exc, SiteBlocked):
                await self._finish("blocked")
            elif isinstance(exc, _FINAL_BROWSER_ERRORS) or self.retries_left <= 0:
                await self._finish(f"error:{exc.kind}")
            else:
                log.info("episode %s: %s; restarting on a fresh session", self.job.episode_id, exc)
                self.retries_left -= 1
                self.ctx.stats.session_retries += 1
                self._reset()
            if self.finished:
                log.warning("episode %s (task %s) ended with %s: %s", self.job.episode_id,
                            self.job.task.task_id, self.status, exc)
        except PolicyError as exc:
            log.warning("episode %s: policy failed: %s", self.job.episode_id, exc)
            await self._finish(f"error:{exc.kind}")
        except Exception:  # a bug must not take the other episodes down; the status records it
            log.exception("episode %s (task %s) failed", self.job.episode_id, self.job.task.task_id)
            await self._finish("error:internal")
        return False

    # ------------------------------------------------------------------------------ helpers

    async def _open(self) -> None:
        settings, task = self.ctx.settings, self.job.task
        url = task.start_url
        seed = None
        if self._is_miniwob:
            from webgym_rollout.sites import miniwob_task_url

            if not settings.sites_url:
                raise InvalidRequest(f"task {task.task_id} is a MiniWoB task ({task.environment}) but no "
                                     "site server is given (--sites-url)")
            url, seed = miniwob_task_url(settings.sites_url, task.environment.split(":", 1)[1]), task.env_seed
        deadline = time.monotonic() + _BUSY_WAIT_S
        delay = 0.2
        while True:
            try:
                self._session = await self.ctx.client.create_session(
                    url, viewport=settings.viewport, environment=task.environment or "web", seed=seed)
                break
            except ServerBusy:
                # Every slot is taken (often by sessions of a killed run waiting for idle expiry):
                # waiting is not a failure of this episode.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 1.5)
        self._url, self._title = self._session.url, self._session.title
        if self._is_miniwob:
            self.env = await self._session.env_state()
            self.instruction = self.env.utterance or task.task_name

    async def _take_screenshot(self) -> None:
        began = time.perf_counter()
        self._shot = await self._session.screenshot()
        self._shot_s = time.perf_counter() - began

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            await session.close()
        except BrowserError as exc:  # the server expires it anyway; nothing to do for the episode
            log.info("closing session %s failed: %s", session.session_id, exc)

    async def _finish(self, status: str) -> None:
        self.status = status
        self.finished = True
        self.duration_s = time.monotonic() - self._t0
        await self._close_session()


# ------------------------------------------------------------------------- judging and rows

def _row(ep: _Episode, settings: RunSettings, policy_model: str, judge_model: str, reward: float,
         verdicts: list[dict[str, Any]], judge_s: float) -> dict[str, Any]:
    task = ep.job.task
    task_row = task.to_row()
    row = {name: task_row[name] for name in (
        "task_id", "task_name", "website", "start_url", "benchmark_name", "domain", "subdomain", "difficulty",
        "difficulty_level", "evaluator_reference", "definite_answer", "parent_task_id", "environment",
        "env_seed")}
    row.update({
        "instruction": ep.instruction,
        "episode_id": ep.job.episode_id,
        "iteration": settings.iteration,
        "attempt": ep.job.attempt,
        "split": settings.split,
        "policy_model": policy_model,
        "judge_model": judge_model,
        "reward": reward,
        "status": ep.status,
        "answer": ep.answer,
        "verdicts": verdicts,
        "num_steps": len(ep.steps),
        "started_at": ep.started_at,
        "duration_s": ep.duration_s,
        "judge_s": judge_s,
        "steps": [step.row() for step in ep.steps],
    })
    return row


class _Finisher:
    """Judges ended episodes concurrently (their browsers are already released) and writes rows."""

    def __init__(self, settings: RunSettings, judge: Any, writer: Any, stats: _Stats, policy_model: str):
        self.settings, self.judge, self.writer, self.stats = settings, judge, writer, stats
        self.policy_model = policy_model
        self._semaphore = asyncio.Semaphore(settings.judge_concurrency)
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def submit(self, ep: _Episode) -> None:
        self.stats.judging += 1
        task = asyncio.create_task(self._finish(ep), name=f"judge-{ep.job.episode_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def _finish(self, ep: _Episode) -> None:
        from webgym_rollout.judge import JudgeRequest

        reward, verdicts, judge_s = 0.0, [], 0.0
        judge_model = getattr(self.judge, "model_id", "")
        try:
            if not ep.status.startswith("error:") and ep.status != "blocked":
                env = ep.env
                request = JudgeRequest.from_task(
                    ep.job.task, answer=ep.answer, screenshots=[s.screenshot for s in ep.steps],
                    env_done=bool(env is not None and env.done),
                    env_raw_reward=env.raw_reward if env is not None else None,
                    env_reason=env.reason if env is not None else "")
                began = time.perf_counter()
                try:
                    async with self._semaphore:
                        result = await self.judge.score(request)
                except RolloutError as exc:  # JudgeError: the judge endpoint failed
                    log.warning("judging episode %s failed: %s", ep.job.episode_id, exc)
                    ep.status = f"error:{exc.kind}"
                else:
                    reward, verdicts = float(result.reward), result.verdict_rows()
                    if result.error_kind:  # the judge could not decide: not a failure of the agent
                        ep.status = f"error:{result.error_kind}"
                judge_s = time.perf_counter() - began
            row = _row(ep, self.settings, self.policy_model, judge_model, reward, verdicts, judge_s)
            async with self._write_lock:  # shards are written one at a time, off the event loop
                await asyncio.to_thread(self.writer.add, row)
        finally:
            self.stats.judging -= 1
        self.stats.done += 1
        self.stats.successes += reward >= 1.0
        if ep.status.startswith("error:") or ep.status == "blocked":
            self.stats.errors[ep.status.removeprefix("error:")] += 1


# ------------------------------------------------------------------------------ schedulers

async def _all(coroutines: Iterable[Awaitable[Any]]) -> list[Any]:
    """`asyncio.gather`, but a failure (only `Unauthorized` escapes an episode) cancels the rest."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _play(ep: _Episode) -> None:
    """Async mode: one episode, step after step, at its own pace."""
    while not ep.finished:
        if await ep.guarded(ep.observe) and await ep.guarded(ep.decide):
            await ep.guarded(ep.apply)


async def _run_async(jobs: Sequence[_Job], ctx: _Context, finisher: _Finisher) -> None:
    pending = iter(jobs)

    async def worker() -> None:
        # Each worker is one episode slot: when its episode ends, the next task starts at once.
        for job in pending:
            ep = _Episode(job, ctx)
            ctx.stats.running += 1
            try:
                await _play(ep)
            finally:
                ctx.stats.running -= 1
            finisher.submit(ep)

    await _all(worker() for _ in range(min(ctx.settings.concurrency, len(jobs))))


async def _run_sync(jobs: Sequence[_Job], ctx: _Context, finisher: _Finisher) -> None:
    size = ctx.settings.batch_size
    for start in range(0, len(jobs), size):
        batch = [_Episode(job, ctx) for job in jobs[start:start + size]]
        ctx.stats.running += len(batch)
        live = batch
        while live:
            # Lockstep: every phase of the step waits for the whole batch (the barrier under test).
            for phase in ("observe", "decide", "apply"):
                done = await _all(ep.guarded(getattr(ep, phase)) for ep in live)
                live = [ep for ep, ok in zip(live, done, strict=True) if ok]
            live = [ep for ep in batch if not ep.finished]
        ctx.stats.running -= len(batch)
        for ep in batch:
            finisher.submit(ep)


# ------------------------------------------------------------------------------ progress

def _progress_table(stats: _Stats, settings: RunSettings):
    from rich.table import Table

    table = Table(title=f"webgym-rollout run ({settings.mode}) -> {settings.out}", show_header=False,
                  box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    judged = max(1, stats.done)
    table.add_row("episodes", f"{stats.done}/{stats.total} done, {stats.running} running, "
                              f"{stats.judging} judging")
    table.add_row("steps", f"{stats.steps} ({stats.steps_per_s:.2f} steps/s, {stats.elapsed:.0f} s)")
    table.add_row("success", f"{stats.successes}/{stats.done} ({100 * stats.successes / judged:.0f}%)")
    errors = ", ".join(f"{kind} {n}" for kind, n in stats.errors.most_common()) or "none"
    table.add_row("errors", f"{errors}; session restarts {stats.session_retries}; "
                            f"unparsed replies {stats.parse_errors}")
    queues = ", ".join(f"{kind} {n}" for kind, n in sorted(stats.queue_depths.items())) or "-"
    table.add_row("server queues", queues)
    return table


async def _watch(stats: _Stats, settings: RunSettings, client: Any) -> None:
    """Refresh the live display and poll the servers' queue depths until cancelled."""
    import sys

    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=True)
    live = Live(_progress_table(stats, settings), console=console, refresh_per_second=4,
                transient=False) if settings.progress and console.is_terminal else None
    last_poll = last_log = 0.0
    try:
        if live is not None:
            live.start()
        while True:
            if time.monotonic() - last_poll > 2.0:
                last_poll = time.monotonic()
                with contextlib.suppress(BrowserError):
                    depths: Counter = Counter()
                    for health in await client.health():
                        depths.update(health.queue_depths)
                    stats.queue_depths = dict(depths)
            if live is not None:
                live.update(_progress_table(stats, settings))
            elif settings.progress and time.monotonic() - last_log > 10:
                last_log = time.monotonic()
                log.info("%d/%d episodes, %.2f steps/s", stats.done, stats.total, stats.steps_per_s)
            await asyncio.sleep(0.5)
    finally:
        if live is not None:
            live.update(_progress_table(stats, settings))
            live.stop()
        elif settings.progress and not sys.stderr.isatty():
            console.print(_progress_table(stats, settings))


# ------------------------------------------------------------------------------------ the run

@dataclass(frozen=True)
class RunReport:
    """What a run did (also shown by the CLI)."""

    out: Path
    episodes: int
    """Episodes played and written by this invocation."""
    skipped: int
    """Episodes skipped because the manifest already listed them (resume)."""
    steps: int
    successes: int
    errors: dict[str, int]
    elapsed_s: float
    session_retries: int
    parse_errors: int

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _make_policy(settings: RunSettings) -> Any:
    from webgym_rollout.policy import (
        OpenAIPolicy,
        OpenAIPolicySettings,
        RandomPolicy,
        RandomPolicySettings,
        SamplingSettings,
    )

    if settings.policy == "random":
        return RandomPolicy(RandomPolicySettings(seed=settings.seed))
    return OpenAIPolicy(OpenAIPolicySettings(
        base_url=settings.policy_base_url or "", model=settings.policy_model or "",
        max_concurrency=max(settings.concurrency, settings.batch_size),
        sampling=SamplingSettings(temperature=settings.temperature)))


def _make_judge(settings: RunSettings) -> Any:
    from webgym_rollout.judge import ProgrammaticJudge, RubricJudge, RubricJudgeSettings

    if settings.judge == "programmatic":
        return ProgrammaticJudge()
    return RubricJudge(RubricJudgeSettings(base_url=settings.judge_base_url or "",
                                           model=settings.judge_model or "",
                                           max_concurrency=settings.judge_concurrency))


def _jobs(tasks: Sequence[Task], settings: RunSettings, is_done: Callable[[str, int], bool]
          ) -> tuple[list[_Job], int]:
    jobs, skipped = [], 0
    for task in tasks:
        horizon = horizon_for(task, settings)
        for attempt in range(settings.attempts):
            if is_done(task.task_id, attempt):
                skipped += 1
                continue
            jobs.append(_Job(task, attempt, horizon, episode_id(task.task_id, attempt, settings.iteration)))
    return jobs, skipped


async def run(settings: RunSettings, *, policy: Any = None, judge: Any = None,
              needs_elements: bool | None = None) -> RunReport:
    """Roll out every (task, attempt) of `settings` not yet in the output folder; write the rows.

    `policy` / `judge` override the ones `settings` describes (benchmarks wrap a policy to add
    latency). `needs_elements` says whether the policy reads ``Observation.elements`` (one extra
    page_info call per step); by default only the random policy does.
    """
    from webgym_rollout.client import BrowserClient
    from webgym_rollout.dataset import TrajectoryWriter
    from webgym_rollout.policy import RandomPolicy

    tasks = load_tasks(settings.tasks, split=settings.split, limit=settings.limit)
    if any(t.environment.startswith("miniwob:") for t in tasks) and not settings.sites_url:
        raise ValueError(f"{settings.tasks} holds MiniWoB tasks: give the site server's URL (--sites-url)")
    policy = policy if policy is not None else _make_policy(settings)
    judge = judge if judge is not None else _make_judge(settings)
    if needs_elements is None:
        needs_elements = isinstance(policy, RandomPolicy)
    stats = _Stats()
    run_info = {"policy": getattr(policy, "model_id", ""), "judge": getattr(judge, "model_id", ""),
                "mode": settings.mode, "tasks": str(settings.tasks), "split": settings.split,
                "attempts": settings.attempts, "iteration": settings.iteration, "seed": settings.seed}
    with TrajectoryWriter(settings.out, resume=settings.resume, max_shard_episodes=settings.shard_episodes,
                          run_info=run_info) as writer:
        jobs, skipped = _jobs(tasks, settings, writer.is_done)
        stats.total = len(jobs)
        if skipped:
            log.info("resume: %d episodes are already in %s; %d to go", skipped, settings.out, len(jobs))
        async with BrowserClient(list(settings.servers), token=settings.browser_token) as client:
            ctx = _Context(settings, client, policy, stats, needs_elements)
            finisher = _Finisher(settings, judge, writer, stats, getattr(policy, "model_id", ""))
            stats.started = time.monotonic()  # steps/s counts from here, not from loading the tasks
            watcher = asyncio.create_task(_watch(stats, settings, client))
            try:
                if settings.mode == "async":
                    await _run_async(jobs, ctx, finisher)
                else:
                    await _run_sync(jobs, ctx, finisher)
                await finisher.drain()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
                for closeable in (policy, judge):
                    close = getattr(closeable, "close", None)
                    if close is not None:
                        await close()
    return RunReport(out=settings.out, episodes=stats.done, skipped=skipped, steps=stats.steps,
                     successes=stats.successes, errors=dict(stats.errors), elapsed_s=stats.elapsed,
                     session_retries=stats.session_retries, parse_errors=stats.parse_errors)


# ------------------------------------------------------------------------------------------ CLI

@click.command("run")
@click.option("--tasks", "tasks", required=True, type=click.Path(exists=True, path_type=Path),
              help="Task dataset folder (data/<split>-*.parquet) or a JSONL/parquet file of task rows.")
@click.option("--server", "servers", required=True, multiple=True,
              help="Browser server URL (repeat for several; new sessions go to the least loaded).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder of the trajectory dataset.")
@click.option("--policy", type=click.Choice(["random", "openai"]), default="random", show_default=True,
              help="random: no model; openai: an OpenAI-compatible endpoint (vLLM, serve-policy, API).")
@click.option("--policy-base-url", default=None, help="Policy endpoint, e.g. http://127.0.0.1:8500/v1.")
@click.option("--policy-model", default=None, help="Model name at the policy endpoint.")
@click.option("--judge", type=click.Choice(["programmatic", "rubric"]), default="programmatic",
              show_default=True, help="programmatic: the environment's reward (MiniWoB); rubric: LLM judge.")
@click.option("--judge-base-url", default=None, help="Judge endpoint (rubric judge).")
@click.option("--judge-model", default=None, help="Judge model name (rubric judge).")
@click.option("--sites-url", default=None, help="Site server URL (serve-sites) for MiniWoB tasks.")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(min=1),
              help="Episodes running at once (async mode).")
@click.option("--attempts", default=1, show_default=True, type=click.IntRange(min=1),
              help="Episodes per task.")
@click.option("--split", type=click.Choice(["train", "test"]), default="train", show_default=True,
              help="Task split to run; also picks the horizons (train 10/20/30, test 30/50/70).")
@click.option("--resume", is_flag=True, help="Continue an interrupted run in --out (no episode redone).")
@click.option("--mode", type=click.Choice(["async", "sync"]), default="async", show_default=True,
              help="async: no barriers; sync: lockstep batches (baseline for comparison).")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1),
              help="Episodes per lockstep batch (sync mode).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random policy.")
@click.option("--temperature", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Sampling temperature of the openai policy (0 for evaluation).")
@click.option("--limit", default=None, type=click.IntRange(min=0), help="Run only the first N tasks.")
@click.option("--miniwob-horizon", default=6, show_default=True, type=click.IntRange(min=1),
              help="Step budget of MiniWoB tasks.")
@click.option("--session-retries", default=2, show_default=True, type=click.IntRange(min=0),
              help="Restarts of an episode on a fresh session after a browser failure.")
@click.option("--viewport", default="1280x720", show_default=True, help="Browser viewport WIDTHxHEIGHT.")
@click.option("--iteration", default=0, show_default=True, type=click.IntRange(min=0),
              help="RL iteration number written into each row.")
@click.option("--shard-episodes", default=16, show_default=True, type=click.IntRange(min=1),
              help="Episodes per parquet shard.")
@click.option("--browser-token", default=None, envvar="WEBGYM_BROWSER_TOKEN",
              help="Bearer token of the browser servers (env WEBGYM_BROWSER_TOKEN).")
@click.option("--no-progress", is_flag=True, help="No live progress display.")
def run_command(viewport: str, no_progress: bool, **options: Any) -> None:
    """Roll out tasks with a policy against browser servers; judge them; write trajectories.

    Episodes run fully asynchronously (--concurrency at once, no barrier between steps or
    episodes); --mode sync is the lockstep baseline. Rows go to OUT as parquet shards with a
    manifest, so an interrupted run continues with --resume and nothing is lost or repeated.

    \b
    Example:
      webgym-rollout serve-sites --port 8400 &
      webgym-rollout serve --port 8300 --allow-host 127.0.0.1:8400 &
      webgym-rollout run --tasks tasks.jsonl --server http://127.0.0.1:8300 \\
          --sites-url http://127.0.0.1:8400 --policy random --judge programmatic \\
          --concurrency 8 --out out/trajectories/iter-0000
      # a VLM behind vLLM or `webgym-rollout serve-policy`, resumed after an interruption:
      webgym-rollout run --tasks out/tasks --split test --server http://127.0.0.1:8300 \\
          --policy openai --policy-base-url http://127.0.0.1:8500/v1 --policy-model qwen \\
          --judge rubric --judge-base-url http://127.0.0.1:8001/v1 --judge-model judge \\
          --out out/eval --resume
    """
    from webgym_rollout.dataset import TrajectoryDatasetError

    try:
        width, _, height = viewport.lower().partition("x")
        size = (int(width), int(height))
    except ValueError:
        raise click.BadParameter(f"{viewport!r}: expected WIDTHxHEIGHT, e.g. 1280x720",
                                 param_hint="--viewport") from None
    try:
        settings = RunSettings(**options, viewport=size, progress=not no_progress)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = asyncio.run(run(settings))
    except (TaskValidationError, TrajectoryDatasetError, Unauthorized, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    errors = ", ".join(f"{k} {n}" for k, n in sorted(report.errors.items())) or "none"
    click.echo(f"{report.episodes} episodes ({report.skipped} already done), {report.steps} steps in "
               f"{report.elapsed_s:.1f} s ({report.steps_per_s:.2f} steps/s); reward 1: "
               f"{report.successes}/{report.episodes}; errors: {errors} -> {report.out}")
