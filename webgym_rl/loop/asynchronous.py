"""``webgym-rl loop --mode async``: rollouts and training at the same time, bounded by staleness.

Two workers share the loop folder:

- the rollout (a thread with its own event loop) plays task batches ("chunks", drawn by the train
  sampler, one per chunk index) with `webgym_rollout.runner.run`, each into its own trajectory
  folder ``OUT/rollouts/chunk-XXXX``, several chunks at once, committing every finished episode
  (one shard per ``--commit-every`` episodes). The policy endpoint is never stopped: each step
  records the version of the weights that produced it (`Step.policy_version`, ``v<N>``) and the
  reply's token log-probabilities. **Admission**: a chunk starts only while the episodes started in
  total stay within ``(trainer_version + max_staleness + 1) * batch_episodes`` (and within what the
  run needs), so the rollout slows down instead of producing episodes that would be too stale.
- the trainer (this thread) takes the next ``batch_episodes`` committed episodes as soon as they
  are there (`webgym_rl.stream.TrajectoryStream`: each committed episode once, no shard read
  twice), trains the newest checkpoint on them (`webgym_rl.train`, in a child process by default:
  ``--train-process``), publishes it as version
  V+1 (``OUT/checkpoints/v-XXXX``, atomically) and switches the endpoint to it through a
  `webgym_rl.updater.PolicyUpdater` while episodes keep running.

**LoRA** (``--lora``): the run trains one adapter of the starting model throughout: the first round
makes it, each later round trains the newest version's adapter on (never a new adapter on a merged
checkpoint). Version V+1 is published twice: its adapter, ``OUT/adapters/v-XXXX`` (what
``--policy-updater vllm_lora`` loads into a vLLM serving the starting model), and the adapter merged
into the starting model's weights, ``OUT/checkpoints/v-XXXX`` (what the CPU policy server, the
evaluations and the model card use). A round with nothing to train on keeps both.

**Staleness** of an episode trained at trainer version V: V minus the version of its oldest step
(the random bootstrap and replies that name no version count as version 0). filtered_bc drops
episodes staler than ``max_staleness`` (they are recorded as dropped); reinforce keeps them and
corrects every sample with truncated importance weights from the stored behaviour log-probabilities
(`webgym_rl.objectives.importance_weights`, ``--importance-clip``). Both are counted.

**Resume**: everything is recorded in ``OUT/loop_state.json`` under ``"async"``: the published
versions, and for each training batch its episodes and the stream position after it, written
before training starts. A rerun of the same command after a crash (even SIGKILL) resumes the
chunks' trajectory folders (nothing committed is lost or played twice), rebuilds an unrecorded
batch from the recorded position (so no episode is trained twice), resumes the trainer from its
last complete checkpoint, and continues the version numbering (and a LoRA run its adapter) from
the last published version.

**Evaluation** (``--eval-every M``): after each version V with ``V % M == 0`` is published, the
evaluation tasks are played at ``--eval-temperature`` on a thread of their own while the rollout
and the trainer go on (``OUT/evals/v-XXXX``: trajectories, report, ``eval.json``; the learning
curve ``OUT/learning_curve.png``); their episodes are never trained on (see `_Evaluations`). A
rerun finishes an evaluation a crash interrupted.

**Metrics** (``loop_state.json`` ``async.metrics``, TensorBoard scalars under ``OUT/logs/async``,
and the ``on_event`` progress line of each published version): versions published, the staleness
histogram of trained samples (mean, max), rollout idle time (no chunk running), trainer idle time
(waiting for a batch), episodes and samples per second, success per policy version. The clocks
(idle times, rates) cover the current process: a resumed run starts them again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webgym_core.settings import settings_to_dict
from webgym_rl.errors import LoopError, LoopSettingsError, LoopStateError, NoTrainingDataError
from webgym_rl.loop_state import STATE_FILE, save_state
from webgym_rl.stream import StreamPosition, TrajectoryStream
from webgym_rl.updater import version_of

if TYPE_CHECKING:
    from webgym_rl.loop import LoopSettings
    from webgym_rl.services import LoopServices
    from webgym_rl.updater import PolicyUpdater
    from webgym_rollout.trajectory import Episode

__all__ = ["AsyncSettings", "episode_staleness", "run_async_loop", "step_version"]

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class AsyncSettings:
    """The asynchronous loop (``--mode async``): staleness bound and batching."""

    max_staleness: int = 1
    """Most versions an episode's oldest step may lag behind the trainer (0 = on-policy only)."""
    batch_episodes: int = 0
    """Committed episodes per training round (0 = one task batch: the sampler's batch x attempts)."""
    commit_every: int = 1
    """Episodes per trajectory shard in async mode: the trainer sees an episode once its shard is
    committed."""
    poll_s: float = 0.2
    """How often the trainer looks for newly committed shards while it waits."""
    train_process: bool = True
    """Train in a child process that serves the whole run (imports paid once): in this process the
    trainer would share Python's GIL with the rollout thread, and both would slow down. (With
    --train-launcher, each version trains under the launcher instead.)"""

    def __post_init__(self) -> None:
        for name in ("max_staleness", "batch_episodes"):
            if getattr(self, name) < 0:
                raise LoopSettingsError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.commit_every < 1:
            raise LoopSettingsError(f"commit_every: must be >= 1, got {self.commit_every}")
        if not self.poll_s > 0:
            raise LoopSettingsError(f"poll_s: must be > 0, got {self.poll_s}")


def step_version(policy_version: str) -> int:
    """The version of a step's policy (0 for the random bootstrap and replies naming none)."""
    found = version_of(policy_version)
    return 0 if found is None else found


def episode_staleness(episode: Episode, trainer_version: int) -> int:
    """Versions between the trainer and the episode's oldest step (0 for an episode without steps)."""
    versions = [step_version(step.policy_version) for step in episode.steps]
    return max(0, trainer_version - min(versions)) if versions else 0


# ---------------------------------------------------------------------------------------- the board

class _Board:
    """What the trainer and the rollout thread share: the published version, the admission rule,
    the stop flag and the idle clocks."""

    def __init__(self, version: int, limit: Callable[[int], int]):
        self.version = version
        self._limit = limit
        self.cond = threading.Condition()
        self.stop = False
        self.error: BaseException | None = None
        self.failed = ""
        """What failed (``the rollout``, ``the evaluation of v3``) when `error` is set."""
        self.rollout_idle_s = 0.0
        self.trainer_idle_s = 0.0

    def admitted(self) -> int:
        """Episodes the rollout may have started in total now."""
        with self.cond:
            return self._limit(self.version)

    def publish(self, version: int) -> None:
        with self.cond:
            self.version = version
            self.cond.notify_all()

    def fail(self, what: str, error: BaseException) -> None:
        """Another thread failed: the trainer stops the loop when it next waits."""
        with self.cond:
            self.failed, self.error = what, error
            self.cond.notify_all()

    def finish(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()


class _VersionedPolicy:
    """The rollout's policy: asks the endpoint for the newest published version (the model name the
    updater gives it) and makes sure every step names the version that produced it."""

    observes_elements = False

    def __init__(self, settings: LoopSettings, base_url: str, updater: PolicyUpdater, board: _Board, *,
                 temperature: float | None = None, pinned: int | None = None):
        self._settings, self._base_url, self._updater, self._board = settings, base_url, updater, board
        self._temperature, self._pinned = temperature, pinned
        self._policies: dict[int, Any] = {}
        self.model_id = settings.policy.served_name

    def _policy(self, version: int) -> Any:
        from webgym_rollout.policy import OpenAIPolicy

        if version not in self._policies:
            endpoint = self._settings.policy
            sampling = endpoint.sampling if self._temperature is None else dataclasses.replace(
                endpoint.sampling, temperature=self._temperature)
            self._policies[version] = OpenAIPolicy(
                dataclasses.replace(endpoint.endpoint, base_url=self._base_url,
                                    model=self._updater.model_name(version)),
                sampling=sampling, agent=endpoint.agent)
        return self._policies[version]

    async def act(self, observation: Any) -> Any:
        # An evaluation asks for its version by name where the endpoint serves several (LoRA
        # adapters); elsewhere it gets what the endpoint serves now, and the step says which.
        version = self._board.version
        output = await self._policy(version if self._pinned is None else self._pinned).act(observation)
        if self._updater.stamps_versions or version_of(output.policy_version) is None:
            output = dataclasses.replace(output, policy_version=f"v{version}")
        return output

    async def close(self) -> None:
        for policy in self._policies.values():
            await policy.close()


# -------------------------------------------------------------------------------------- the rollout

class _Rollout:
    """The rollout thread: starts chunks as the admission rule allows, plays them concurrently."""

    def __init__(self, settings: LoopSettings, services: LoopServices, board: _Board, base_url: str,
                 updater: PolicyUpdater, chunk_size: int, needed: int, emit: Emit):
        self.settings, self.services, self.board = settings, services, board
        self.base_url, self.updater = base_url, updater
        self.chunk_size, self.needed, self.emit = chunk_size, needed, emit
        self.root = settings.out_dir / "rollouts"
        self.thread = threading.Thread(target=self._main, name="webgym-async-rollout", daemon=True)
        self.committed_at: list[float] = []

    def folders(self) -> list[Path]:
        return sorted(p for p in self.root.glob("chunk-*") if p.is_dir())

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the trainer thread, which stops the loop
            log.exception("the rollout failed")
            self.board.fail("the rollout", exc)

    async def _serve(self) -> None:
        from webgym_rl.loop import _task_batch

        settings = self.settings
        started = [p for p in sorted(self.root.glob("chunk-*-tasks.jsonl"))]
        running: set[asyncio.Task] = set()
        # Chunks begun before a crash resume first (their folders skip what they committed).
        for k, tasks in enumerate(started):
            running.add(asyncio.create_task(self._chunk(k, tasks, resumed=True)))
        k = len(started)
        idle_since: float | None = None
        while not self.board.stop:
            admitted = min(self.board.admitted(), self.needed)
            if (k + 1) * self.chunk_size <= admitted:
                tasks = _task_batch(settings, source=settings.tasks, split=settings.split,
                                    sampler=settings.sampler, iteration=k,
                                    target=self.root / f"chunk-{k:04d}-tasks.jsonl")
                running.add(asyncio.create_task(self._chunk(k, tasks, resumed=False)))
                self.emit("chunk_started", {"chunk": k, "version": self.board.version})
                k += 1
                continue
            running = {t for t in running if not t.done()}
            for task in list(running):
                if task.done() and task.exception():
                    raise task.exception()  # type: ignore[misc]
            now = time.monotonic()
            if not running:
                idle_since = idle_since or now
            elif idle_since is not None:
                self.board.rollout_idle_s += now - idle_since
                idle_since = None
            if running:
                done, _ = await asyncio.wait(running, timeout=0.2, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception():
                        raise task.exception()  # type: ignore[misc]
            else:
                await asyncio.sleep(0.05)
        if idle_since is not None:
            self.board.rollout_idle_s += time.monotonic() - idle_since
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _chunk(self, k: int, tasks: Path, *, resumed: bool) -> None:
        from webgym_rollout.policy import PolicySettings, RandomPolicySettings, make_policy
        from webgym_rollout.runner import RunSettings, run

        settings = self.settings
        env = settings.env
        if not env.sites_url:
            env = dataclasses.replace(env, sites_url=self.services.sites_url())
        out = self.root / f"chunk-{k:04d}"
        bootstrap = settings.bootstrap_policy == "random" and (
            (out / "policy-random").exists() or (not resumed and self.board.version == 0))
        if bootstrap:
            out.mkdir(parents=True, exist_ok=True)
            (out / "policy-random").touch()  # a resumed chunk keeps the policy it started with
            seed = RandomPolicySettings(seed=settings.seed * 1000 + k)
            policy: Any = make_policy(PolicySettings(kind="random", agent=settings.policy.agent, random=seed))
        else:
            policy = _VersionedPolicy(settings, self.base_url, self.updater, self.board)
        rollout = dataclasses.replace(settings.rollout, mode="async",
                                      shard_episodes=settings.async_loop.commit_every)
        run_settings = RunSettings(
            tasks=tasks, servers=self.services.browser_urls(), out=out,  # type: ignore[arg-type]
            split=settings.split, resume=True, iteration=k, browser_token=settings.browser_token,
            fleet=settings.fleet, progress=False, rollout=rollout,
            env=env, judge=settings.judge, policy=PolicySettings(agent=settings.policy.agent))
        report = await run(run_settings, policy=policy)
        self.emit("chunk_done", {"chunk": k, "episodes": report.episodes, "successes": report.successes})


# ---------------------------------------------------------------------------------- the evaluations

class _Evaluations:
    """Evaluations of published versions on their own schedule: after version V is published with
    ``V % eval_every == 0``, the evaluation tasks (``--eval-sampler*``) are played at
    ``--eval-temperature`` into ``OUT/evals/v-XXXX/trajectories``, one evaluation at a time on a
    thread of its own, while the rollout and the trainer go on. Their episodes are never trained on
    (the trainer's stream reads ``OUT/rollouts`` only). Each writes its report (``OUT/evals/v-XXXX/
    report``), the learning curve so far (``OUT/learning_curve.png``: train success per policy
    version, test success per evaluated version) and its record, ``OUT/evals/v-XXXX/eval.json``
    (the evaluation is done once that file exists; the trainer copies it into the loop state).

    The endpoint serves one version at a time (except LoRA adapters, asked for by name): a step of
    an evaluation played after the next publish is answered by the newer version. Each step records
    the version that answered it, and the record counts them (``step_versions``)."""

    def __init__(self, settings: LoopSettings, services: LoopServices, emit: Emit):
        import queue

        self.settings, self.services, self.emit = settings, services, emit
        self.board: _Board | None = None
        self.base_url, self.updater = "", None
        self.root = settings.out_dir / "evals"
        self._queue: queue.Queue[tuple[int, dict[str, list[int]]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def connect(self, board: _Board, base_url: str, updater: PolicyUpdater) -> None:
        """The endpoint to evaluate through, and where to report a failure (before `submit`)."""
        self.board, self.base_url, self.updater = board, base_url, updater

    def unfinished(self, published: int) -> list[int]:
        """The versions up to `published` whose evaluation is due and not finished."""
        return [v for v in range(1, published + 1) if self.due(v) and self.done(v) is None]

    def due(self, version: int) -> bool:
        every = self.settings.eval_every
        return bool(every) and version > 0 and version % every == 0

    def folder(self, version: int) -> Path:
        return self.root / f"v-{version:04d}"

    def done(self, version: int) -> dict[str, Any] | None:
        """The record of the finished evaluation of `version` (None: not finished)."""
        import json

        path = self.folder(version) / "eval.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def submit(self, version: int, train_success: dict[str, list[int]]) -> None:
        """Evaluate `version` once the evaluations before it are done; `train_success`: per policy
        version, [successes, judged episodes] of the trained episodes so far (the train curve)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="webgym-async-eval", daemon=True)
            self._thread.start()
        self._queue.put((version, train_success))

    def join(self, timeout: float | None = None) -> None:
        """Wait until every submitted evaluation is finished."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=timeout)
            self._thread = None

    def _main(self) -> None:
        while (item := self._queue.get()) is not None:
            version, train_success = item
            try:
                asyncio.run(self._evaluate(version, train_success))
            except BaseException as exc:  # reported to the trainer thread, which stops the loop
                log.exception("the evaluation of v%d failed", version)
                assert self.board is not None
                self.error = exc
                self.board.fail(f"the evaluation of v{version}", exc)
                return

    async def _evaluate(self, version: int, train_success: dict[str, list[int]]) -> None:
        from webgym_core.files import write_json_atomic
        from webgym_rl.loop import _task_batch
        from webgym_rollout.policy import PolicySettings
        from webgym_rollout.runner import RunSettings, run

        settings = self.settings
        folder = self.folder(version)
        tasks = _task_batch(settings, source=settings.eval_tasks or settings.tasks, split=settings.eval_split,
                            sampler=settings.eval_sampler, iteration=version, target=folder / "tasks.jsonl")
        env = settings.env
        if not env.sites_url:
            env = dataclasses.replace(env, sites_url=self.services.sites_url())
        assert self.board is not None and self.updater is not None
        policy = _VersionedPolicy(settings, self.base_url, self.updater, self.board,
                                  temperature=settings.eval_temperature, pinned=version)
        started = time.time()
        self.emit("eval_started", {"version": version})
        run_settings = RunSettings(
            tasks=tasks, servers=self.services.browser_urls(), out=folder / "trajectories",  # type: ignore[arg-type]
            split=settings.eval_split, horizon_table=settings.eval_horizons,
            resume=True, iteration=version, browser_token=settings.browser_token, progress=False,
            fleet=settings.fleet,
            rollout=dataclasses.replace(settings.rollout, mode="async"), env=env, judge=settings.judge,
            policy=PolicySettings(agent=settings.policy.agent))
        await run(run_settings, policy=policy)  # closes the policy
        record = {"version": version, "started_at": started, "done_at": time.time(),
                  **self._report(version, folder / "trajectories", train_success)}
        write_json_atomic(folder / "eval.json", record)
        self.emit("eval_done", record)

    def _report(self, version: int, trajectories: Path,
                train_success: dict[str, list[int]]) -> dict[str, Any]:
        from webgym_rollout.charts import CurvePoint, write_learning_curve
        from webgym_rollout.report import build_report, write_report
        from webgym_rollout.trajectory import read_episodes

        settings = self.settings
        report = build_report([trajectories], settings.report, labels=[f"v{version}"])
        overall = report.runs[0].overall
        confidence = settings.report.confidence
        points = [CurvePoint.from_counts(int(v), "train", won, judged, confidence)
                  for v, (won, judged) in train_success.items() if judged]
        for earlier in range(1, version):
            found = self.done(earlier) if self.due(earlier) else None
            if found and found["evaluated"][1]:
                points.append(CurvePoint.from_counts(earlier, "test", *found["evaluated"], confidence))
        if overall.trials:
            points.append(CurvePoint.from_counts(version, "test", overall.successes, overall.trials,
                                                 confidence))
        curve = settings.out_dir / "learning_curve.png"
        if points:
            write_learning_curve(points, curve,
                                 title=f"{settings.out_dir.name}: success rate by policy version",
                                 x_label="policy version")
        page = write_report(report, self.folder(version) / "report", learning_curve=points or None)
        versions = Counter(f"v{step_version(step.policy_version)}"
                           for episode in read_episodes(trajectories) for step in episode.steps)
        run = report.runs[0]
        return {"out": str(trajectories), "episodes": run.episodes, "errors": run.errors,
                "evaluated": [overall.successes, overall.trials],
                "success_rate": overall.successes / overall.trials if overall.trials else 0.0,
                "success_low": overall.low, "success_high": overall.high, "report": str(page),
                "learning_curve": str(curve) if points else None,
                "step_versions": dict(sorted(versions.items()))}


# -------------------------------------------------------------------------------------- the trainer

def _chunk_size(settings: LoopSettings) -> int:
    from webgym_data.loading import load_tasks
    from webgym_rollout.sampler import TaskSampler

    tasks = TaskSampler(load_tasks(settings.tasks, split=settings.split), settings.sampler).batch(0)
    if not tasks:
        raise LoopSettingsError(f"{settings.tasks}: no '{settings.split}' task passes the sampler's filters")
    return len(tasks) * settings.rollout.attempts


def _trainable(episode: Episode, settings: LoopSettings) -> bool:
    """Would the objective train on this episode's steps (for the staleness histogram)?"""
    from webgym_rl.samples import Objective

    if episode.split == "test" or episode.status.is_error:
        return False
    if Objective(settings.training.objective) is Objective.FILTERED_BC:
        return episode.reward >= settings.training.samples.success_threshold
    return True


def _compose(settings: LoopSettings, episodes: list[Episode], version: int, folder: Path) -> dict[str, Any]:
    """Write the episodes batch `version` trains on to `folder`, dropping (filtered_bc) those staler
    than the bound; returns the batch's record."""
    from webgym_rl.samples import Objective
    from webgym_rollout.dataset import TrajectoryWriter

    bound = settings.async_loop.max_staleness
    drop_stale = Objective(settings.training.objective) is Objective.FILTERED_BC
    kept, dropped = [], []
    for episode in episodes:
        (dropped if drop_stale and episode_staleness(episode, version) > bound else kept).append(episode)
    shutil.rmtree(folder, ignore_errors=True)  # a batch never recorded: built again from scratch
    with TrajectoryWriter(folder, max_shard_episodes=max(1, len(kept)),
                          run_info={"async_batch": version}) as writer:
        # One training iteration; the attempt numbers only keep the writer's (task, attempt) keys
        # apart when two chunks drew the same task.
        for i, episode in enumerate(kept):
            writer.add(dataclasses.replace(episode, iteration=version, attempt=i))
    histogram: Counter[int] = Counter()
    for episode in kept:
        if _trainable(episode, settings):
            for step in episode.steps:
                if not (step.same_as_next and settings.training.samples.drop_same_as_next):
                    histogram[version - step_version(step.policy_version)] += 1
    return {"folder": str(folder), "episodes": [e.episode_id for e in episodes],
            "dropped_stale": [e.episode_id for e in dropped],
            "staleness": {str(k): v for k, v in sorted(histogram.items())},
            "successes_by_version": _successes(episodes)}


def _successes(episodes: list[Episode]) -> dict[str, list[int]]:
    """Per policy version (of each episode's first step): [successes, judged episodes]."""
    found: dict[str, list[int]] = {}
    for episode in episodes:
        if episode.status.is_error or not episode.steps:
            continue
        entry = found.setdefault(str(step_version(episode.steps[0].policy_version)), [0, 0])
        entry[0] += int(episode.success)
        entry[1] += 1
    return found


class _TrainerProcess:
    """A child process that trains one batch per request: ``python -c ...`` running `_trainer_main`,
    which reads the path of a TrainSettings YAML per stdin line and answers one JSON line on stdout
    (the checkpoint, or the error). It dies with the loop (``PR_SET_PDEATHSIG``)."""

    def __init__(self) -> None:
        self._popen: Any = None

    def start(self) -> None:
        """Start the child (its imports then overlap the first batch's rollout)."""
        import subprocess
        import sys

        from webgym_rl.services import _die_with_parent

        if self._popen is None or self._popen.poll() is not None:
            self._popen = subprocess.Popen(
                [sys.executable, "-c", "from webgym_rl.async_loop import _trainer_main; _trainer_main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)

    def train(self, train_settings: Any) -> Path:
        import json

        import yaml

        from webgym_core.files import write_atomic

        self.start()
        config = train_settings.out_dir.parent / "train-settings.yaml"
        write_atomic(config, yaml.safe_dump(settings_to_dict(train_settings), sort_keys=False))
        self._popen.stdin.write(f"{config}\n")
        self._popen.stdin.flush()
        line = self._popen.stdout.readline()
        if not line:
            status = self._popen.wait()
            raise LoopError(f"the trainer process exited with status {status} while training {config}")
        reply = json.loads(line)
        if "error" in reply:
            error = NoTrainingDataError if reply["kind"] == "NoTrainingDataError" else LoopError
            raise error(reply["error"])
        return Path(reply["checkpoint"])

    def close(self) -> None:
        import subprocess

        if self._popen is not None:
            self._popen.stdin.close()  # the child's loop ends
            try:
                self._popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
            self._popen = None


def _trainer_main() -> None:
    """The trainer process (`_TrainerProcess`): one training per stdin line, one reply per line."""
    import contextlib
    import json
    import sys

    import accelerate  # noqa: F401 - imported now, while the loop waits for the first batch
    import transformers  # noqa: F401

    from webgym_core.settings import load_settings
    from webgym_rl.train import TrainSettings, train

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    replies = sys.stdout
    for line in sys.stdin:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the replies only
                checkpoint = train(load_settings(TrainSettings, line.strip(), {})).checkpoint
            reply: dict[str, Any] = {"checkpoint": str(checkpoint)}
        except Exception as exc:  # reported to the loop, which decides (no data: keep the version)
            reply = {"error": f"{exc}", "kind": type(exc).__name__}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()



def _starting_point(settings: LoopSettings, published: dict[str, Any]) -> tuple[str, str | None]:
    """What the training round after the `published` version starts from, and its Hub revision. A
    full fine-tune trains the published checkpoint on; a LoRA run trains the published adapter on
    (the starting model for the first round), so each version's adapter adapts the starting model."""
    if settings.training.lora:
        return published.get("adapter") or settings.model, settings.model_revision
    checkpoint = published["checkpoint"]
    return checkpoint, settings.model_revision if checkpoint == settings.model else None


def _train_batch(settings: LoopSettings, published: dict[str, Any], data: Path,
                 trainer: _TrainerProcess) -> dict[str, Any]:
    """Train the `published` version on the batch folder `data`; returns the trainer's final
    checkpoint and record."""
    import json

    from webgym_rl.loop import _train_launched
    from webgym_rl.train import STATE_FILE as TRAINER_STATE
    from webgym_rl.train import TrainSettings, complete_checkpoints, train

    version = published["version"]
    out = settings.out_dir / "train" / f"batch-{version:04d}" / "trainer"
    # The batch is the data: no "last K iterations" window inside it.
    samples = dataclasses.replace(settings.training.samples, last_k_iterations=0)
    training = dataclasses.replace(settings.training, samples=samples)
    model, revision = _starting_point(settings, published)
    train_settings = TrainSettings(model=model, model_revision=revision, data=[str(data)], out=str(out),
                                   resume=bool(complete_checkpoints(out)),
                                   seed=settings.seed * 1000 + version, training=training)
    if settings.train_launcher:
        checkpoint, trainer_state = _train_launched(settings, train_settings)
    elif settings.async_loop.train_process:
        checkpoint = trainer.train(train_settings)
        trainer_state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    else:
        checkpoint = train(train_settings).checkpoint
        trainer_state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    losses = [entry["loss"] for entry in trainer_state.get("log_history", [])]
    counts = trainer_state.get("counts", {})
    return {"trainer_checkpoint": str(checkpoint), "steps": trainer_state["step"], "counts": counts,
            "samples": int(counts.get("steps_kept", 0)),
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}


def _publish(settings: LoopSettings, version: int, trainer_checkpoint: str) -> dict[str, Any]:
    """Publish the trainer's final checkpoint as `version`: ``checkpoint`` (full weights,
    OUT/checkpoints/v-XXXX) and, in a LoRA run, ``adapter`` (OUT/adapters/v-XXXX, merged into the
    starting model for the checkpoint). Each folder is written atomically; one that a crash left
    published is kept."""
    from webgym_rl.loop import _publish_checkpoint
    from webgym_rl.merge import merge_adapter

    name = f"v-{version:04d}"
    target = settings.out_dir / "checkpoints" / name
    adapter = settings.out_dir / "adapters" / name if settings.training.lora else None
    if adapter is not None and not adapter.is_dir():
        _publish_checkpoint(Path(trainer_checkpoint), adapter)
    if not target.is_dir():
        if adapter is not None:
            merge_adapter(adapter, target, base=settings.model, revision=settings.model_revision)
        else:
            _publish_checkpoint(Path(trainer_checkpoint), target)
    return {"checkpoint": str(target), "adapter": str(adapter) if adapter else None}


def _serve(updater: PolicyUpdater, published: dict[str, Any]) -> None:
    """Switch the endpoint to the `published` version: its adapter where the updater loads adapters
    (None: the version is the starting model itself), else its checkpoint."""
    weights = published.get("adapter") if updater.loads_adapters else published["checkpoint"]
    updater.update(weights, published["version"])


def _check_adapters(settings: LoopSettings, versions: list[dict[str, Any]]) -> None:
    """A LoRA run trains one adapter of the starting model throughout: each published version has
    its adapter, or is the starting model itself (no training yet)."""
    for published in versions[1:]:
        if published.get("adapter") is None and published["checkpoint"] != settings.model:
            raise LoopStateError(
                f"{settings.out_dir / STATE_FILE}: version {published['version']} was published "
                f"without a LoRA adapter ({published['checkpoint']}), so --lora cannot train one adapter "
                "of --model on from it: rerun without --lora, or choose a new --out folder")


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

    def add(self, values: dict[str, float], step: int) -> None:
        if self._writer is not None:
            for name, value in values.items():
                self._writer.add_scalar(name, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _metrics(record: dict[str, Any], board: _Board, began: float, episodes: int) -> dict[str, Any]:
    elapsed = max(1e-9, time.monotonic() - began)
    staleness: Counter[int] = Counter()
    samples = 0
    for batch in record["batches"].values():
        staleness.update({int(k): v for k, v in batch.get("staleness", {}).items()})
        samples += int(batch.get("train", {}).get("samples", 0))
    trained = sum(staleness.values())
    return {"versions_published": len(record["versions"]) - 1,
            "staleness_histogram": {str(k): v for k, v in sorted(staleness.items())},
            "staleness_mean": sum(k * v for k, v in staleness.items()) / trained if trained else 0.0,
            "staleness_max": max(staleness) if staleness else 0,
            "rollout_idle_s": board.rollout_idle_s, "trainer_idle_s": board.trainer_idle_s,
            "elapsed_s": elapsed, "episodes_per_s": episodes / elapsed, "samples_per_s": samples / elapsed,
            "success_by_version": {v: {"successes": s, "episodes": n, "rate": s / n if n else 0.0}
                                   for v, (s, n) in _train_success(record).items()}}


def _train_success(record: dict[str, Any]) -> dict[str, list[int]]:
    """Per policy version: [successes, judged episodes] of the episodes handed to the trainer."""
    found: dict[str, list[int]] = {}
    for batch in record["batches"].values():
        for version, (won, judged) in batch.get("successes_by_version", {}).items():
            entry = found.setdefault(version, [0, 0])
            entry[0], entry[1] = entry[0] + won, entry[1] + judged
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


def _collect_evaluations(record: dict[str, Any], evaluations: _Evaluations) -> None:
    """Copy the finished evaluations' records into the loop state's ``async.evals``."""
    record.setdefault("evals", {})
    for entry in record["versions"][1:]:
        version = entry["version"]
        if evaluations.due(version) and str(version) not in record["evals"]:
            found = evaluations.done(version)
            if found is not None:
                record["evals"][str(version)] = found


def _episodes(record: dict[str, Any]) -> int:
    """Episodes handed to the trainer so far."""
    return sum(len(batch["episodes"]) for batch in record["batches"].values())


def run_async_loop(settings: LoopSettings, services: LoopServices, state: dict[str, Any],
                   emit: Emit) -> dict[str, Any]:
    """Run (or resume) the asynchronous loop until `settings.iterations` versions are published
    (see the module docstring); returns the ``async`` record of the state."""
    record = state.setdefault("async", {"versions": [{"version": 0, "checkpoint": settings.model}],
                                        "position": {}, "batches": {}})
    chunk = _chunk_size(settings)
    size = settings.async_loop.batch_episodes or chunk
    bound = settings.async_loop.max_staleness
    target = settings.iterations
    version = len(record["versions"]) - 1
    published = record["versions"][-1]
    if settings.training.lora:
        _check_adapters(settings, record["versions"])
    evaluations = _Evaluations(settings, services, emit)
    _collect_evaluations(record, evaluations)
    save_state(settings, state)
    if version >= target and not evaluations.unfinished(version):
        return record

    base_url, _ = services.start_policy(published["checkpoint"])
    updater = services.updater()
    if version > 0:
        _serve(updater, published)  # a resumed run: the endpoint starts as v0, name the version
    board = _Board(version, lambda v: (v + bound + 1) * size)
    # Episodes the run needs: every batch up to the last version (a later rerun adds more chunks).
    needed = -(-target * size // chunk) * chunk
    rollout = _Rollout(settings, services, board, base_url, updater, chunk, needed, emit)
    evaluations.connect(board, base_url, updater)
    stream = TrajectoryStream(rollout.folders)
    trainer = _TrainerProcess()
    scalars = _Scalars(settings.out_dir / "logs" / "async", settings.training.log_with == "tensorboard")
    began = time.monotonic()
    emit("async_started", {"version": version, "batch_episodes": size, "chunk_episodes": chunk,
                           "max_staleness": bound, "policy_pid": services.policy_pid, "base_url": base_url})
    rollout.thread.start()
    for earlier in evaluations.unfinished(version):  # due before a crash: evaluated now (resumed)
        evaluations.submit(earlier, _train_success(record))
    try:
        if settings.async_loop.train_process and not settings.train_launcher and version < target:
            trainer.start()
        while version < target:
            key = str(version)
            folder = settings.out_dir / "train" / f"batch-{version:04d}" / "trajectories"
            if key not in record["batches"]:
                position = StreamPosition.from_json(record["position"])
                waited = time.monotonic()
                while (taken := stream.take(size, position)) is None:
                    with board.cond:
                        if board.error is not None:
                            raise LoopError(f"{board.failed} failed: {board.error}") from board.error
                        board.cond.wait(timeout=settings.async_loop.poll_s)
                board.trainer_idle_s += time.monotonic() - waited
                episodes, after = taken
                batch = _compose(settings, episodes, version, folder)
                batch["position"] = after.to_json()
                batch["composed_at"] = time.time()
                record["batches"][key] = batch
                record["position"] = after.to_json()
                save_state(settings, state)  # from here on these episodes belong to this batch
                emit("batch_ready", {"version": version, "episodes": len(episodes),
                                     "dropped_stale": len(batch["dropped_stale"])})
            batch = record["batches"][key]
            batch["train_started_at"] = time.time()
            try:
                batch["train"] = _train_batch(settings, published, folder, trainer)
                weights = _publish(settings, version + 1, batch["train"]["trainer_checkpoint"])
            except NoTrainingDataError as exc:
                if not settings.skip_empty_train:
                    raise
                log.warning("batch %d: nothing to train on (%s); version %d keeps %s", version, exc,
                            version + 1, published["checkpoint"])
                batch["train"] = {"skipped": " ".join(str(exc).split()), "samples": 0}
                weights = {"checkpoint": published["checkpoint"], "adapter": published.get("adapter")}
            batch["train_done_at"] = time.time()
            version += 1
            published = {"version": version, **weights, "published_at": time.time()}
            record["versions"].append(published)
            record["metrics"] = _metrics(record, board, began, _episodes(record))
            _collect_evaluations(record, evaluations)
            save_state(settings, state)
            _serve(updater, published)
            board.publish(version)
            if evaluations.due(version):
                evaluations.submit(version, _train_success(record))
            metrics = record["metrics"]
            scalars.add({"async/version": version, "async/staleness_mean": metrics["staleness_mean"],
                         "async/rollout_idle_s": board.rollout_idle_s,
                         "async/trainer_idle_s": board.trainer_idle_s,
                         "async/episodes_per_s": metrics["episodes_per_s"],
                         "async/samples_per_s": metrics["samples_per_s"],
                         "async/staleness_max": metrics["staleness_max"]}, version)
            emit("version_published", {"version": version, "checkpoint": published["checkpoint"],
                                       "pid": services.policy_pid, "metrics": record["metrics"]})
        # Training is done: the rollout stops; the evaluations still due finish.
        board.finish()
        evaluations.join()
        if evaluations.error is not None:
            raise LoopError(f"the evaluation failed: {evaluations.error}") from evaluations.error
        _collect_evaluations(record, evaluations)
        for key, found in record["evals"].items():
            if found["evaluated"][1]:
                scalars.add({"async/eval_success_rate": found["success_rate"]}, int(key))
    finally:
        board.finish()
        rollout.thread.join(timeout=120)
        trainer.close()
        scalars.close()
    record["metrics"] = _metrics(record, board, began, _episodes(record))
    _collect_evaluations(record, evaluations)
    record["settings"] = settings_to_dict(settings.async_loop)
    save_state(settings, state)
    return record
