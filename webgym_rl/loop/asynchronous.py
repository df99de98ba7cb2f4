"""The asynchronous schedule (``--schedule async``): rollouts and training at once, bounded by staleness.

The same recipe as the synchronous schedule (`webgym_rl.loop.phases`: the same sample selection,
window and recency weights, the same resident trainer, publish and evaluation); only the rollout
runs beside the trainer instead of before it:

- the rollout (a thread with its own event loop) draws task batches ("chunks", one per chunk
  index, by the train sampler with the outcomes of the chunks before) and plays them
  (`webgym_rollout.runner.run`) into ``OUT/rollouts/chunk-XXXX``, committing every finished episode
  (one shard per ``--commit-every`` episodes). Every episode passes one `_Gate` before it starts:
  at most ``--concurrency`` run at once across all chunks (as many as a sync round has in flight),
  and the episodes begun in total stay within ``(trainer version + max_staleness + 1) x batch +
  overprovision`` (and within what the run needs: the capacity of the
  `webgym_rl.loop.staleness.StalenessManager`), so the rollout slows down instead of producing
  episodes too stale to train on. The endpoint is never stopped: each step records the version
  that produced it (`Step.policy_version`) and its token log-probabilities.
- the trainer (this thread) takes the first ``batch`` committed episodes as soon as they are there
  (`webgym_rl.loop.stream.TrajectoryStream`: each committed episode once; for reinforce and grpo
  whole groups, the ``--attempts`` attempts at one task of one chunk, once all are committed, so no
  group is split across two batches; two groups of one task in a batch count as one group),
  records them as round r's batch (a manifest of (chunk folder, episode id) in the loop state: the
  trainer reads each where the rollout wrote it, as an episode of round r; nothing is copied),
  trains the resident trainer on the last K rounds' batches and publishes version r + 1 while
  episodes keep running. With ``--overprovision N`` the rollout keeps N episodes more in flight,
  so a batch takes the first episodes to finish, not the slowest; when the run ends the episodes
  still unfinished are cancelled and counted (``cancelled`` in the state), never trained on.

**Staleness** of an episode in round r: r minus the version of its oldest step (the random
bootstrap and replies naming no version count as 0); a step's version is the one that answered it
(the endpoint's stamp, `webgym_rl.loop.phases.VersionedPolicy`). Every objective leaves out of the
batch the episodes staler than ``max_staleness`` (`StalenessManager.too_stale`; recorded as
``dropped_stale`` and counted in the progress line); the ones kept are corrected by the objectives
from their stored behaviour log-probabilities (reinforce's truncated importance weights, grpo's
decoupled PPO). A group of reinforce or grpo that loses an attempt keeps the others, with the
baseline of those.

**Resume**: the batch of each round (its episodes and the stream position after it) is recorded
before it trains. A rerun after a crash (even SIGKILL) resumes the chunks' folders (nothing
committed is lost or played twice), restores the trainer's newest full checkpoint and trains the
rounds after it again from their recorded batches (their earlier versions are marked superseded),
and builds any unrecorded batch from the recorded position (no episode in two batches).

**Evaluation** (``--eval-every M``): each due version is evaluated on a thread of its own while the
rollout and the trainer go on (``OUT/evals/v-XXXX``); its episodes are never trained on. So that
every step of an evaluation of version v is answered by v (and its figure is v's), the next publish
waits until the evaluation has finished: training goes on meanwhile, and so do the rollouts, on v
(within the staleness bound). An evaluation left unfinished by a crash is played again on resume,
by the version then serving (the same one: the publish after it never happened).

**Metrics** (``state.metrics``, TensorBoard scalars under ``OUT/logs/async`` and the progress line
of each version): the staleness histogram of each batch's own samples (mean, max), rollout idle
time (no episode running), trainer idle time (waiting for a batch), episodes and samples per
second, success per policy version, the most episodes in flight, and the staleness manager's
episodes submitted, accepted and rejected by version. The clocks and those counts cover this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webgym_data.loading import load_tasks
from webgym_data.sampler import TaskSampler
from webgym_rl.errors import LoopError, LoopSettingsError
from webgym_rl.loop.events import (
    BatchReady,
    EvalDone,
    EvalStarted,
    PhaseSkipped,
    RolloutStarted,
    VersionPublished,
)
from webgym_rl.loop.phases import (
    Loop,
    VersionedPolicy,
    bootstrap_policy,
    checkpoint_due,
    draw_tasks,
    evaluate,
    evaluation_due,
    finished_evaluation,
    history_of,
    oldest_version,
    publish,
    run_settings,
    running_trainer,
    step_version,
    successes_by_version,
    supersede,
    train_points,
    train_round,
    write_checkpoint,
)
from webgym_rl.loop.staleness import StalenessManager
from webgym_rl.loop.state import AsyncMetrics, BatchRecord
from webgym_rl.loop.stream import StreamPosition, TrajectoryStream
from webgym_rl.samples import Objective

if TYPE_CHECKING:
    from webgym_rollout.trajectory.contract import Episode

__all__ = ["run_async"]

log = logging.getLogger(__name__)


class _Board:
    """What the trainer and the rollout thread share: the staleness manager (which holds the
    published version), the stop flag, the first failure of another thread."""

    def __init__(self, staleness: StalenessManager):
        self.staleness = staleness
        self.cond = threading.Condition()
        self.stop = False
        self.error: BaseException | None = None
        self.failed = ""
        self.listeners: list[Callable[[], None]] = []
        """Called (from the publishing thread) when the version changes or the run stops."""

    @property
    def version(self) -> int:
        """The version serving now."""
        return self.staleness.version

    def publish(self, version: int) -> None:
        with self.cond:
            self.staleness.publish(version)
            self.cond.notify_all()
        for listener in self.listeners:
            listener()

    def fail(self, what: str, error: BaseException) -> None:
        """Another thread failed: the trainer stops the loop when it next waits."""
        with self.cond:
            self.failed, self.error = what, error
            self.cond.notify_all()

    def check(self) -> None:
        if self.error is not None:
            raise LoopError(f"{self.failed} failed: {self.error}") from self.error

    def finish(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        for listener in self.listeners:
            listener()


class _Gate:
    """Admits the rollout's episodes (`webgym_rollout.runner.EpisodeGate`), in the order they ask:
    at most `concurrency` running, and no more begun than the staleness manager has capacity for
    (each one admitted is submitted to it). Lives on the rollout thread's event loop; `wake` may be
    called from any thread."""

    def __init__(self, board: _Board, concurrency: int):
        self.board, self.concurrency = board, concurrency
        self.running = self.most = 0
        self.idle_s = 0.0
        self._idle_since: float | None = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Condition | None = None

    def open(self) -> None:
        """Bind to the running event loop (the rollout thread's)."""
        self._loop, self._changed = asyncio.get_running_loop(), asyncio.Condition()

    def wake(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the rollout's event loop has ended
                self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._notify()))

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    def admissible(self) -> bool:
        return self.running < self.concurrency and self.board.staleness.capacity() > 0

    async def admit(self) -> None:
        assert self._changed is not None
        async with self._changed:
            await self._changed.wait_for(lambda: self.board.stop or self.admissible())
            stopped = self.board.stop
            if not stopped:
                self.board.staleness.submit()
                self.running += 1
                self.most = max(self.most, self.running)
                if self._idle_since is not None:
                    self.idle_s += time.monotonic() - self._idle_since
                    self._idle_since = None
        if stopped:  # the run is over: this episode never starts (the rollout cancels it)
            await asyncio.Event().wait()

    def release(self) -> None:
        self.running -= 1
        if self.running == 0:
            self._idle_since = time.monotonic()
        if self._loop is not None:
            asyncio.ensure_future(self._notify())


def _rollouts(loop: Loop) -> Path:
    """The folder of the rollout's chunks (``OUT/rollouts``)."""
    return loop.out / "rollouts"


def _chunk_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("chunk-*") if p.is_dir())


def _committed(root: Path) -> int:
    """Episodes committed in all chunk folders under `root` (reads shard footers only)."""
    return TrajectoryStream(lambda: _chunk_folders(root)).available(StreamPosition())


class _Rollout:
    """The rollout thread: draws chunks as admission reaches them and plays them concurrently."""

    def __init__(self, loop: Loop, board: _Board, chunk: int):
        self.loop, self.board, self.chunk = loop, board, chunk
        self.root = _rollouts(loop)
        self.gate = _Gate(board, loop.settings.rollout.concurrency)
        board.listeners.append(self.gate.wake)
        self.thread = threading.Thread(target=self._main, name="webgym-async-rollout", daemon=True)

    def folders(self) -> list[Path]:
        return _chunk_folders(self.root)

    def committed(self) -> int:
        """Episodes committed in all chunk folders (reads shard footers only)."""
        return _committed(self.root)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the trainer thread, which stops the loop
            log.exception("the rollout failed")
            self.board.fail("the rollout", exc)

    async def _serve(self) -> None:
        self.gate.open()
        running: set[asyncio.Task] = set()
        k = 0
        while not self.board.stop:
            self.loop.services.check_policy()  # a dead policy server stops the run, not each episode
            started = self.loop.chunk_dir(k).with_name(f"chunk-{k:04d}-tasks.jsonl").is_file()
            # A chunk begun before a crash resumes at once; a new one when admission reaches it.
            if started or k * self.chunk < self.board.staleness.limit():
                running.add(asyncio.create_task(self._chunk(k)))
                k += 1
                continue
            done, running = await asyncio.wait(running, timeout=0.2, return_when=asyncio.FIRST_COMPLETED) \
                if running else (set(), running)
            for task in done:
                if not task.cancelled() and task.exception():
                    raise task.exception()  # type: ignore[misc]
            if not running:
                await asyncio.sleep(0.05)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _chunk(self, k: int) -> None:
        from webgym_rollout.runner import run  # lazy: the runner imports playwright

        loop, settings = self.loop, self.loop.settings
        out = loop.chunk_dir(k)
        tasks = draw_tasks(source=settings.tasks, split=settings.split, sampler=settings.sampler, index=k,
                           target=out.with_name(f"chunk-{k:04d}-tasks.jsonl"),
                           history=lambda: history_of((i, loop.chunk_dir(i)) for i in range(k)))
        marker = out / "policy-random"
        if settings.bootstrap_policy == "random" and (marker.exists() or (
                self.board.version == 0 and not (out / "manifest.json").exists())):
            out.mkdir(parents=True, exist_ok=True)
            marker.touch()  # a resumed chunk keeps the policy it started with
            policy: Any = bootstrap_policy(loop, settings.seed * 1000 + k)
        else:
            policy = VersionedPolicy(loop, lambda: self.board.version)
        run_config = run_settings(settings, loop.services, tasks=tasks, out=out, split=settings.split,
                                  index=k,
                                  shard_episodes=settings.async_loop.commit_every)
        await run(run_config, policy=policy, gate=self.gate, truth=loop.services.site_truth())


class _Evaluations:
    """Evaluations of due versions, one at a time on a thread of their own, beside the rollout and
    the trainer (`webgym_rl.loop.phases.evaluate`; done once its ``eval.json`` exists)."""

    def __init__(self, loop: Loop, board: _Board):
        self.loop, self.board = loop, board
        self._queue: queue.Queue[tuple[int, dict[str, list[int]]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.pending = 0
        """Evaluations submitted and not finished (guarded by the board's condition)."""

    def submit(self, version: int, train: dict[str, list[int]]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="webgym-async-eval", daemon=True)
            self._thread.start()
        with self.board.cond:
            self.pending += 1
        self._queue.put((version, train))

    def wait_idle(self, poll_s: float) -> float:
        """Block until no evaluation is queued or running (the next publish may then land); returns
        the seconds waited. Raises (`_Board.check`) when another thread failed meanwhile."""
        began = time.monotonic()
        with self.board.cond:
            while self.pending:
                self.board.check()
                self.board.cond.wait(timeout=poll_s)
        return time.monotonic() - began

    def join(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise LoopError(f"the evaluation failed: {self.error}") from self.error

    def _main(self) -> None:
        loop = self.loop
        while (item := self._queue.get()) is not None:
            version, train = item
            try:
                loop.emit(EvalStarted(version))
                policy = VersionedPolicy(loop, lambda: self.board.version,
                                         temperature=loop.settings.eval_temperature, pinned=version)
                record = asyncio.run(evaluate(loop, version, policy, train))
                loop.emit(EvalDone(version, record))
            except BaseException as exc:  # reported to the trainer thread, which stops the loop
                log.exception("the evaluation of v%d failed", version)
                self.error = exc
                self.board.fail(f"the evaluation of v{version}", exc)
                return
            with self.board.cond:
                self.pending -= 1
                self.board.cond.notify_all()


def _batch_size(loop: Loop) -> tuple[int, int]:
    """(episodes per chunk: one sampler batch x attempts, episodes per training round)."""
    settings = loop.settings
    tasks = TaskSampler(load_tasks(settings.tasks, split=settings.split), settings.sampler).batch(0)
    if not tasks:
        raise LoopSettingsError(f"{settings.tasks}: no '{settings.split}' task passes the sampler's filters")
    chunk = len(tasks) * settings.rollout.attempts
    size = settings.async_loop.batch_episodes or chunk
    group = _group(loop)
    if size % group:
        raise LoopSettingsError(
            f"--batch-episodes {size} is not a multiple of --attempts {group}: {settings.training.objective} "
            f"takes whole groups of attempts into a batch (use {size - size % group or group} or "
            f"{size - size % group + group})")
    return chunk, size


def _group(loop: Loop) -> int:
    """Attempts that make one group in a batch: --attempts for the objectives with group baselines
    (reinforce, grpo), 1 for filtered_bc (which takes episodes one by one, in commit order)."""
    settings = loop.settings
    grouped = Objective(settings.training.objective) is not Objective.FILTERED_BC
    return settings.rollout.attempts if grouped else 1


def _compose(loop: Loop, staleness: StalenessManager, taken: list[tuple[Path, Episode]], r: int
             ) -> BatchRecord:
    """Round `r`'s batch: the manifest of the `taken` episodes (with their chunk folders) less those
    staler than the bound (every objective; `staleness` counts each as accepted or rejected)."""
    settings = loop.settings
    filtered = Objective(settings.training.objective) is Objective.FILTERED_BC
    episodes = [episode for _, episode in taken]
    kept, dropped, members = [], [], []
    for folder, episode in taken:
        oldest = oldest_version(episode)
        version = r if oldest is None else oldest  # an episode without steps: as new as the trainer
        stale = staleness.too_stale(version, r)
        (staleness.reject if stale else staleness.accept)(version)
        (dropped if stale else kept).append(episode)
        if not stale:
            members.append([str(folder), episode.episode_id])
    samples = settings.training.samples
    histogram: Counter[int] = Counter()
    for episode in kept:
        trainable = episode.trainable and (not filtered or samples.imitates(episode.reward))
        for step in episode.steps if trainable else ():
            if not (step.same_as_next and samples.drop_same_as_next):
                histogram[r - step_version(step.policy_version)] += 1
    return BatchRecord(folder=str(_rollouts(loop)), members=members,
                       episodes=[e.episode_id for e in episodes],
                       dropped_stale=[e.episode_id for e in dropped],
                       staleness={str(k): v for k, v in sorted(histogram.items())},
                       successes_by_version=successes_by_version(episodes), composed_at=time.time())


def _take_batch(loop: Loop, stream: TrajectoryStream, board: _Board, size: int, r: int) -> BatchRecord:
    """Wait for the next `size` committed episodes past the recorded position (whole groups of
    attempts for reinforce and grpo) and make them round `r`'s batch, recorded (with the position
    after them) before anything trains on them."""
    state = loop.state
    position = StreamPosition.from_json(state.position)
    began = time.monotonic()
    while (taken := stream.take_from(size, position, group=_group(loop))) is None:
        loop.services.check_policy()
        with board.cond:
            board.check()
            board.cond.wait(timeout=loop.settings.async_loop.poll_s)
    episodes, after = taken
    batch = _compose(loop, board.staleness, episodes, r)
    batch.waited_s = time.monotonic() - began
    batch.position = state.position = after.to_json()
    state.rounds[r].batch = batch
    loop.save()  # from here on these episodes belong to this batch
    loop.emit(BatchReady(r, len(episodes), len(batch.dropped_stale), batch.waited_s))
    return batch


def _metrics(loop: Loop, gate: _Gate, waited: float, began: float) -> AsyncMetrics:
    """The figures so far: the staleness of every recorded batch, this process's clocks and counts."""
    state = loop.state
    elapsed = max(1e-9, time.monotonic() - began)
    staleness: Counter[int] = Counter()
    samples = episodes = 0
    for record in state.rounds.values():
        if record.batch is not None:
            staleness.update({int(k): v for k, v in record.batch.staleness.items()})
            episodes += len(record.batch.episodes)
        if record.train is not None:
            samples += record.train.samples
    trained = sum(staleness.values())
    return AsyncMetrics(
        versions_published=len(state.live_versions) - 1,
        staleness_histogram={str(k): v for k, v in sorted(staleness.items())},
        staleness_mean=sum(k * v for k, v in staleness.items()) / trained if trained else 0.0,
        staleness_max=max(staleness) if staleness else 0, rollout_idle_s=gate.idle_s, trainer_idle_s=waited,
        elapsed_s=elapsed, episodes_per_s=episodes / elapsed, samples_per_s=samples / elapsed,
        success_by_version={v: {"successes": s, "episodes": n, "rate": s / n if n else 0.0}
                            for v, (s, n) in train_points(state).items()},
        in_flight_max=gate.most, **_by_version(gate.board.staleness))


def _by_version(staleness: StalenessManager) -> dict[str, dict[str, int]]:
    """The manager's counts as `AsyncMetrics` fields (version keys as text, as JSON has them)."""
    counts = staleness.counts()
    return {f"episodes_{kind}": {str(v): n for v, n in getattr(counts, kind).items()}
            for kind in ("submitted", "accepted", "rejected")}


class _Scalars:
    """TensorBoard scalars under OUT/logs/async (nothing when tensorboard is not installed)."""

    def __init__(self, folder: Path, enabled: bool):
        self._writer = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional
                return
            self._writer = SummaryWriter(str(folder))

    def add(self, metrics: AsyncMetrics, version: int) -> None:
        if self._writer is not None:
            for name in ("staleness_mean", "staleness_max", "rollout_idle_s", "trainer_idle_s",
                         "episodes_per_s", "samples_per_s"):
                self._writer.add_scalar(f"async/{name}", getattr(metrics, name), version)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _staleness_manager(loop: Loop, size: int) -> StalenessManager:
    """The run's staleness bound: `size` episodes a round, as many as every round's batch needs plus
    the over-provision in all; the episodes committed before this process count as begun."""
    settings = loop.settings
    bound, extra = settings.async_loop.max_staleness, settings.async_loop.overprovision
    return StalenessManager(bound, size, overprovision=extra, total=settings.iterations * size + extra,
                            version=loop.state.version.version, submitted=_committed(_rollouts(loop)))


def run_async(loop: Loop) -> None:
    """Run (or resume) the asynchronous schedule until ``settings.iterations`` versions are trained."""
    settings, state = loop.settings, loop.state
    chunk, size = _batch_size(loop)
    first = supersede(loop)
    evaluations_left = [v for v in range(1, first + 1) if evaluation_due(loop, v)
                        and finished_evaluation(loop, v) is None]
    if first >= settings.iterations and not evaluations_left:
        return
    with running_trainer(loop):
        board = _Board(_staleness_manager(loop, size))
        rollout = _Rollout(loop, board, chunk)
        stream = TrajectoryStream(rollout.folders)
        evaluations = _Evaluations(loop, board)
        scalars = _Scalars(loop.out / "logs" / "async", settings.training.log_with == "tensorboard")
        began, waited = time.monotonic(), 0.0
        loop.emit(RolloutStarted(board.version, size, settings.async_loop.max_staleness,
                                 settings.async_loop.overprovision, loop.services.base_url))
        rollout.thread.start()
        for version in evaluations_left:  # due before a crash: evaluated now, if still serving
            if version != board.version:
                log.warning("the evaluation of v%d cannot be made: v%d serves now, and no step of v%d's "
                            "evaluation may be answered by another version", version, board.version, version)
                continue
            evaluations.submit(version, train_points(state))
        try:
            for r in range(first, settings.iterations):
                record = state.round(r)

                # 1. The round's batch: the first committed episodes past the recorded position.
                if record.batch is None:
                    record.batch = loop.phase(r, "batch",
                                              lambda r=r: _take_batch(loop, stream, board, size, r))
                    waited += record.batch.waited_s
                else:
                    loop.emit(PhaseSkipped(r, "batch"))

                # 2. Train on the last K rounds' batches; publish version r + 1 while episodes run,
                # once the evaluation of the version serving has finished (so v's figure is v's),
                # fenced where the endpoint does not stamp its replies (so each step's version is true).
                record.train = loop.phase(r, "train", lambda r=r: train_round(loop, r))
                held = evaluations.wait_idle(settings.async_loop.poll_s)
                if held > 1.0:
                    log.info("round %d: the publish of v%d waited %.1f s for an evaluation", r, r + 1, held)
                with loop.fence.publish():
                    version = loop.phase(r, "publish", lambda r=r: publish(loop, r))
                    board.publish(version.version)
                if checkpoint_due(loop, r, last=r == settings.iterations - 1):
                    write_checkpoint(loop, r)
                state.metrics = _metrics(loop, rollout.gate, waited, began)
                loop.done(r, "train", record.train)  # its summary holds the on-policy check per version
                scalars.add(state.metrics, version.version)
                loop.emit(VersionPublished(version.version, version.path, version.publish_s, state.metrics))

                # 3. Evaluate it beside the next rounds.
                if evaluation_due(loop, version.version):
                    evaluations.submit(version.version, train_points(state))
                board.check()
            # Training is done: the rollout stops (unfinished episodes are cancelled); the
            # evaluations still due finish.
            board.finish()
            rollout.thread.join(timeout=120)
            evaluations.join()
        finally:
            board.finish()
            rollout.thread.join(timeout=120)
            scalars.close()
        for version in range(1, settings.iterations + 1):
            found = finished_evaluation(loop, version) if evaluation_due(loop, version) else None
            if found is not None:
                state.round(version - 1).eval = found
        state.cancelled += max(0, board.staleness.submitted - rollout.committed())
        state.metrics = _metrics(loop, rollout.gate, waited, began)
        loop.save()
