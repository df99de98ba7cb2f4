"""The rollout runner: a scheduler of `WebEnv` episodes. It plays tasks with a policy against
browser servers, judges the episodes and writes the trajectory dataset.

``webgym-rollout run`` reads tasks, plays ``attempts`` episodes of each (one `WebEnv` per episode
slot), judges each ended episode and writes it (`webgym_rollout.trajectory.writer`). Two schedulers:

- asynchronous (the default): `concurrency` episodes run at once, each on its own; when one ends
  the next task starts at once. There is no barrier between steps or episodes, so a slow policy
  reply or a slow page holds back only its own episode. An `EpisodeGate` given to `run` may hold an
  episode back before it starts (the RL loop's asynchronous schedule admits episodes by staleness
  and shares its slots between several runs).
- ``--lockstep``: the naive baseline kept for comparison. A batch of `batch_size` episodes advances in
  lockstep: every live episode observes, then one batched policy call (all requests of the step
  gathered) decides for all, then all act; the next batch starts only when the whole batch is done.

An episode ends when the environment says so (`StepResult.terminated`: the agent answered, or the
task's own environment ended it) or its step budget runs out (``truncated``: status ``timeout``). A
`BrowserError` that a fresh session can cure (crash, timeout, lost session, unreachable server)
restarts the episode on a new session up to `RolloutSettings.session_retries` times; then the
episode is recorded with status ``error:<kind>``. Agent mistakes (unparseable replies, clicks on
nothing) are data on the step. Judging runs after the browser session is closed, concurrently with
the next episodes.

Resume: episodes are written in atomic shards listed in a manifest; with ``--resume`` the
(task_id, attempt) pairs already in the manifest are skipped, so an interrupted run finishes with
every episode exactly once.

Errors raised to the caller::

    webgym_core.SettingsError / ValueError   settings that contradict each other (names the field)
    webgym_data.schema.TaskValidationError   a task file/row is unreadable (names file, row, field)
    webgym_rollout.errors.RolloutError
     ├── BrowserError
     │    └── Unauthorized                   wrong or missing browser-server token: stops the run
     └── TrajectoryError                     (webgym_rollout.trajectory: contract, writer)
          └── DatasetExists                  --out holds a run and --resume was not given

Every other failure stays inside its episode and becomes its `EpisodeStatus`: ``error:<kind>`` for
a `BrowserError` after the retries, a `PolicyError` or a `JudgeError`; ``blocked`` for
`SiteBlocked`; ``error:internal`` for a bug (any other exception, while playing or judging). A bug
is never passed off as infrastructure: its traceback is logged when it happens, the live progress
shows a row for it, and the run ends with a WARNING that counts the ``error:internal`` episodes,
says they are a bug to report and names the first one's exception and where it was raised
(`RunReport.internal_errors`, `RunReport.first_internal_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import flat, load_settings, settings_options
from webgym_data.loading import load_tasks
from webgym_data.sampler import SamplerSettings, TaskSampler
from webgym_data.schema import Task, TaskValidationError
from webgym_rollout.agent.policies import SHORTCUT_MODEL_PREFIX, PolicySettings, make_policy
from webgym_rollout.env import WebEnv
from webgym_rollout.errors import (
    BrowserError,
    InvalidRequest,
    NavigationRefused,
    PolicyError,
    RolloutError,
    ServerUnavailable,
    SiteBlocked,
    Unauthorized,
)
from webgym_rollout.fleet import FleetSettings
from webgym_rollout.judge.judges import JudgeSettings, make_judge, record_failure, record_result
from webgym_rollout.settings import EnvSettings
from webgym_rollout.tasks.kind import task_kind
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, TaskOutcome, TrajectoryError
from webgym_rollout.trajectory.recordings import RecordingStore, RecordSettings, ReplayLibrary
from webgym_rollout.trajectory.writer import EpisodeUnstorable
from webgym_sites.errors import TruthUnavailable
from webgym_sites.facts import SessionFacts
from webgym_sites.truth import TruthSettings

__all__ = ["EpisodeGate", "RolloutSettings", "RunReport", "RunSettings", "episode_id", "run", "run_command"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutSettings:
    """How episodes are scheduled and stored (shared by ``run`` and ``loop``)."""

    concurrency: int = 8
    """Episodes running at once (the episode scheduler's slots)."""
    attempts: int = 1
    """Episodes per task (independent attempts, e.g. for RL)."""
    lockstep: bool = False
    """Play episodes in lockstep batches of --batch-size (every episode observes, then one batched
    policy call, then all act): the naive baseline for comparison. Default: each episode at its own
    pace, no barriers."""
    batch_size: int = 8
    """--lockstep: episodes per lockstep batch."""
    session_retries: int = 2
    """How many times an episode whose browser session failed is restarted on a fresh session."""
    shard_episodes: int = 16
    """Episodes per parquet shard; a shard is also written when the run ends."""
    judge_concurrency: int = 8
    """Episodes judged at once."""

    @property
    def scheduler(self) -> str:
        """The episode scheduler's name: ``lockstep`` or ``async``."""
        return "lockstep" if self.lockstep else "async"

    def __post_init__(self) -> None:
        for name in ("concurrency", "attempts", "batch_size", "shard_episodes", "judge_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.session_retries < 0:
            raise ValueError(f"session_retries: must be >= 0, got {self.session_retries}")


@dataclass(frozen=True)
class RunSettings:
    """Settings of ``webgym-rollout run``."""

    tasks: Path | None = None
    """Task source: a task dataset folder (data/<split>-*.parquet, as webgym-data build writes) or a
    JSONL / parquet file of task rows."""
    servers: tuple[str, ...] = ()
    """Browser server URLs; new sessions go to the least-loaded one."""
    out: Path | None = None
    """Output folder of the trajectory dataset (parquet shards + manifest)."""
    split: Literal["train", "test"] = "train"
    """Which split of a task folder to run."""
    horizon_table: Literal["split", "train", "test"] = "split"
    """Step budgets: the split's own table (train or test horizons), or one table for every task
    (evaluations use the test horizons whatever the split)."""
    resume: bool = False
    """Continue an interrupted run in --out: skip the episodes its manifest already lists."""
    skip_invalid: bool = False
    """Run the valid task rows and record the invalid ones in the run's manifest (default: stop
    and list every invalid row)."""
    iteration: int = 0
    """RL iteration number written into every episode."""
    browser_token: str | None = field(default=None, metadata={"env": "WEBGYM_BROWSER_TOKEN"})
    """Bearer token of the browser servers (needed when they bind a non-loopback address)."""
    progress: bool = True
    """Show live progress on the terminal."""
    fleet: FleetSettings = flat(FleetSettings)
    """A browser fleet on Ray (--fleet NAME --ray-address ADDR) instead of --servers."""
    rollout: RolloutSettings = flat(RolloutSettings)
    env: EnvSettings = flat(EnvSettings)
    traffic: RecordSettings = flat(RecordSettings)
    """Record each episode's network traffic (--record), or replay a recorded run (--replay RUN)."""
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    """Which tasks of the split this run plays (its batch is the one of iteration --iteration)."""
    policy: PolicySettings = field(default_factory=PolicySettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    truth: TruthSettings = flat(TruthSettings)
    """The local sites' ground truth (--truth-url): kept per episode in truth.jsonl, read by --judge site."""

    def __post_init__(self) -> None:
        if self.tasks is None:
            raise ValueError("tasks: a task file or folder is required")
        if self.out is None:
            raise ValueError("out: an output folder is required")
        if not self.servers and not self.fleet.enabled:
            raise ValueError("servers: at least one browser server URL is needed (or --fleet NAME)")
        if self.servers and self.fleet.enabled:
            raise ValueError(f"servers: give browser server URLs or --fleet {self.fleet.fleet}, not both")
        if self.sampler.kind == "success_aware":
            raise ValueError("sampler.kind: success_aware draws by the outcomes of earlier iterations, which "
                             "`webgym-rollout run` does not keep; use it in `webgym-rl loop` (which keeps "
                             "them), or choose epoch or uniform_difficulty")

    @property
    def horizon_split(self) -> str:
        """The split whose horizon table the episodes use."""
        return self.split if self.horizon_table == "split" else self.horizon_table


def episode_id(task_id: str, attempt: int, iteration: int) -> str:
    """Stable id of one episode: the same (task, attempt, iteration) always gets the same id."""
    return hashlib.sha256(f"{task_id}\x1f{attempt}\x1f{iteration}".encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------- episodes

# Errors a fresh session can cure; the others (a refused URL, a blocked site, a malformed request)
# would fail again the same way, so the episode is recorded at once.
_FINAL_BROWSER_ERRORS = (NavigationRefused, SiteBlocked, InvalidRequest)


@dataclass(frozen=True)
class _Job:
    task: Task
    attempt: int
    episode_id: str


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
    first_bug: str = ""
    """`_bug_summary` of the first exception that made an episode ``error:internal``."""

    def note_bug(self, exc: BaseException) -> None:
        self.first_bug = self.first_bug or _bug_summary(exc)

    @property
    def internal_errors(self) -> int:
        """Episodes recorded with ``error:internal`` (bugs) so far."""
        return self.errors.get(EpisodeStatus.INTERNAL.error_kind, 0)

    @property
    def elapsed(self) -> float:
        return max(1e-9, time.monotonic() - self.started)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed


def _bug_summary(exc: BaseException) -> str:
    """``TypeError: unhashable type: 'list' (webgym_rollout/agent/actions.py:275 in parse_arguments)``: an
    exception and the innermost frame of its traceback, for the end-of-run warning."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        frame = frames[-1]
        where = f" ({'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno} in {frame.name})"
    return f"{type(exc).__name__}: {str(exc)[:200]}{where}"


@dataclass
class _Context:
    """What every episode of a run shares."""

    settings: RunSettings
    env_settings: EnvSettings
    client: Any
    policy: Any
    stats: _Stats
    server_failed: Callable[[], Awaitable[None]] | None = None
    """Called when a browser server fails (a fleet then asks for its live servers again)."""
    recordings: RecordingStore | None = None
    """Where recorded traffic goes (--record)."""
    replay: ReplayLibrary | None = None
    """The recorded run the episodes replay (--replay)."""


class _Episode:
    """One episode on its own `WebEnv`. `observe`, `decide` and `apply` advance it by one step; the
    schedulers call them through `guarded`, which turns every browser or policy failure into a
    restart on a fresh session or a final status."""

    def __init__(self, job: _Job, ctx: _Context):
        self.job, self.ctx = job, ctx
        self.env = WebEnv(ctx.client, ctx.env_settings)
        self.retries_left = ctx.settings.rollout.session_retries
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self.status = EpisodeStatus.OK
        self.finished = False
        self.duration_s = 0.0
        self._observation: Any = None
        self._output: Any = None

    async def observe(self) -> None:
        """Open the session and take the first observation, unless the episode has one."""
        if self._observation is None:
            replay = self.ctx.replay
            self._observation = await self.env.reset(
                self.job.task, split=self.ctx.settings.horizon_split, episode_id=self.job.episode_id,
                record=self.ctx.recordings,
                replay=replay.source_for(self.job.task.task_id, self.job.attempt) if replay else None)

    async def decide(self) -> None:
        """Ask the policy for this step's action."""
        self._output = await self.ctx.policy.act(self._observation)

    async def apply(self) -> None:
        """Carry out the decided action; the environment records the step and observes again."""
        output, self._output = self._output, None
        result = await self.env.step(output)
        self.ctx.stats.steps += 1
        if not result.info["step"].action:
            self.ctx.stats.parse_errors += 1  # an agent mistake: a no-op step
        if result.terminated:
            await self._finish(EpisodeStatus.OK)
        elif result.truncated:
            await self._finish(EpisodeStatus.TIMEOUT)
        else:
            self._observation = result.observation

    async def guarded(self, phase: Callable[[], Awaitable[None]]) -> bool:
        """Run one phase; True if it completed. A failure becomes a restart on a fresh session (the
        step is abandoned: the caller skips the episode's remaining phases) or a final status."""
        if self.finished:
            return False
        try:
            await phase()
            return True
        except Unauthorized:
            await self.env.close()
            raise  # every episode would fail the same way: stop the run
        except BrowserError as exc:
            await self.env.close()
            if isinstance(exc, ServerUnavailable) and self.ctx.server_failed is not None:
                await self.ctx.server_failed()
            if isinstance(exc, _FINAL_BROWSER_ERRORS) or self.retries_left <= 0:
                await self._finish(EpisodeStatus.for_error(exc.kind))
            else:
                log.info("episode %s: %s; restarting on a fresh session", self.job.episode_id, exc)
                self.retries_left -= 1
                self.ctx.stats.session_retries += 1
                self._observation = self._output = None  # the next observe starts the episode over
            if self.finished:
                log.warning("episode %s (task %s) ended with %s: %s", self.job.episode_id,
                            self.job.task.task_id, self.status.value, exc)
        except PolicyError as exc:
            log.warning("episode %s: policy failed: %s", self.job.episode_id, exc)
            await self._finish(EpisodeStatus.for_error(exc.kind))
        except Exception as exc:  # a bug must not take the other episodes down; the status records it
            log.exception("episode %s (task %s) failed with a bug (error:internal)", self.job.episode_id,
                          self.job.task.task_id)
            self.ctx.stats.note_bug(exc)
            await self._finish(EpisodeStatus.INTERNAL)
        return False

    async def _finish(self, status: EpisodeStatus) -> None:
        self.status = status
        self.finished = True
        self.duration_s = time.monotonic() - self._t0
        await self.env.close()

    def episode(self, policy_model: str) -> Episode:
        """The ended episode as the trajectory contract holds it (before judging)."""
        env = self.env
        return Episode(task=self.job.task, episode_id=self.job.episode_id,
                       iteration=self.ctx.settings.iteration, attempt=self.job.attempt,
                       split=self.ctx.settings.split, instruction=env.instruction or self.job.task.task_name,
                       policy_model=policy_model, status=self.status, answer=env.answer,
                       outcome=env.outcome or TaskOutcome(), started_at=self.started_at,
                       duration_s=self.duration_s, steps=list(env.steps))


# ------------------------------------------------------------------------- judging and writing

class _Finisher:
    """Judges ended episodes concurrently (their browsers are already released) and writes them."""

    def __init__(self, settings: RunSettings, judge: Any, writer: Any, stats: _Stats, policy_model: str,
                 truth: Callable[[str], SessionFacts] | None = None):
        self.judge, self.writer, self.stats = judge, writer, stats
        self.policy_model = policy_model
        self.truth, self.out = truth, settings.out
        self._semaphore = asyncio.Semaphore(settings.rollout.judge_concurrency)
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def submit(self, ep: _Episode) -> None:
        self.stats.judging += 1
        task = asyncio.create_task(self._finish(ep.episode(self.policy_model), ep),
                                   name=f"judge-{ep.job.episode_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def _finish(self, episode: Episode, ep: _Episode | None = None) -> None:
        episode.judge_model = getattr(self.judge, "model_id", "")
        recordings = ep.ctx.recordings if ep is not None else None
        if recordings is not None and ep.env.recording is not None:
            # Written before the shard that lists the episode: a listed episode has its recording.
            episode.recording = recordings.write_index(episode.episode_id, ep.env.recording)
        session_id = ep.env.kind.session_id if ep is not None and ep.env.kind is not None else ""
        if self.truth is not None and session_id and not episode.status.is_error:
            await self._keep_truth(episode, session_id)
        try:
            if not episode.status.is_error:
                began = time.perf_counter()
                try:
                    async with self._semaphore:
                        result = await self.judge.score(episode)
                except RolloutError as exc:  # JudgeError: the judge endpoint failed
                    log.warning("judging episode %s failed: %s", episode.episode_id, exc)
                    record_failure(episode, exc.kind)
                except Exception as exc:  # a bug in the judge: recorded as one, the run goes on
                    log.exception("judging episode %s failed with a bug (error:internal)", episode.episode_id)
                    self.stats.note_bug(exc)
                    episode.status = EpisodeStatus.INTERNAL
                else:
                    record_result(episode, result)
                episode.judge_s = time.perf_counter() - began
            async with self._write_lock:  # shards are written one at a time, off the event loop
                try:
                    await asyncio.to_thread(self.writer.add, episode)
                except EpisodeUnstorable as exc:  # a value our code let through: a bug, not the run's end
                    log.error("episode %s could not be stored (error:internal, a bug to report): %s",
                              episode.episode_id, exc)
                    self.stats.note_bug(exc)
                    episode.status = EpisodeStatus.INTERNAL
        finally:
            self.stats.judging -= 1
        self.stats.done += 1
        self.stats.successes += episode.success
        if episode.status.is_error:
            self.stats.errors[episode.status.error_kind] += 1


    async def _keep_truth(self, episode: Episode, session_id: str) -> None:
        """Append the episode's site session facts to the run's truth.jsonl (before its shard is
        written, so a listed episode has its truth); a truth listener that fails loses only that line."""
        from webgym_rollout.judge.truth import append_truth

        assert self.truth is not None
        try:
            facts = await asyncio.to_thread(self.truth, session_id)
        except (RolloutError, TruthUnavailable) as exc:
            log.warning("episode %s: its ground truth could not be read: %s", episode.episode_id, exc)
            return
        await asyncio.to_thread(append_truth, self.out, episode.episode_id, episode.task.task_id, facts)


def _site_truth(settings: RunSettings, truth: Callable[[str], SessionFacts] | None,
                stack: contextlib.ExitStack) -> Callable[[str], SessionFacts] | None:
    """Where the run reads its site sessions' facts: `truth` (in-process), else --truth-url, else none."""
    if truth is not None:
        return truth
    client = settings.truth.client()
    if client is None:
        return None
    stack.callback(client.close)
    return client.facts


def _make_judge(settings: RunSettings, tasks: Sequence[Task],
                truth: Callable[[str], SessionFacts] | None) -> Any:
    if settings.judge.kind != "site":
        return make_judge(settings.judge)
    if truth is None:
        raise SettingsError("judge: --judge site checks each episode against the sites' ground truth: give "
                            "--truth-url and its token (webgym-rollout serve-sites prints both)")
    from webgym_rollout.judge.site import SiteJudge

    return SiteJudge(truth, tasks)


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


async def _abandon(ep: _Episode) -> None:
    """A cancelled episode (the run was stopped) gives its browser session back at once, instead of
    holding a context until the server's idle timeout; it is never written."""
    log.info("episode %s cancelled: the run stopped before it ended", ep.job.episode_id)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ep.env.close(), timeout=10)


def _log_start(job: _Job) -> None:
    # With -v each episode's life is in the log: started, then written (or cancelled); the soak
    # benchmark accounts for every episode from these lines.
    log.info("episode %s started (task %s, attempt %d)", job.episode_id, job.task.task_id, job.attempt)


async def _play(ep: _Episode) -> None:
    """Async mode: one episode, step after step, at its own pace."""
    while not ep.finished:
        if await ep.guarded(ep.observe) and await ep.guarded(ep.decide):
            await ep.guarded(ep.apply)


class EpisodeGate(Protocol):
    """Admits episodes of one or more runs: `admit` returns once the next episode may start (it
    may wait), `release` is called when that episode has ended (before it is judged)."""

    async def admit(self) -> None: ...

    def release(self) -> None: ...


async def _run_async(jobs: Sequence[_Job], ctx: _Context, finisher: _Finisher,
                     gate: EpisodeGate | None = None) -> None:
    pending = iter(jobs)

    async def worker() -> None:
        # Each worker is one episode slot: when its episode ends, the next task starts at once.
        for job in pending:
            if gate is not None:
                await gate.admit()
            ep = _Episode(job, ctx)
            _log_start(job)
            ctx.stats.running += 1
            try:
                await _play(ep)
            except asyncio.CancelledError:
                await _abandon(ep)
                raise
            finally:
                ctx.stats.running -= 1
                if gate is not None:
                    gate.release()
            finisher.submit(ep)

    await _all(worker() for _ in range(min(ctx.settings.rollout.concurrency, len(jobs))))


async def _run_sync(jobs: Sequence[_Job], ctx: _Context, finisher: _Finisher) -> None:
    size = ctx.settings.rollout.batch_size
    for start in range(0, len(jobs), size):
        batch = [_Episode(job, ctx) for job in jobs[start:start + size]]
        for ep in batch:
            _log_start(ep.job)
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

def _rate(successes: int, trials: int) -> str:
    return f"{successes}/{trials} ({100 * successes / trials:.0f}%)" if trials else f"{successes}/0"


def _progress_table(stats: _Stats, settings: RunSettings):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"webgym-rollout run ({settings.rollout.scheduler}) -> {settings.out}",
                  show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    evaluated = stats.done - sum(stats.errors.values())
    table.add_row("episodes", f"{stats.done}/{stats.total} done, {stats.running} running, "
                              f"{stats.judging} judging")
    table.add_row("steps", f"{stats.steps} ({stats.steps_per_s:.2f} steps/s, {stats.elapsed:.0f} s)")
    table.add_row("success", f"{_rate(stats.successes, evaluated)} of evaluated episodes; "
                             f"{_rate(stats.successes, stats.done)} with infrastructure failures as failures")
    if stats.internal_errors:
        table.add_row("[bold red]BUGS[/]",
                      f"[bold red]{stats.internal_errors} episodes ended with error:internal: this is a bug, "
                      f"please report it[/] (first: {escape(stats.first_bug)})")
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
    invalid_rows: int = 0
    """Task rows left out as invalid (--skip-invalid; listed in the run's manifest)."""
    internal_errors: int = 0
    """Episodes recorded with ``error:internal``: bugs (of the toolkit or of a policy or judge passed
    in), never infrastructure; the run's log holds their tracebacks."""
    first_internal_error: str = ""
    """The first bug's exception and where it was raised ("" without bugs)."""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def evaluated(self) -> int:
        """Episodes that say something about the agent (infrastructure failures and bugs left out)."""
        return self.episodes - sum(self.errors.values())

    def success_line(self) -> str:
        """Both success rates: ``success 3/8 (38%) of evaluated episodes; 3/10 (30%) with
        infrastructure failures counted as failures``."""
        return (f"success {_rate(self.successes, self.evaluated)} of evaluated episodes; "
                f"{_rate(self.successes, self.episodes)} with infrastructure failures counted as failures")


@contextlib.asynccontextmanager
async def _browser_client(settings: RunSettings):
    """The client of the run's browser servers: --servers, or the live servers of a --fleet, asked
    again whenever one fails; yields (client, the callback for a failed server or None, the fleet's
    site truth or None)."""
    from webgym_rollout.browser.client import BrowserClient

    if not settings.fleet.enabled:
        async with BrowserClient(list(settings.servers), token=settings.browser_token) as client:
            yield client, None, None
        return
    from webgym_rollout.fleet import FleetEndpoints

    async with FleetEndpoints(settings.fleet) as fleet, \
            BrowserClient(fleet.urls, token=settings.browser_token or fleet.token) as client:
        async def server_failed() -> None:
            await fleet.refresh(client)

        yield client, server_failed, fleet.facts if fleet.sites_urls else None


def _jobs(tasks: Sequence[Task], settings: RunSettings, is_done: Callable[[str, int], bool]
          ) -> tuple[list[_Job], int]:
    jobs, skipped = [], 0
    for task in tasks:
        for attempt in range(settings.rollout.attempts):
            if is_done(task.task_id, attempt):
                skipped += 1
                continue
            jobs.append(_Job(task, attempt, episode_id(task.task_id, attempt, settings.iteration)))
    return jobs, skipped


async def run(settings: RunSettings, *, policy: Any = None, judge: Any = None,
              gate: EpisodeGate | None = None,
              truth: Callable[[str], SessionFacts] | None = None) -> RunReport:
    """Roll out every (task, attempt) of `settings` not yet in the output folder; write the episodes.

    `policy` / `judge` override the ones `settings` describes (benchmarks wrap a policy to add
    latency). `gate` admits each episode before it starts (not with ``lockstep``). A policy that
    reads the page's interactive elements says so with ``observes_elements = True`` (the random
    policy does): each step then reads them too. `truth` reads a local site session's facts (an
    in-process `SiteServer.facts`; default: --truth-url): each site-task episode's facts go to the
    run's truth.jsonl, and ``--judge site`` judges by them.
    """
    with contextlib.ExitStack() as stack:
        return await _run(settings, policy, judge, gate, _site_truth(settings, truth, stack))


async def _run(settings: RunSettings, policy: Any, judge: Any, gate: EpisodeGate | None,
               truth: Callable[[str], SessionFacts] | None) -> RunReport:
    from webgym_rollout.trajectory.writer import TrajectoryWriter

    loaded = load_tasks(settings.tasks, split=settings.split, skip_invalid=settings.skip_invalid)  # type: ignore[arg-type]
    for error in loaded.invalid:
        log.warning("skipping an invalid task row: %s", error)
    sampler = TaskSampler(loaded, settings.sampler)
    tasks = sampler.batch(settings.iteration)
    log.info("%d of %d tasks this run (%s sampler)", len(tasks), len(sampler.tasks), settings.sampler.kind)
    for task in tasks:
        try:
            task_kind(task).check(settings.env)
        except ValueError as exc:
            raise SettingsError(f"{settings.tasks}: {exc}") from None
    if policy is None and settings.policy.kind == "expert":
        from webgym_rollout.agent.expert import EXPERT_MODEL_ID, ExpertPolicy
        from webgym_sites.generate import expert_plan
        from webgym_sites.shortcuts import SHORTCUTS

        name = settings.policy.shortcut  # validated by PolicySettings
        policy = ExpertPolicy(sampler.tasks, agent=settings.policy.agent,
                              plan=SHORTCUTS[name] if name else expert_plan,
                              model_id=SHORTCUT_MODEL_PREFIX + name if name else EXPERT_MODEL_ID)
    policy = policy if policy is not None else make_policy(settings.policy)
    observes_elements = bool(getattr(policy, "observes_elements", False))
    env_settings = dataclasses.replace(settings.env, elements=observes_elements)
    stats = _Stats()
    replay = (ReplayLibrary.open(settings.traffic.replay, live_fallback=settings.traffic.replay_live_fallback)
              if settings.traffic.replay else None)
    async with _browser_client(settings) as (client, server_failed, fleet_truth):
        truth = truth or fleet_truth
        judge = judge if judge is not None else _make_judge(settings, sampler.tasks, truth)
        run_info = {"policy": getattr(policy, "model_id", ""), "judge": getattr(judge, "model_id", ""),
                    "mode": settings.rollout.scheduler, "tasks": str(settings.tasks), "split": settings.split,
                    "attempts": settings.rollout.attempts, "iteration": settings.iteration,
                    "seed": settings.policy.random.seed, "tasks_played": len(tasks),
                    "invalid_task_rows": [error.to_dict() for error in loaded.invalid],
                    "record": settings.traffic.record, "replay": settings.traffic.replay or ""}
        with TrajectoryWriter(settings.out, resume=settings.resume,  # type: ignore[arg-type]
                              max_shard_episodes=settings.rollout.shard_episodes,
                              run_info=run_info) as writer:
            jobs, skipped = _jobs(tasks, settings, writer.is_done)
            stats.total = len(jobs)
            if skipped:
                log.info("resume: %d episodes are already in %s; %d to go", skipped, settings.out, len(jobs))
            ctx = _Context(settings, env_settings, client, policy, stats, server_failed, replay=replay,
                           recordings=RecordingStore(settings.out) if settings.traffic.record else None)
            finisher = _Finisher(settings, judge, writer, stats, getattr(policy, "model_id", ""), truth)
            stats.started = time.monotonic()  # steps/s counts from here, not from loading the tasks
            watcher = asyncio.create_task(_watch(stats, settings, client))
            try:
                if settings.rollout.lockstep:
                    await _run_sync(jobs, ctx, finisher)
                else:
                    await _run_async(jobs, ctx, finisher, gate)
                await finisher.drain()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
                for closeable in (policy, judge):
                    close = getattr(closeable, "close", None)
                    if close is not None:
                        await close()
    if stats.internal_errors:
        log.warning("%d of %d episodes ended with error:internal: this is a bug, please report it (their "
                    "tracebacks are logged above; the first: %s)", stats.internal_errors, stats.done,
                    stats.first_bug)
    return RunReport(out=settings.out, episodes=stats.done, skipped=skipped,  # type: ignore[arg-type]
                     invalid_rows=len(loaded.invalid),
                     steps=stats.steps, successes=stats.successes, errors=dict(stats.errors),
                     elapsed_s=stats.elapsed, session_retries=stats.session_retries,
                     parse_errors=stats.parse_errors, internal_errors=stats.internal_errors,
                     first_internal_error=stats.first_bug)


# ------------------------------------------------------------------------------------------ CLI

@click.command("run")
@settings_options(RunSettings)
def run_command(config: str | None, **flags: Any) -> None:
    """Roll out tasks with a policy against browser servers; judge them; write trajectories.

    Episodes run fully asynchronously (--concurrency at once, no barrier between steps or
    episodes); --mode sync is the lockstep baseline. Episodes go to OUT as parquet shards with a
    manifest, so an interrupted run continues with --resume and nothing is lost or repeated.

    \b
    Example:
      webgym-rollout serve-sites --port 8400 &
      webgym-rollout serve --port 8300 --allow-hosts 127.0.0.1:8400 &
      webgym-rollout run --tasks tasks.jsonl --servers http://127.0.0.1:8300 \\
          --sites-url http://127.0.0.1:8400 --policy random --judge programmatic \\
          --concurrency 8 --out out/trajectories/iter-0000
      # a VLM behind vLLM or `webgym-rl serve-policy`, resumed after an interruption:
      webgym-rollout run --tasks out/tasks --split test --servers http://127.0.0.1:8300 \\
          --policy openai --policy-base-url http://127.0.0.1:8500/v1 --policy-model qwen \\
          --policy-temperature 0 --judge rubric --judge-base-url http://127.0.0.1:8001/v1 \\
          --judge-model judge --out out/eval --resume
      # 64 tasks of one benchmark, a new random batch per --iteration (without replacement):
      webgym-rollout run --tasks out/tasks --servers http://127.0.0.1:8300 --sampler epoch \\
          --sampler-batch-size 64 --sampler-benchmarks deepshop --iteration 3 --out out/iter-3
      # record every episode's traffic once; later checkpoints replay the same web offline:
      webgym-rollout run --tasks out/tasks --split test --servers http://127.0.0.1:8300 \\
          --policy random --record --out out/eval-recorded
      webgym-rollout run --tasks out/tasks --split test --servers http://127.0.0.1:8300 \\
          --policy openai --policy-base-url http://127.0.0.1:8500/v1 --policy-model qwen \\
          --replay out/eval-recorded --out out/eval-replayed
    """
    try:
        settings = load_settings(RunSettings, config, flags)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = asyncio.run(run(settings))
    except (TaskValidationError, TrajectoryError, Unauthorized, SettingsError) as exc:
        raise click.ClickException(str(exc)) from exc
    errors = ", ".join(f"{k} {n}" for k, n in sorted(report.errors.items())) or "none"
    invalid = f"; {report.invalid_rows} invalid task rows skipped" if report.invalid_rows else ""
    click.echo(f"{report.episodes} episodes ({report.skipped} already done{invalid}), {report.steps} steps "
               f"in {report.elapsed_s:.1f} s ({report.steps_per_s:.2f} steps/s); {report.success_line()}; "
               f"errors: {errors} -> {report.out}")
    if report.internal_errors:
        click.secho(f"WARNING: {report.internal_errors} episodes ended with error:internal: this is a bug, "
                    f"please report it (first: {report.first_internal_error})", err=True, fg="red", bold=True)
