"""The phases both schedules run, each written once: draw a task batch, play a rollout, select and
train a round, publish a version, evaluate it, report, push. `webgym_rl.loop.sync` calls them in
turn; `webgym_rl.loop.asynchronous` runs the rollout beside the trainer. Either way a round is the
same recipe: the same rollout settings, the same sample selection (success threshold, the last-K
window over rounds, recency weights, no-op steps dropped), the same resident trainer, the same
publish and evaluation.

Folders of a loop (``OUT``)::

    rollouts/round-XXXX[-tasks.jsonl]   sync: round r's rollout (and the tasks it drew)
    rollouts/chunk-XXXX[-tasks.jsonl]   async: the rollout's task batches, played without a break
    checkpoints/v-XXXX, adapters/v-XXXX a version's servable weights (written when a folder is
                                        needed: folder publish, Hub push, the final version)
    evals/v-XXXX                        tasks.jsonl, trajectories, report/, eval.json
    trainer/                            the resident trainer: checkpoint-rXXXX (full, resumable),
                                        logs/, control/, trainer.log
    learning_curve.png, loop_state.json
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from webgym_core.failpoints import failpoint
from webgym_core.files import write_atomic, write_json_atomic
from webgym_core.settings import settings_to_dict
from webgym_data.loading import load_tasks
from webgym_data.sampler import SamplerSettings, TaskHistory, TaskSampler, history_from
from webgym_data.schema import Task
from webgym_rl.errors import LoopError, LoopSettingsError, LoopStateError, NoTrainingDataError, PhaseFailed
from webgym_rl.hub import PushSettings, push_checkpoint
from webgym_rl.loop.events import (
    CheckpointWritten,
    OnEvent,
    PhaseDone,
    PhaseStarted,
    PolicyServing,
    ResumedFrom,
)
from webgym_rl.loop.fence import VersionFence
from webgym_rl.loop.resident import TrainerSetup, open_trainer
from webgym_rl.loop.state import (
    CheckpointRecord,
    ErrorRecord,
    EvalRecord,
    LoopState,
    PushRecord,
    RolloutRecord,
    RoundRecord,
    TrainRecord,
    VersionRecord,
    save_state,
)
from webgym_rollout.agent.policies import OpenAIPolicy, PolicySettings, RandomPolicySettings, make_policy
from webgym_rollout.browser.guard import is_loopback_host
from webgym_rollout.report.charts import CurvePoint, run_colours, write_learning_curve
from webgym_rollout.report.html import build_report, write_report
from webgym_rollout.tasks.kind import task_kind
from webgym_rollout.trajectory.contract import EpisodeColumn, EpisodeStatus, succeeded
from webgym_rollout.trajectory.reader import read_episodes

if TYPE_CHECKING:
    from webgym_rl.loop.resident import TrainerClient
    from webgym_rl.loop.services import LoopServices
    from webgym_rl.loop.settings import LoopSettings
    from webgym_rl.loop.updater import PolicyUpdater
    from webgym_rollout.runner import RunReport, RunSettings
    from webgym_rollout.trajectory.contract import Episode

__all__ = ["Loop", "VersionedPolicy", "bootstrap_policy", "check_tasks", "checkpoint_due", "curve_names",
           "curve_panels", "draw_tasks",
           "episode_staleness", "evaluate", "evaluation_due", "final_version", "finished_evaluation",
           "history_of", "oldest_version", "play", "publish", "publish_path", "push", "rollout_record",
           "run_settings", "running_trainer", "save_version", "start_endpoint", "start_trainer",
           "step_version", "successes_by_version", "supersede", "train_points", "train_round", "window",
           "write_checkpoint"]

log = logging.getLogger(__name__)

T = TypeVar("T")


# ------------------------------------------------------------------------------------ the loop

@dataclass
class Loop:
    """What every phase of a run shares: the settings, the services, the state, the trainer, the
    endpoint's updater, and where events go."""

    settings: LoopSettings
    services: LoopServices
    state: LoopState
    emit: OnEvent
    trainer: TrainerClient | None = None
    updater: PolicyUpdater | None = None
    fence: VersionFence = dataclasses.field(default_factory=lambda: VersionFence(enabled=False))
    """No request overlaps a publish where the endpoint does not stamp its replies (`start_endpoint`)."""

    @property
    def out(self) -> Path:
        return self.settings.out_dir

    def save(self) -> None:
        save_state(self.settings, self.state)

    def phase(self, r: int, name: str, work: Callable[[], T]) -> T:
        """Run one phase of round `r`: announced, timed, and on failure recorded in the state
        (``last_error``) and raised as `PhaseFailed` naming the round and the phase."""
        self.emit(PhaseStarted(r, name))
        began = time.perf_counter()
        try:
            record = work()
        except Exception as exc:
            self.state.last_error = ErrorRecord(round=r, phase=name, error=f"{type(exc).__name__}: {exc}")
            self.save()
            raise PhaseFailed(r, name, exc, self.out) from exc
        if hasattr(record, "seconds") and not getattr(record, "seconds", 0.0):
            record.seconds = time.perf_counter() - began  # type: ignore[attr-defined]
        self.state.last_error = None
        return record

    def done(self, r: int, name: str, record: Any) -> None:
        self.save()
        self.emit(PhaseDone(r, name, record))

    # -- folders
    def rollout_dir(self, r: int) -> Path:
        return self.out / "rollouts" / f"round-{r:04d}"

    def chunk_dir(self, chunk: int) -> Path:
        return self.out / "rollouts" / f"chunk-{chunk:04d}"

    def eval_dir(self, version: int) -> Path:
        return self.out / "evals" / f"v-{version:04d}"

    def version_dir(self, version: int) -> Path:
        return self.out / "checkpoints" / f"v-{version:04d}"

    def adapter_dir(self, version: int) -> Path:
        return self.out / "adapters" / f"v-{version:04d}"

    @property
    def trainer_dir(self) -> Path:
        return self.out / "trainer"


# ------------------------------------------------------------------------------------ task batches

def draw_tasks(*, source: str, split: str, sampler: SamplerSettings, index: int, target: Path,
               history: Callable[[], TaskHistory] | None = None) -> Path:
    """The tasks one rollout plays, drawn by `sampler` as batch `index` and written to `target`
    (JSONL) before the rollout starts, so a resumed rollout plays the very same tasks; returns
    `target`. `history` gives the outcomes of earlier batches (the success_aware sampler draws by
    them; one that needs a history and gets none is refused)."""
    if target.is_file():
        return target  # drawn before an interruption: never drawn again
    if sampler.kind == "success_aware" and history is None:
        raise LoopSettingsError("sampler.kind: success_aware draws by the outcomes of earlier batches, and "
                                f"this rollout ({target.parent.name}) keeps none")
    sampled = TaskSampler(load_tasks(source, split=split), sampler)
    outcomes = history() if history is not None and sampler.kind == "success_aware" else None
    tasks = sampled.batch(index, outcomes)
    if not tasks:
        raise LoopSettingsError(f"{source}: no '{split}' task passes the sampler's filters "
                                f"({settings_to_dict(sampler)})")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, "".join(json.dumps(t.to_row(), ensure_ascii=False) + "\n" for t in tasks))
    log.info("batch %d: %d of %d tasks (%s sampler) -> %s", index, len(tasks), len(sampled.tasks),
             sampler.kind, target)
    return target


def history_of(folders: Iterable[tuple[int, Path]]) -> TaskHistory:
    """What the rollouts in `folders` (``(batch index, trajectory folder)``) did with each task:
    judged episodes only (an infrastructure failure says nothing about the policy)."""
    task_id, reward, status = EpisodeColumn.TASK_ID, EpisodeColumn.REWARD, EpisodeColumn.STATUS
    outcomes = []
    for index, folder in folders:
        if not (folder / "manifest.json").is_file():
            continue
        for batch in read_episodes(folder).batches(columns=(task_id, reward, status), batch_size=1024):
            for row in batch.to_pylist():
                if not EpisodeStatus(row[status]).is_error:
                    outcomes.append((row[task_id], index, succeeded(row[reward])))
    return history_from(outcomes)


def check_tasks(settings: LoopSettings, tasks: Sequence[Task], where: str) -> None:
    """Refuse a judge that cannot score these tasks: the programmatic judge reads the environment's
    own reward, which a website does not keep."""
    if settings.judge.kind != "programmatic":
        return
    without = Counter(task_kind(t).name for t in tasks if not task_kind(t).keeps_reward)
    if without:
        kinds = ", ".join(f"{n} of kind '{kind}'" for kind, n in sorted(without.items()))
        raise LoopSettingsError(
            f"judge.kind (--judge): programmatic scores only tasks whose environment keeps a reward "
            f"(MiniWoB); {where} has {kinds}, which a website does not keep, so every such episode would "
            "score 0. Use the rubric judge (--judge rubric --judge-base-url URL --judge-model NAME), or "
            "keep only tasks with a reward (--sampler-kinds miniwob)")


# --------------------------------------------------------------------------------------- rollouts

def _needs_site_server(tasks: Sequence[Task], settings: LoopSettings) -> bool:
    """Some task's kind cannot run without a site server (its check refuses settings without one)."""
    without = dataclasses.replace(settings.env, sites_url=None)
    for task in tasks:
        try:
            task_kind(task).check(without)
        except ValueError:
            return True
    return False


def run_settings(settings: LoopSettings, services: LoopServices, *, tasks: Path, out: Path, split: str,
                 index: int, horizon_table: str = "split", shard_episodes: int | None = None,
                 attempts: int | None = None) -> RunSettings:
    """The settings of one rollout of the loop (train, chunk, evaluation, or a caller's baseline):
    the loop's browsers, sites, environment, judge and episode scheduler; the one place they are
    put together. MiniWoB tasks get the site server (started on first use)."""
    from webgym_rollout.runner import RunSettings  # lazy: imports playwright, psutil

    env = settings.env
    if not env.sites_url and _needs_site_server(load_tasks(tasks, split=split), settings):
        remote = [url for url in settings.servers if not is_loopback_host(urlsplit(url).hostname or "")]
        if settings.fleet.enabled:
            remote.append(f"fleet {settings.fleet.fleet}")
        if remote:
            # The browser opens the page, on its own machine: a site server here is out of its reach.
            raise LoopSettingsError(
                f"tasks that need a site server (MiniWoB pages, ...) on browser servers of other machines "
                f"({', '.join(remote)}) need --sites-url: run `webgym-rollout serve-sites` on those machines "
                "and pass its URL as they see it (e.g. http://127.0.0.1:8400)")
        env = dataclasses.replace(env, sites_url=services.sites_url())
    rollout = settings.rollout
    if shard_episodes is not None:
        rollout = dataclasses.replace(rollout, shard_episodes=shard_episodes)
    if attempts is not None:
        rollout = dataclasses.replace(rollout, attempts=attempts)
    return RunSettings(
        tasks=tasks, servers=services.browser_urls(), out=out, split=split,  # type: ignore[arg-type]
        horizon_table=horizon_table, resume=True, iteration=index,  # type: ignore[arg-type]
        browser_token=settings.browser_token, progress=settings.progress and shard_episodes is None,
        fleet=settings.fleet, rollout=rollout, env=env, judge=settings.judge,
        policy=PolicySettings(agent=settings.policy.agent))


def step_version(policy_version: int | None) -> int:
    """The version of a step's policy (`Step.policy_version`; 0 for the random bootstrap, whose steps
    name none)."""
    return 0 if policy_version is None else policy_version


def oldest_version(episode: Episode) -> int | None:
    """The version of the episode's oldest step (`step_version`); None for an episode without steps."""
    return min((step_version(step.policy_version) for step in episode.steps), default=None)


def episode_staleness(episode: Episode, trainer_version: int) -> int:
    """Versions between the trainer and the episode's oldest step (0 for an episode without steps)."""
    oldest = oldest_version(episode)
    return max(0, trainer_version - oldest) if oldest is not None else 0


class VersionedPolicy:
    """A rollout's policy: asks the endpoint for the version `current()` names (or the `pinned`
    one, an evaluation's) under the model name the updater gives it, and makes sure every step
    names the version that produced it: the endpoint's stamp where it gives one (the CPU policy
    server's ``system_fingerprint``, a vLLM adapter's name), else the version current when the
    request started, which the loop's `VersionFence` makes exact (no publish overlaps a request)."""

    observes_elements = False

    def __init__(self, loop: Loop, current: Callable[[], int], *, temperature: float | None = None,
                 pinned: int | None = None):
        assert loop.updater is not None
        self._loop, self._updater, self._current = loop, loop.updater, current
        self._temperature, self._pinned = temperature, pinned
        self._policies: dict[int, Any] = {}
        self.model_id = loop.settings.policy.served_name

    def _policy(self, version: int) -> Any:
        if version not in self._policies:
            endpoint = self._loop.settings.policy
            sampling = endpoint.sampling if self._temperature is None else dataclasses.replace(
                endpoint.sampling, temperature=self._temperature)
            self._policies[version] = OpenAIPolicy(
                dataclasses.replace(endpoint.endpoint, base_url=self._loop.services.base_url,
                                    model=self._updater.model_name(version)),
                sampling=sampling, agent=endpoint.agent)
        return self._policies[version]

    async def act(self, observation: Any) -> Any:
        # An evaluation asks for its version by name where the endpoint serves several (LoRA
        # adapters); elsewhere it gets what the endpoint serves now (the loop holds the next
        # publish until an evaluation ends), and the step says which.
        async with self._loop.fence.request():
            version = self._current()
            output = await self._policy(version if self._pinned is None else self._pinned).act(observation)
        if self._updater.stamps_versions or output.policy_version is None:
            output = dataclasses.replace(output, policy_version=version)
        return output

    async def close(self) -> None:
        for policy in self._policies.values():
            await policy.close()


def bootstrap_policy(loop: Loop, seed: int) -> Any:
    """The DOM-aware random policy of the first rollouts (``--bootstrap-policy random``; by element
    number where the observation numbers the elements, as the model is offered)."""
    return make_policy(PolicySettings(kind="random", agent=loop.settings.policy.agent,
                                      random=RandomPolicySettings(seed=seed)))


def play(run: RunSettings, policy: Any, gate: Any = None, truth: Any = None) -> RunReport:
    """Play one rollout to its end (a resumed folder skips what it has); `truth` reads the local sites'
    sessions (`LoopServices.site_truth`), for their truth.jsonl and ``--judge site``."""
    from webgym_rollout.runner import run as run_rollout  # lazy: imports playwright, psutil

    return asyncio.run(run_rollout(run, policy=policy, gate=gate, truth=truth))


def rollout_record(run: RunSettings, report: RunReport, policy: str, version: int) -> RolloutRecord:
    """The record of a finished rollout, its figures read back from its folder."""
    stats = read_episodes(run.out).stats().as_dict()  # type: ignore[arg-type]
    return RolloutRecord(out=str(run.out), tasks=str(run.tasks), policy=policy, version=version,
                         steps_per_s=report.steps_per_s, elapsed_s=report.elapsed_s,
                         episodes_this_run=report.episodes, **stats)


def successes_by_version(episodes: Iterable[Episode]) -> dict[str, list[int]]:
    """Per policy version (of each episode's first step): [successes, judged episodes]."""
    found: dict[str, list[int]] = {}
    for episode in episodes:
        if episode.status.is_error or not episode.steps:
            continue
        entry = found.setdefault(str(step_version(episode.steps[0].policy_version)), [0, 0])
        entry[0] += int(episode.success)
        entry[1] += 1
    return found


# --------------------------------------------------------------------------------------- training

def window(loop: Loop, r: int) -> list[list[Any]]:
    """The batches round `r` trains on, for the last --last-k-iterations rounds up to `r` (all with
    0), oldest first: ``[round, folder]`` for a batch that is a whole folder (a sync round's
    rollout), ``[round, folder, [episode id, ...]]`` per folder of an async batch's manifest
    (`BatchRecord.members`: those episodes only, each as one of that round). Rounds without a batch
    are left out, and so are async batches whose every episode was too stale (nothing to read would
    stop the round)."""
    last_k = loop.settings.training.samples.last_k_iterations
    first = 0 if last_k == 0 else max(0, r - last_k + 1)
    found: list[list[Any]] = []
    for earlier in range(first, r + 1):
        batch = loop.state.rounds.get(earlier, RoundRecord()).batch
        if batch is None or (batch.episodes and len(batch.dropped_stale) >= len(batch.episodes)):
            continue
        if batch.members:
            listed: dict[str, list[str]] = {}
            for folder, episode_id in batch.members:
                listed.setdefault(folder, []).append(episode_id)
            found.extend([earlier, folder, ids] for folder, ids in listed.items())
        elif (Path(batch.folder) / "manifest.json").is_file():
            found.append([earlier, batch.folder])
    return found


def train_round(loop: Loop, r: int) -> TrainRecord:
    """Train the resident trainer on round `r`'s window; a round with nothing to train on is
    recorded as skipped (the weights stay as they are) unless --no-skip-empty-train."""
    assert loop.trainer is not None
    sources = window(loop, r)
    started = time.time()
    try:
        if not sources:
            raise NoTrainingDataError(f"round {r}: no batch in its window has committed episodes")
        result = loop.trainer.call("train_round", r=r, sources=sources)
    except NoTrainingDataError as exc:
        if not loop.settings.skip_empty_train:
            raise
        log.warning("round %d: nothing to train on (%s); the weights stay as they are", r, exc)
        return TrainRecord(skipped=" ".join(str(exc).split()),
                           data=list(dict.fromkeys(str(entry[1]) for entry in sources)),
                           window=list(dict.fromkeys(entry[0] for entry in sources)),
                           started_at=started, done_at=time.time())
    return TrainRecord(**result, started_at=started, done_at=time.time())


def publish_path(loop: Loop) -> str:
    """memory or folder: how new weights reach this loop's endpoint (`ResidentTrainerSettings.publish`)."""
    assert loop.updater is not None
    wanted = loop.settings.trainer.publish
    if wanted == "auto":
        return "memory" if loop.updater.weights_url else "folder"
    if wanted == "memory" and not loop.updater.weights_url:
        raise LoopSettingsError("trainer.publish (--publish): memory needs an endpoint that takes weights "
                                "over its API (the CPU policy server); this one loads folders")
    return wanted


def save_version(loop: Loop, version: int, *, servable: bool = True) -> tuple[str | None, str | None]:
    """Write `version` (the weights the trainer holds) as folders: its servable checkpoint (unless
    `servable` is False: an endpoint that loads adapters needs only the adapter), and a LoRA run's
    adapter; returns both paths (None for what was not written)."""
    assert loop.trainer is not None
    lora = loop.settings.training.lora
    result = loop.trainer.call("save_version", version=version,
                               checkpoint=str(loop.version_dir(version)) if servable else None,
                               adapter=str(loop.adapter_dir(version)) if lora else None)
    return result["checkpoint"], result["adapter"]


def publish(loop: Loop, r: int) -> VersionRecord:
    """Publish the trainer's weights as version ``r + 1`` and switch the endpoint to it: in
    memory where the endpoint takes it, else through a folder the updater loads."""
    assert loop.trainer is not None and loop.updater is not None
    loop.services.check_policy()
    version, path = r + 1, publish_path(loop)
    began = time.perf_counter()
    checkpoint = adapter = None
    if path == "memory":
        loop.trainer.call("push", base_url=loop.services.base_url, version=version)
    else:
        adapters = loop.updater.loads_adapters
        checkpoint, adapter = save_version(loop, version, servable=not adapters)
        loop.updater.update(adapter if adapters else checkpoint, version)
    failpoint("loop.publish")  # the endpoint serves the version; the state does not hold it yet
    record = VersionRecord(version=version, round=r, path=path,  # type: ignore[arg-type]
                           publish_s=time.perf_counter() - began, checkpoint=checkpoint, adapter=adapter)
    loop.state.versions.append(record)
    loop.emit(PolicyServing(version, path, record.publish_s, checkpoint or ""))
    return record


def checkpoint_due(loop: Loop, r: int, last: bool) -> bool:
    return last or (r + 1) % loop.settings.trainer.checkpoint_every == 0


def write_checkpoint(loop: Loop, r: int) -> CheckpointRecord:
    """A full checkpoint of the trainer after round `r` (OUT/trainer/checkpoint-rXXXX), recorded;
    the older ones are deleted (a resume needs only the newest, and each holds the optimizer)."""
    assert loop.trainer is not None
    folder = loop.trainer_dir / f"checkpoint-r{r:04d}"
    began = time.perf_counter()
    loop.trainer.call("checkpoint", r=r, folder=str(folder))
    record = CheckpointRecord(round=r, folder=str(folder))
    for older in loop.state.checkpoints:
        if older.optimizer and older.folder != record.folder:
            shutil.rmtree(older.folder, ignore_errors=True)
    loop.state.checkpoints = [record]
    loop.save()
    loop.emit(CheckpointWritten(r, str(folder), time.perf_counter() - began))
    return record


def supersede(loop: Loop) -> int:
    """Where a (re)run starts training: after the round of the newest full checkpoint (round 0 in a
    new folder). The rounds trained after that checkpoint are superseded: their records move to
    ``state.superseded``, their versions are marked, and they train again. Returns the first round
    to train."""
    state = loop.state
    last = state.checkpoints[-1] if state.checkpoints else None
    done = last.round if last is not None else -1
    superseded = sorted(r for r, record in state.rounds.items() if r > done and record.train is not None)
    for r in superseded:
        record = state.rounds[r]
        state.superseded.append(RoundRecord(round=r, train=record.train, eval=record.eval, push=record.push))
        record.train = record.eval = record.push = None
    marked = []
    for version in state.versions:
        if version.round is not None and version.round > done and not version.superseded:
            version.superseded = True
            marked.append(version.version)
    if last is not None and (superseded or marked):
        loop.emit(ResumedFrom(done, last.folder, tuple(marked)))
    loop.save()
    return done + 1


def start_trainer(loop: Loop) -> None:
    """Start the resident trainer where the newest full checkpoint left it (the starting model in a
    new folder), in this process, a child process or under --train-launcher."""
    from webgym_rl.merge import is_adapter  # lazy: imports transformers

    settings, state = loop.settings, loop.state
    last = state.checkpoints[-1] if state.checkpoints else None
    model, resume = settings.model, None
    if last is not None:
        if last.optimizer:
            resume = last.folder
        else:
            model = last.folder  # schema-1 weights: a fresh optimizer, as schema 1 had every round
            if settings.training.lora and not is_adapter(model):
                raise LoopStateError(
                    f"{loop.out / 'loop_state.json'}: round {last.round}'s weights ({model}) are not a LoRA "
                    "adapter of --model, so --lora cannot train one adapter of --model on from them: rerun "
                    "without --lora, or choose a new --out folder")
    setup = TrainerSetup(model=model, model_revision=settings.model_revision if model == settings.model
                         else None, out=str(loop.trainer_dir), seed=settings.seed,
                         total_steps=settings.total_steps, resume_from=resume, training=settings.training)
    loop.trainer = open_trainer(setup, loop.trainer_dir / "control",
                                in_process=not settings.trainer.train_process,
                                launcher=settings.trainer.train_launcher)


def start_endpoint(loop: Loop) -> None:
    """Start the policy endpoint and its updater; a resumed run then serves its newest version (the
    weights the trainer restored)."""
    state = loop.state
    began = time.perf_counter()
    loop.services.start_policy(loop.settings.model)
    loop.updater = loop.services.updater()
    loop.fence = VersionFence(enabled=loop.updater.stamps_versions)
    loop.emit(PolicyServing(0, "start", time.perf_counter() - began, loop.settings.model))
    current = state.version
    if current.version > 0 and loop.trainer is not None:
        began = time.perf_counter()
        if publish_path(loop) == "memory":
            loop.trainer.call("push", base_url=loop.services.base_url, version=current.version)
        else:
            adapters = loop.updater.loads_adapters
            weights = current.adapter if adapters else current.checkpoint
            if weights is None or not Path(weights).exists():
                checkpoint, adapter = save_version(loop, current.version, servable=not adapters)
                weights = adapter if adapters else checkpoint
            loop.updater.update(weights, current.version)
        loop.emit(PolicyServing(current.version, "resume", time.perf_counter() - began))


# ------------------------------------------------------------------------------------- evaluation

def train_points(state: LoopState) -> dict[str, list[int]]:
    """Per policy version: [successes, judged episodes] of the episodes the rounds trained on."""
    found: dict[str, list[int]] = {}
    for _, record in sorted(state.rounds.items()):
        if record.batch is None:
            continue
        for version, (won, judged) in record.batch.successes_by_version.items():
            entry = found.setdefault(version, [0, 0])
            entry[0], entry[1] = entry[0] + won, entry[1] + judged
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


def finished_evaluation(loop: Loop, version: int) -> EvalRecord | None:
    """The record of the finished evaluation of `version` (its eval.json), or None."""
    path = loop.eval_dir(version) / "eval.json"
    return EvalRecord.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else None


def evaluation_due(loop: Loop, version: int) -> bool:
    every = loop.settings.eval_every
    return bool(every) and version > 0 and version % every == 0


async def evaluate(loop: Loop, version: int, policy: Any, train: dict[str, list[int]]) -> EvalRecord:
    """Play the evaluation tasks with `policy` (the endpoint at `version`, at --eval-temperature)
    into OUT/evals/v-XXXX, then write its report, the learning curve so far (train success by
    policy version, `train`; test success of every finished evaluation) and its record
    (``eval.json``: the evaluation is done once that file exists)."""
    from webgym_rollout.runner import run as run_rollout  # lazy: imports playwright, psutil

    settings = loop.settings
    folder = loop.eval_dir(version)
    tasks = draw_tasks(source=settings.eval_tasks or settings.tasks, split=settings.eval_split,
                       sampler=settings.eval_sampler, index=version, target=folder / "tasks.jsonl")
    check_tasks(settings, load_tasks(tasks), f"the evaluation tasks of v{version}")
    run = run_settings(settings, loop.services, tasks=tasks, out=folder / "trajectories",
                       split=settings.eval_split, index=version, horizon_table=settings.eval_horizons,
                       attempts=settings.eval_attempts)
    started = time.time()
    report = await run_rollout(run, policy=policy, truth=loop.services.site_truth())  # closes the policy
    loop.services.check_policy()  # a dead server failed the episodes: not the version's figure
    played = rollout_record(run, report, f"v{version}", version)
    record = EvalRecord(**played.model_dump(), started_at=started)
    versions = Counter(f"v{step_version(step.policy_version)}"
                       for episode in read_episodes(run.out) for step in episode.steps)  # type: ignore[arg-type]
    record.step_versions = dict(sorted(versions.items()))
    others = {v: n for v, n in versions.items() if v != f"v{version}"}
    if others:  # the loop holds every publish while an evaluation runs: this is a bug, said loudly
        raise LoopError(f"the evaluation of v{version} ({folder}) was answered by other versions too "
                        f"({others} steps): its figure would not be v{version}'s")
    _report(loop, record, train)
    record.done_at = time.time()
    record.seconds = record.done_at - started
    write_json_atomic(folder / "eval.json", record.model_dump(mode="json"))
    return record


def curve_names(bootstrap: str, versions: Iterable[int]) -> dict[int, str]:
    """The learning curve's name of each policy version: ``v0 (bootstrap: random)`` or ``v0
    (bootstrap: model)`` (`bootstrap`: --bootstrap-policy) for the policy that played before any
    training (the DOM-aware random policy, or the starting model), ``vN`` for the others."""
    return {v: f"v{v} (bootstrap: {bootstrap})" if v == 0 else f"v{v}" for v in versions}


def curve_panels(eval_split: str) -> dict[str, str]:
    """The learning curve's two panels: train (the rollouts each version played, trained on) and
    test (the evaluation of each version), apart, so that the bootstrap's train success beside a
    trained version's test success is not read as one line."""
    return {"train": "train: success of the rollouts each version played",
            "test": f"test: evaluation of each version ({eval_split} tasks)"}


def _report(loop: Loop, record: EvalRecord, train: dict[str, list[int]]) -> None:
    settings = loop.settings
    label = f"v{record.version}"
    report = build_report([record.out], settings.report, labels=[label])
    # One colour per curve in the PNG and the page; the evaluated run is the test curve's last point.
    colours = run_colours(["train", "test"])
    colours[label] = colours["test"]
    overall = report.runs[0].overall
    confidence = settings.report.confidence
    points = [CurvePoint.from_counts(int(v), "train", won, judged, confidence)
              for v, (won, judged) in train.items() if judged]
    for earlier in range(1, record.version):
        found = finished_evaluation(loop, earlier) if evaluation_due(loop, earlier) else None
        if found is not None and found.evaluated[1]:
            points.append(CurvePoint.from_counts(earlier, "test", *found.evaluated, confidence))
    if overall.trials:
        points.append(CurvePoint.from_counts(record.version, "test", overall.successes, overall.trials,
                                             confidence))
    layout = {"x_label": "policy version", "colours": colours, "panels": curve_panels(settings.eval_split),
              "tick_names": curve_names(settings.bootstrap_policy, {p.iteration for p in points})}
    curve = loop.out / "learning_curve.png"
    if points:
        write_learning_curve(points, curve, title="Success rate by policy version: training rollouts and "
                             "evaluations", **layout)
    title = (f"Evaluation of policy version {record.version}: {report.runs[0].episodes} episodes of the "
             f"{settings.eval_split} tasks")
    page = write_report(report, loop.eval_dir(record.version) / "report", learning_curve=points or None,
                        title=title, **layout)
    record.evaluated = [overall.successes, overall.trials]
    record.success_low, record.success_high = overall.low, overall.high
    record.report, record.learning_curve = str(page), str(curve) if points else None


# ------------------------------------------------------------------------------------------- push

def push(loop: Loop, r: int) -> PushRecord:
    """Upload version ``r + 1`` (its servable folder, written now if it was published in
    memory) and its model card, with the success rate its evaluation measured."""
    record = loop.state.rounds[r]
    if record.train is None or record.train.skipped:
        return PushRecord(skipped="no new weights in this round")
    version = next(v for v in reversed(loop.state.versions) if v.round == r and not v.superseded)
    if version.checkpoint is None:
        version.checkpoint, version.adapter = save_version(loop, version.version)
    rates = {}
    if record.eval is not None and record.eval.evaluated[1]:
        successes, trials = record.eval.evaluated
        rates[f"eval ({loop.settings.eval_split} split)"] = successes / trials
    commit = push_checkpoint(PushSettings(
        checkpoint=Path(version.checkpoint), repo_id=str(loop.settings.push_to), success_rates=rates,
        private=loop.settings.push_private, commit_message=f"webgym-rl loop: v{version.version}"))
    return PushRecord(repo_id=loop.settings.push_to, commit=str(getattr(commit, "oid", "") or commit),
                      checkpoint=version.checkpoint)


def final_version(loop: Loop) -> str:
    """The newest version as a folder (written now if it was published in memory); its path."""
    current = loop.state.version
    if current.version > 0 and (current.checkpoint is None or not Path(current.checkpoint).exists()):
        current.checkpoint, current.adapter = save_version(loop, current.version)
    return str(current.checkpoint or loop.settings.model)


@contextlib.contextmanager
def running_trainer(loop: Loop):
    """The resident trainer and the policy endpoint for the body of a run; at its end (a normal
    one) the newest version is written as a folder, and the trainer stops however the run ends."""
    start_trainer(loop)
    try:
        start_endpoint(loop)
        yield
        final_version(loop)
        loop.save()
    finally:
        if loop.trainer is not None:
            loop.trainer.close()
            loop.trainer = None
