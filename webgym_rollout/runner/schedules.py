"""The episode schedules: asynchronous (`run_async`, each episode at its own pace in one of
`concurrency` slots, started in a `StartQueue`'s order, optionally admitted by an `EpisodeGate`)
and lockstep (`run_lockstep`, the baseline: batches whose every step waits for the whole batch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Protocol

from webgym_rollout.runner.episode import Job, LiveEpisode, RunContext
from webgym_rollout.runner.finisher import EpisodeFinisher
from webgym_rollout.runner.order import StartQueue

__all__ = ["EpisodeGate", "run_async", "run_lockstep"]

log = logging.getLogger(__name__)


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


async def _abandon(ep: LiveEpisode) -> None:
    """A cancelled episode (the run was stopped) gives its browser session back at once, instead of
    holding a context until the server's idle timeout; it is never written."""
    log.info("episode %s cancelled: the run stopped before it ended", ep.job.episode_id)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ep.env.close(), timeout=10)


def _log_start(job: Job) -> None:
    # With -v each episode's life is in the log: started, then written (or cancelled); the soak
    # benchmark accounts for every episode from these lines.
    log.info("episode %s started (task %s, attempt %d)", job.episode_id, job.task.task_id, job.attempt)


async def _play(ep: LiveEpisode) -> None:
    """Async mode: one episode, step after step, at its own pace."""
    while not ep.finished:
        if await ep.guarded(ep.observe) and await ep.guarded(ep.decide):
            await ep.guarded(ep.apply)


class EpisodeGate(Protocol):
    """Admits episodes of one or more runs: `admit` returns once the next episode may start (it
    may wait), `release` is called when that episode has ended (before it is judged)."""

    async def admit(self) -> None: ...

    def release(self) -> None: ...


async def run_async(queue: StartQueue, ctx: RunContext, finisher: EpisodeFinisher,
                    gate: EpisodeGate | None = None) -> None:
    """`concurrency` episode slots, each starting the queue's next job as soon as its episode ends;
    `gate` admits each episode before it starts (the job is chosen once admitted)."""

    unclaimed = len(queue)

    async def worker() -> None:
        nonlocal unclaimed
        # Each worker is one episode slot: when its episode ends, the next job starts at once. The
        # slot claims a job before admission (a gate counts what it admits) and chooses it after.
        while unclaimed > 0:
            unclaimed -= 1
            if gate is not None:
                await gate.admit()
            job = queue.next()
            assert job is not None  # one claimed job is left per claim
            ep = LiveEpisode(job, ctx)
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
            queue.ended(job, len(ep.env.steps))
            finisher.submit(ep)

    await _all(worker() for _ in range(min(ctx.settings.rollout.concurrency, len(queue))))


async def run_lockstep(jobs: Sequence[Job], ctx: RunContext, finisher: EpisodeFinisher) -> None:
    """The naive baseline: batches of `batch_size` episodes, every phase of a step a barrier."""
    size = ctx.settings.rollout.batch_size
    for start in range(0, len(jobs), size):
        batch = [LiveEpisode(job, ctx) for job in jobs[start:start + size]]
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
