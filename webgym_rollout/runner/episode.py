"""One episode of a run as the schedulers play it (`LiveEpisode`), what the episodes of a run share
(`RunContext`) and the run's live counters (`RunStats`)."""

from __future__ import annotations

import hashlib
import logging
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from webgym_data.schema import Task
from webgym_rollout.agent.policies import Policy, PolicyOutput
from webgym_rollout.agent.protocol import Observation
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.env import WebEnv
from webgym_rollout.errors import (
    BrowserError,
    InvalidRequest,
    NavigationRefused,
    PolicyError,
    ServerUnavailable,
    SiteBlocked,
    Unauthorized,
)
from webgym_rollout.runner.settings import RunSettings
from webgym_rollout.settings import EnvSettings
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, TaskOutcome
from webgym_rollout.trajectory.recordings import RecordingStore, ReplayLibrary

__all__ = ["Job", "LiveEpisode", "RunContext", "RunStats", "bug_summary", "episode_id"]

log = logging.getLogger(__name__)


def episode_id(task_id: str, attempt: int, iteration: int) -> str:
    """Stable id of one episode: the same (task, attempt, iteration) always gets the same id."""
    return hashlib.sha256(f"{task_id}\x1f{attempt}\x1f{iteration}".encode()).hexdigest()[:16]


# Errors a fresh session can cure; the others (a refused URL, a blocked site, a malformed request)
# would fail again the same way, so the episode is recorded at once.
_FINAL_BROWSER_ERRORS = (NavigationRefused, SiteBlocked, InvalidRequest)


@dataclass(frozen=True)
class Job:
    """One (task, attempt) to play, and the id its episode gets."""

    task: Task
    attempt: int
    episode_id: str


@dataclass
class RunStats:
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
    """`bug_summary` of the first exception that made an episode ``error:internal``."""

    def note_bug(self, exc: BaseException) -> None:
        self.first_bug = self.first_bug or bug_summary(exc)

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


def bug_summary(exc: BaseException) -> str:
    """``TypeError: unhashable type: 'list' (webgym_rollout/agent/actions.py:275 in parse_arguments)``: an
    exception and the innermost frame of its traceback, for the end-of-run warning."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        frame = frames[-1]
        where = f" ({'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno} in {frame.name})"
    return f"{type(exc).__name__}: {str(exc)[:200]}{where}"


@dataclass
class RunContext:
    """What every episode of a run shares."""

    settings: RunSettings
    env_settings: EnvSettings
    client: BrowserClient
    policy: Policy
    stats: RunStats
    server_failed: Callable[[], Awaitable[None]] | None = None
    """Called when a browser server fails (a fleet then asks for its live servers again)."""
    recordings: RecordingStore | None = None
    """Where recorded traffic goes (--record)."""
    replay: ReplayLibrary | None = None
    """The recorded run the episodes replay (--replay)."""


class LiveEpisode:
    """One episode on its own `WebEnv`. `observe`, `decide` and `apply` advance it by one step; the
    schedulers call them through `guarded`, which turns every browser or policy failure into a
    restart on a fresh session or a final status."""

    def __init__(self, job: Job, ctx: RunContext):
        self.job, self.ctx = job, ctx
        self.env = WebEnv(ctx.client, ctx.env_settings)
        self.retries_left = ctx.settings.rollout.session_retries
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self.status = EpisodeStatus.OK
        self.finished = False
        self.duration_s = 0.0
        self._observation: Observation | None = None
        self._output: PolicyOutput | None = None

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

    def truth_session(self) -> str:
        """The local site session whose ground truth can be read after the episode ("" for a task
        kind that keeps none, or an episode that never opened one)."""
        kind = self.env.kind
        return kind.truth_session() if kind is not None else ""

    def episode(self, policy_model: str) -> Episode:
        """The ended episode as the trajectory contract holds it (before judging)."""
        env = self.env
        return Episode(task=self.job.task, episode_id=self.job.episode_id,
                       iteration=self.ctx.settings.iteration, attempt=self.job.attempt,
                       split=self.ctx.settings.split, instruction=env.instruction or self.job.task.task_name,
                       policy_model=policy_model, status=self.status, answer=env.answer,
                       outcome=env.outcome or TaskOutcome(), started_at=self.started_at,
                       duration_s=self.duration_s, steps=list(env.steps))
