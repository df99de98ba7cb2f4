"""The episode finisher: judges each ended episode (its browser already released, concurrently
with the next episodes), keeps a site episode's ground truth, and writes the episode."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from webgym_rollout.errors import RolloutError
from webgym_rollout.judge.judges import Judge, JudgeResult, record_failure, record_result
from webgym_rollout.judge.truth import append_truth
from webgym_rollout.runner.episode import LiveEpisode, RunStats
from webgym_rollout.runner.settings import RunSettings
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus
from webgym_rollout.trajectory.writer import EpisodeUnstorable, TrajectoryWriter
from webgym_sites.errors import TruthUnavailable
from webgym_sites.facts import SessionFacts

__all__ = ["EpisodeFinisher"]

log = logging.getLogger(__name__)


class EpisodeFinisher:
    """Judges ended episodes concurrently (their browsers are already released) and writes them."""

    def __init__(self, settings: RunSettings, judge: Judge, writer: TrajectoryWriter, stats: RunStats,
                 policy_model: str, truth: Callable[[str], SessionFacts] | None = None):
        self.judge, self.writer, self.stats = judge, writer, stats
        self.policy_model = policy_model
        self.truth, self.out = truth, settings.out
        self._semaphore = asyncio.Semaphore(settings.rollout.judge_concurrency)
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def submit(self, ep: LiveEpisode) -> None:
        self.stats.judging += 1
        task = asyncio.create_task(self._finish(ep.episode(self.policy_model), ep),
                                   name=f"judge-{ep.job.episode_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def _finish(self, episode: Episode, ep: LiveEpisode | None = None) -> None:
        episode.judge_model = getattr(self.judge, "model_id", "")
        recordings = ep.ctx.recordings if ep is not None else None
        if recordings is not None and ep.env.recording is not None:
            # Written before the shard that lists the episode: a listed episode has its recording.
            episode.recording = recordings.write_index(episode.episode_id, ep.env.recording)
        session_id = ep.truth_session() if ep is not None else ""
        if self.truth is not None and session_id and not episode.status.is_error:
            await self._keep_truth(episode, session_id)
        try:
            if not episode.status.is_error:
                await self._judge(episode)
            await self._write(episode)
        finally:
            self.stats.judging -= 1
        self.stats.done += 1
        self.stats.successes += episode.success
        if episode.status.is_error:
            self.stats.errors[episode.status.error_kind] += 1

    async def _score(self, episode: Episode) -> JudgeResult:
        """The judge's verdict on `episode`: the one place the runner calls the judge."""
        return await self.judge.score(episode)

    async def _judge(self, episode: Episode) -> None:
        """Judge `episode` (at most `judge_concurrency` at once) and record the verdict on it; a
        failing judge endpoint is recorded as its error kind, a bug in the judge as ``error:internal``."""
        began = time.perf_counter()
        try:
            async with self._semaphore:
                result = await self._score(episode)
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

    async def _write(self, episode: Episode) -> None:
        """Add `episode` to the trajectory dataset: shards are written one at a time, off the event loop."""
        async with self._write_lock:
            try:
                await asyncio.to_thread(self.writer.add, episode)
            except EpisodeUnstorable as exc:  # a value our code let through: a bug, not the run's end
                log.error("episode %s could not be stored (error:internal, a bug to report): %s",
                          episode.episode_id, exc)
                self.stats.note_bug(exc)
                episode.status = EpisodeStatus.INTERNAL

    async def _keep_truth(self, episode: Episode, session_id: str) -> None:
        """Append the episode's site session facts to the run's truth.jsonl (before its shard is
        written, so a listed episode has its truth); a truth listener that fails loses only that line."""
        assert self.truth is not None
        try:
            facts = await asyncio.to_thread(self.truth, session_id)
        except (RolloutError, TruthUnavailable) as exc:
            log.warning("episode %s: its ground truth could not be read: %s", episode.episode_id, exc)
            return
        await asyncio.to_thread(append_truth, self.out, episode.episode_id, episode.task.task_id, facts)
