"""``webgym-rollout rejudge RUN --judge ... --out RUN2``: score stored episodes again with another
judge, without browsers.

Every episode of RUN (a rollout folder or a Hub dataset id) is read back (`read_episodes`), scored
by the judge `RejudgeSettings.judge` describes (`make_judge`) from what the episode stored (its
screenshots, visited pages, answer and the environment's own outcome), and written to a new
trajectory dataset in OUT (`TrajectoryWriter`): the same episodes, steps and ids, with the new
reward, verdicts, ``judge_model`` and ``judge_s``. OUT's manifest records the judge used and the
source it re-scored (``run.rejudge``), so ``report RUN RUN2`` compares the two judges episode by
episode (`webgym_rollout.report.html.JudgeAgreement`).

Which episodes are scored again:

- those that ended ``ok`` or ``timeout``;
- those whose earlier judge failed (``error:judge_*``): their status goes back to ``ok`` when the
  agent answered or the environment ended the episode, ``timeout`` otherwise, before judging;
- the others (a browser or policy failure, a blocked site) say nothing about the agent and are
  copied unchanged.

A judge that fails on an episode (`JudgeError`) gives it the status ``error:<kind>``, as in a run.
Recordings (`webgym_rollout.trajectory.recordings`) of a folder source are copied along (hard links where the
file system allows), so RUN2 can be replayed too. ``--resume`` continues an interrupted rejudge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import SettingsCommand, load_settings, settings_options
from webgym_rollout.errors import RolloutError
from webgym_rollout.judge.judges import JudgeSettings, make_judge, record_failure, record_result
from webgym_rollout.trajectory.contract import MANIFEST, Episode, EpisodeStatus, TrajectoryError
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.recordings import RecordingStore
from webgym_rollout.trajectory.writer import EpisodeUnstorable, TrajectoryWriter

__all__ = ["RejudgeReport", "RejudgeSettings", "rejudge", "rejudge_command"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RejudgeSettings:
    """Settings of ``webgym-rollout rejudge``."""

    out: Path | None = None
    """Output folder of the re-judged trajectory dataset."""
    split: str | None = None
    """Re-judge only the episodes of this split (default: all)."""
    concurrency: int = 8
    """Episodes judged at once."""
    shard_episodes: int = 64
    """Episodes per parquet shard."""
    resume: bool = False
    """Continue an interrupted rejudge in --out: skip the episodes it already wrote."""
    cache_dir: Path | None = None
    """Cache folder of Hub datasets (default: the datasets library's)."""
    progress: bool = True
    """Show a progress bar on the terminal."""
    judge: JudgeSettings = field(default_factory=JudgeSettings)

    def __post_init__(self) -> None:
        if self.out is None:
            raise ValueError("out: an output folder is required")
        for name in ("concurrency", "shard_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class RejudgeReport:
    """What a rejudge did."""

    out: Path
    source: str
    judge_model: str
    episodes: int
    """Episodes written by this invocation."""
    rejudged: int
    """Episodes the judge scored."""
    copied: int
    """Episodes copied unchanged (infrastructure failures)."""
    changed: int
    """Scored episodes whose reward changed."""
    judge_errors: int
    """Scored episodes on which the judge failed."""
    skipped: int = 0
    """Episodes already in --out (resume)."""
    unstorable: int = 0
    """Episodes left out because their row did not fit the columns (a bug to report)."""
    elapsed_s: float = 0.0


def _rescorable(episode: Episode) -> bool:
    if not episode.status.is_error:
        return True
    return episode.status.error_kind.startswith("judge_")


async def _score(episode: Episode, judge: Any, model_id: str, semaphore: asyncio.Semaphore) -> bool:
    """Score `episode` in place; True when the judge failed on it."""
    if episode.status.is_error:  # an earlier judge failed: the agent's own ending is restored
        episode.status = EpisodeStatus.OK if episode.answer or episode.outcome.done else EpisodeStatus.TIMEOUT
    episode.judge_model = model_id
    began = time.perf_counter()
    failed = False
    try:
        async with semaphore:
            result = await judge.score(episode)
    except RolloutError as exc:  # JudgeError: the judge endpoint failed
        log.warning("judging episode %s failed: %s", episode.episode_id, exc)
        record_failure(episode, exc.kind)
        failed = True
    else:
        record_result(episode, result)
        failed = bool(result.error_kind)
    episode.judge_s = time.perf_counter() - began
    return failed


async def rejudge(source: str | Path, settings: RejudgeSettings, *, judge: Any = None) -> RejudgeReport:
    """Re-score the episodes of `source` and write them to ``settings.out`` (see the module docstring).
    `judge` overrides the one `settings.judge` describes. Raises `TrajectoryError` naming a source
    that is not a trajectory dataset, or an --out that holds a dataset without --resume."""
    trajectories = read_episodes(source, split=settings.split, cache_dir=settings.cache_dir)
    if not len(trajectories):  # before --out is made: nothing re-judged is no new dataset
        raise TrajectoryError(_nothing_to_rejudge(source, settings.split))
    judge = judge if judge is not None else make_judge(settings.judge)
    model_id = str(getattr(judge, "model_id", ""))
    source_path = Path(str(source))
    recordings_in = RecordingStore(source_path) if source_path.is_dir() else None
    out = Path(settings.out)  # type: ignore[arg-type]
    recordings_out = RecordingStore(out)
    run_info = {"rejudge": {"source": trajectories.id, "source_version": trajectories.version,
                            "judge": model_id, "judge_kind": settings.judge.kind}, "judge": model_id}
    semaphore = asyncio.Semaphore(settings.concurrency)
    counts = dict.fromkeys(
        ("episodes", "rejudged", "copied", "changed", "judge_errors", "skipped", "unstorable"), 0)
    began = time.monotonic()
    progress = _progress(settings.progress, len(trajectories))
    try:
        with TrajectoryWriter(out, resume=settings.resume, max_shard_episodes=settings.shard_episodes,
                              run_info=run_info) as writer:
            batch: list[Episode] = []
            for episode in trajectories:
                if writer.is_done(episode.task.task_id, episode.attempt):
                    counts["skipped"] += 1
                    progress.update(1)
                    continue
                batch.append(episode)
                if len(batch) >= settings.concurrency:
                    await _rejudge_batch(batch, judge, model_id, semaphore, writer, counts,
                                         recordings_in, recordings_out, progress)
                    batch = []
            await _rejudge_batch(batch, judge, model_id, semaphore, writer, counts, recordings_in,
                                 recordings_out, progress)
    finally:
        progress.close()
        close = getattr(judge, "close", None)
        if close is not None:
            await close()
    return RejudgeReport(out=out, source=trajectories.id, judge_model=model_id,
                         elapsed_s=time.monotonic() - began, **counts)


def _nothing_to_rejudge(source: str | Path, split: str | None) -> str:
    """Why `source` gave no episode: a folder that is no trajectory set (what it holds), or a set
    without episodes (of `split`)."""
    folder = Path(str(source))
    if folder.is_dir() and not (folder / MANIFEST).is_file() and not any(folder.rglob("*.parquet")):
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
        holds = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "") if entries else "nothing"
        return (f"{source} is not a trajectory set: it has no {MANIFEST} and no parquet shards (it holds "
                f"{holds}); give the --out folder of `webgym-rollout run`, or a Hub dataset id; nothing "
                "was re-judged")
    of_split = f" of split {split!r}" if split else ""
    return f"{source} holds no episodes{of_split}; nothing was re-judged"


async def _rejudge_batch(batch: Sequence[Episode], judge: Any, model_id: str, semaphore: asyncio.Semaphore,
                         writer: Any, counts: dict[str, int], recordings_in: RecordingStore | None,
                         recordings_out: RecordingStore, progress: Any) -> None:
    """Score a batch of episodes concurrently, then write them in their source order."""
    scored = [episode for episode in batch if _rescorable(episode)]
    before = {id(episode): episode.reward for episode in scored}
    failures = await asyncio.gather(*(_score(episode, judge, model_id, semaphore) for episode in scored))
    counts["judge_errors"] += sum(failures)
    counts["rejudged"] += len(scored)
    counts["changed"] += sum(episode.reward != before[id(episode)] for episode in scored)
    counts["copied"] += len(batch) - len(scored)
    for episode in batch:
        if episode.recording and recordings_in is not None:
            # Before the shard that lists the episode, as a recording run writes them.
            episode.recording = recordings_out.copy_episode(recordings_in, episode.recording,
                                                            episode.episode_id)
        elif episode.recording:
            log.warning("episode %s: its recording stays in the Hub source; not copied", episode.episode_id)
            episode.recording = ""
        try:
            await asyncio.to_thread(writer.add, episode)
        except EpisodeUnstorable as exc:  # a value our code let through: a bug to report, not the end
            log.error("episode %s could not be stored (a bug to report): %s", episode.episode_id, exc)
            counts["unstorable"] += 1
            continue
        counts["episodes"] += 1
        progress.update(1)


def _progress(show: bool, total: int) -> Any:
    from tqdm import tqdm  # optional: tqdm

    return tqdm(total=total, unit="episode", desc="rejudge", disable=not show)


@click.command("rejudge", cls=SettingsCommand)
@click.argument("run")
@settings_options(RejudgeSettings)
def rejudge_command(run: str, config: str | None, **flags: Any) -> None:
    """Score the stored episodes of RUN (a rollout folder or a Hub dataset id) again with another
    judge, without browsers, and write them as a new trajectory dataset to OUT (its manifest records
    the judge). Infrastructure failures are copied unchanged; recordings are copied along.

    \b
    Example:
      webgym-rollout rejudge out/eval --judge rubric --judge-base-url http://127.0.0.1:8001/v1 \\
          --judge-model judge-v2 --out out/eval-judge-v2
      webgym-rollout report out/eval out/eval-judge-v2 --labels judge-v1 judge-v2 --out out/judges
    """
    try:
        settings = load_settings(RejudgeSettings, config, flags)
    except (SettingsError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = asyncio.run(rejudge(run, settings))
    except TrajectoryError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{report.episodes} episodes from {report.source} ({report.skipped} already done): "
               f"{report.rejudged} re-judged by {report.judge_model or '(unnamed judge)'}, "
               f"{report.changed} rewards changed, {report.judge_errors} judge errors, {report.copied} "
               f"copied unchanged -> {report.out}")
    if report.unstorable:
        click.secho(f"BUG: {report.unstorable} episodes could not be stored (see the log); please report it",
                    fg="red", err=True)
