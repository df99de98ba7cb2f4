"""``webgym-rl loop``: the online RL loop, in Python: roll out, train, evaluate, repeat.

Each iteration ``i`` runs these phases, in order, and records each in ``OUT/loop_state.json``
(`webgym_rl.loop_state`) as soon as it is finished::

    rollout   roll out the train tasks with the current checkpoint (iteration 0: the `random`
              bootstrap policy by default) -> OUT/iter-XXXX/trajectories (trajectory dataset)
    train     train the current checkpoint on the trajectories of the last K iterations
              (filtered_bc by default) -> OUT/iter-XXXX/train (trainer output) and
              OUT/iter-XXXX/checkpoint (the model and processor the next iteration uses)
    eval      every `eval_every` iterations: roll out the evaluation tasks (the test split by
              default) with the new checkpoint at `eval_temperature` -> OUT/iter-XXXX/eval
    push      when `push_to` is set: upload OUT/iter-XXXX/checkpoint and its model card

Rerunning the same command resumes at the first unfinished phase: finished phases are skipped, an
interrupted rollout continues its trajectory dataset (nothing redone, nothing lost), an interrupted
training run restarts from its last complete trainer checkpoint. A failure stops the loop with one
`PhaseFailed` naming the iteration and the phase; earlier iterations stay as they are.

`LoopSettings` composes the settings of the parts it drives, each defined once: the rollout
(`RolloutSettings`), the environment (`EnvSettings`), the loop's own browser server
(`PoolSettings`, flags ``--pool-*``), the policy endpoint (`PolicyEndpointSettings`, ``--policy-*``),
the judge (`JudgeSettings`, ``--judge*``) and the training (`TrainingSettings`). The browsers,
sites and policy endpoint are started and switched by `webgym_rl.services.LoopServices`.

Training runs in this process by default (one device). With ``train_launcher`` (e.g. ``accelerate
launch --config_file fsdp.yaml``) the loop runs ``webgym-rl train`` under that launcher instead, so
DDP / FSDP / DeepSpeed over several GPUs come from the Accelerate config, as for ``webgym-rl train``.

Exceptions (`webgym_rl.errors`)::

    LoopError (RuntimeError)
     ├── LoopSettingsError   a bad setting (names the field; a ValueError too)
     ├── LoopStateError      OUT/loop_state.json is unreadable or belongs to another run
     ├── PolicyEndpointError the policy endpoint could not be started, reached or reloaded
     └── PhaseFailed         a phase failed (names the iteration and the phase; the cause is chained)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import click

from webgym_core.errors import SettingsError
from webgym_core.files import write_atomic
from webgym_core.settings import flat, load_settings, settings_options, settings_to_dict
from webgym_data.loading import load_tasks
from webgym_data.schema import Task
from webgym_rl.async_loop import AsyncSettings
from webgym_rl.errors import (
    LoopError,
    LoopSettingsError,
    LoopStateError,
    NoTrainingDataError,
    PhaseFailed,
    PolicyEndpointError,
    WebgymRLError,
)
from webgym_rl.loop_state import load_state, save_state
from webgym_rl.services import LoopServices, PolicyEndpointSettings, _die_with_parent
from webgym_rl.train import TrainingSettings, TrainSettings
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.env import EnvSettings
from webgym_rollout.fleet import FleetSettings
from webgym_rollout.judge import JudgeSettings
from webgym_rollout.report import ReportSettings
from webgym_rollout.runner import RolloutSettings
from webgym_rollout.sampler import SamplerSettings, TaskHistory, TaskSampler, history_from
from webgym_rollout.tasks import kind_names, task_kind

__all__ = [
    "LoopError",
    "LoopResult",
    "LoopServices",
    "LoopSettings",
    "LoopSettingsError",
    "LoopStateError",
    "PhaseFailed",
    "PolicyEndpointError",
    "PolicyEndpointSettings",
    "loop_command",
    "run_loop",
]

log = logging.getLogger(__name__)

PHASES = ("rollout", "train", "eval", "push")
Split = Literal["train", "test"]
Bootstrap = Literal["random", "model"]


def _environment_kinds() -> tuple[str, ...]:
    """The task kinds the samplers' kind filters may name (``web``, ``miniwob``, ...)."""
    return tuple(sorted({name.partition(":")[0] for name in kind_names()}))


@dataclass(frozen=True)
class LoopSettings:
    """Everything `run_loop` needs. Filled from defaults, then a YAML file, then CLI flags."""

    tasks: str = ""
    """Task source: a task dataset folder (``webgym-data build``) or a JSONL/parquet file of task rows."""
    model: str = ""
    """Starting checkpoint: a local folder or a Hub model id (Qwen2-VL / Qwen2.5-VL / Qwen3-VL)."""
    model_revision: str | None = None
    """Hub revision of --model."""
    out: str = ""
    """Loop folder: loop_state.json and one iter-XXXX/ folder per iteration."""
    iterations: int = 1
    """Iterations to have finished when the command ends (a rerun with a larger value continues)."""
    split: Split = "train"
    """Task split rolled out for training."""
    bootstrap_policy: Bootstrap = "random"
    """Policy of iteration 0's rollout: 'random' (no model; successes bootstrap training) or 'model'."""
    servers: list[str] = field(default_factory=list)
    """Running browser servers (repeat); none = the loop runs one on 127.0.0.1 (see --pool-*)."""
    fleet: FleetSettings = flat(FleetSettings)
    """A browser fleet on Ray (--fleet NAME --ray-address ADDR) instead of --servers."""
    browser_token: str | None = field(default=None, metadata={"env": "WEBGYM_BROWSER_TOKEN"})
    """Bearer token of the browser servers."""
    eval_every: int = 0
    """Evaluate the new checkpoint every M iterations (0 = never). --mode async: every M published
    versions, on a thread of its own while rollouts and training go on (OUT/evals/v-XXXX)."""
    eval_tasks: str | None = None
    """Evaluation task source (default: --tasks)."""
    eval_split: Split = "test"
    """Split of the evaluation tasks."""
    eval_temperature: float = 0.0
    """Sampling temperature of the evaluation rollouts (train rollouts use --policy-temperature)."""
    eval_horizons: Literal["split", "train", "test"] = "test"
    """Step budgets of the evaluation rollouts: the test horizons (the paper's protocol), the
    train ones, or those of the evaluation split."""
    push_to: str | None = None
    """Hub model repository to push each iteration's checkpoint to (none = no push)."""
    push_private: bool = False
    """Create the Hub repository as private."""
    skip_empty_train: bool = True
    """An iteration with nothing to train on (e.g. no success) keeps the checkpoint instead of failing."""
    train_launcher: str = ""
    """Run training as a child process under this launcher, e.g. 'accelerate launch --config_file
    fsdp.yaml' for several GPUs ('' = train in this process)."""
    seed: int = 0
    """Seed of the rollouts and the training data order (each iteration derives its own)."""
    progress: bool = True
    """Show progress (rich) on the terminal."""
    rollout: RolloutSettings = flat(lambda: RolloutSettings(concurrency=4, mode="sync"))
    """In the loop, --mode chooses the loop: sync (roll out, then train, then evaluate, in turn) or
    async (rollouts and training at once, bounded by --max-staleness: `webgym_rl.async_loop`).
    Episodes are scheduled asynchronously within a rollout either way."""
    async_loop: AsyncSettings = flat(AsyncSettings)
    env: EnvSettings = flat(EnvSettings)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    """Which training tasks each iteration rolls out (--sampler*: strategy, batch size, filters)."""
    eval_sampler: SamplerSettings = field(default_factory=SamplerSettings)
    """Which evaluation tasks each evaluation rolls out (--eval-sampler*; default: all of them)."""
    report: ReportSettings = field(default_factory=ReportSettings)
    """The evaluation report written after each evaluation (--report-*)."""
    pool: PoolSettings = field(default_factory=lambda: PoolSettings(browsers=1, contexts_per_browser=4))
    """The loop's own browser server (used when --servers is not given)."""
    policy: PolicyEndpointSettings = field(default_factory=PolicyEndpointSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    training: TrainingSettings = flat(TrainingSettings)

    def __post_init__(self) -> None:
        for name in ("tasks", "model", "out"):
            if not getattr(self, name):
                raise LoopSettingsError(f"{name}: is required")
        for name, allowed in (("split", Split), ("eval_split", Split), ("bootstrap_policy", Bootstrap)):
            if getattr(self, name) not in get_args(allowed):
                raise LoopSettingsError(f"{name}: {getattr(self, name)!r} is unknown; choose one of "
                                        f"{', '.join(repr(a) for a in get_args(allowed))}")
        kinds = _environment_kinds()
        for name in ("sampler", "eval_sampler"):
            unknown = sorted(set(getattr(self, name).kinds) - set(kinds))
            if unknown:
                raise LoopSettingsError(f"{name}.kinds: {', '.join(unknown)} unknown; choose from "
                                        f"{', '.join(kinds)}")
        if self.policy.updater == "vllm_lora" and not self.training.lora:
            raise LoopSettingsError(
                "policy.updater: vllm_lora loads each version as a LoRA adapter of --model, so it needs "
                "training.lora (--lora); for a full fine-tune use --policy-updater vllm_weights")
        if self.servers and self.fleet.enabled:
            raise LoopSettingsError(f"servers: give browser server URLs or --fleet {self.fleet.fleet}, "
                                    "not both")
        if self.iterations < 1:
            raise LoopSettingsError(f"iterations: must be >= 1, got {self.iterations}")
        endpoint = self.policy
        if self.rollout.mode == "sync" and endpoint.endpoint.base_url and not (endpoint.command or
                                                                                endpoint.reload_url):
            raise LoopSettingsError(f"policy.updater: {endpoint.updater} switches versions in --mode async "
                                    "only; --mode sync needs --policy-command or --policy-reload-url")
        for name in ("eval_every", "eval_temperature"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise LoopSettingsError(f"{name}: must be >= 0, got {value}")

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    def iteration_dir(self, iteration: int) -> Path:
        return self.out_dir / f"iter-{iteration:04d}"


@dataclass
class LoopResult:
    """What the loop folder holds when `run_loop` returns."""

    out: Path
    checkpoint: str
    """The newest checkpoint (the starting model if no iteration trained)."""
    iterations: list[dict[str, Any]]
    """Per iteration: the record of each finished phase (as in loop_state.json)."""


def _check_paths(settings: LoopSettings) -> None:
    """The task sources exist (checked when the loop starts, not when the settings are made)."""
    if not Path(settings.tasks).exists():
        raise LoopSettingsError(f"--tasks {settings.tasks}: no such file or folder")
    if settings.eval_tasks and not Path(settings.eval_tasks).exists():
        raise LoopSettingsError(f"--eval-tasks {settings.eval_tasks}: no such file or folder")


# ----------------------------------------------------------------------------------------- phases

def _history(settings: LoopSettings, before: int) -> TaskHistory:
    """What the rollouts of the iterations before `before` did with each task (judged episodes only:
    an infrastructure failure says nothing about the policy)."""
    from webgym_rollout.trajectory import EpisodeStatus, read_episodes

    outcomes = []
    for iteration in range(before):
        folder = settings.iteration_dir(iteration) / "trajectories"
        if not (folder / "manifest.json").is_file():
            continue
        for batch in read_episodes(folder).batches(columns=["task_id", "reward", "status"], batch_size=1024):
            for row in batch.to_pylist():
                if not EpisodeStatus(row["status"]).is_error:
                    outcomes.append((row["task_id"], iteration, (row["reward"] or 0.0) >= 1.0))
    return history_from(outcomes)


def _task_batch(settings: LoopSettings, *, source: str, split: str, sampler: SamplerSettings, iteration: int,
                target: Path, history: Callable[[], TaskHistory] | None = None) -> Path:
    """The tasks one rollout plays, drawn by `sampler` for `iteration` and written to `target` (JSONL)
    before the rollout starts, so a resumed rollout plays the very same tasks; returns `target`."""
    if target.is_file():
        return target  # drawn before an interruption: never drawn again
    sampled = TaskSampler(load_tasks(source, split=split), sampler)
    tasks = sampled.batch(iteration, history() if history is not None and sampler.kind == "success_aware"
                          else None)
    if not tasks:
        raise LoopSettingsError(f"{source}: no '{split}' task passes the sampler's filters "
                                f"({settings_to_dict(sampler)})")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, "".join(json.dumps(t.to_row(), ensure_ascii=False) + "\n" for t in tasks))
    log.info("iteration %d: %d of %d tasks (%s sampler) -> %s", iteration, len(tasks), len(sampled.tasks),
             sampler.kind, target)
    return target


def _needs_site_server(tasks: list[Task], env: EnvSettings) -> bool:
    """Some task's kind cannot run without a site server (its check refuses settings without one)."""
    without = dataclasses.replace(env, sites_url=None)
    for task in tasks:
        try:
            task_kind(task).check(without)
        except ValueError:
            return True
    return False


def _rollout(settings: LoopSettings, services: LoopServices, *, iteration: int, tasks: Path, split: str,
             out: Path, checkpoint: str | None, seed: int, temperature: float,
             horizon_table: str = "split") -> dict[str, Any]:
    """One rollout into `out` (resumed if it exists) with `checkpoint` (None: the random policy),
    sampling at `temperature`."""
    from urllib.parse import urlsplit

    from webgym_rollout.browser.guard import is_loopback_host
    from webgym_rollout.policy import PolicySettings, RandomPolicySettings
    from webgym_rollout.runner import RunSettings, run
    from webgym_rollout.trajectory import read_episodes

    env = settings.env
    if _needs_site_server(load_tasks(tasks, split=split), env):
        remote = [url for url in settings.servers if not is_loopback_host(urlsplit(url).hostname or "")]
        if settings.fleet.enabled:
            remote.append(f"fleet {settings.fleet.fleet}")
        if remote and not env.sites_url:
            # The browser opens the page, on its own machine: a site server here is out of its reach.
            raise LoopSettingsError(
                f"tasks that need a site server (MiniWoB pages, ...) on browser servers of other machines "
                f"({', '.join(remote)}) need --sites-url: run `webgym-rollout serve-sites` on those machines "
                "and pass its URL as they see it (e.g. http://127.0.0.1:8400)")
        env = dataclasses.replace(env, sites_url=services.sites_url())
    endpoint = settings.policy
    if checkpoint is None:
        policy = PolicySettings(kind="random", random=RandomPolicySettings(seed=seed), agent=endpoint.agent)
    else:
        base_url, name = services.serve(checkpoint)
        policy = PolicySettings(
            kind="openai", endpoint=dataclasses.replace(endpoint.endpoint, base_url=base_url, model=name),
            sampling=dataclasses.replace(endpoint.sampling, temperature=temperature), agent=endpoint.agent)
    run_settings = RunSettings(
        tasks=tasks, servers=services.browser_urls(), out=out, split=split,  # type: ignore[arg-type]
        horizon_table=horizon_table, resume=True, iteration=iteration,  # type: ignore[arg-type]
        browser_token=settings.browser_token, progress=settings.progress, fleet=settings.fleet,
        rollout=dataclasses.replace(settings.rollout, mode="async"), env=env,
        policy=policy, judge=settings.judge)
    report = asyncio.run(run(run_settings))
    stats = read_episodes(out).stats().as_dict()
    return {"out": str(out), "tasks": str(tasks), "checkpoint": checkpoint or "random",
            "steps_per_s": report.steps_per_s,
            "elapsed_s": report.elapsed_s, "episodes_this_run": report.episodes, **stats}


def _publish_checkpoint(source: Path, target: Path) -> None:
    """Put the model, processor and trainer_state.json of `source` at `target`, atomically.

    Files are hard-linked where the file system allows (an 8B checkpoint is not copied), and the
    optimizer state (training_state/) stays with the trainer's own folder."""
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if relative.parts[0] == "training_state" or not path.is_file():
            continue
        destination = tmp / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


def _train(settings: LoopSettings, iteration: int, model: str) -> dict[str, Any]:
    from webgym_rl.merge import merge_adapter
    from webgym_rl.train import STATE_FILE as TRAINER_STATE
    from webgym_rl.train import complete_checkpoints, train

    last_k = settings.training.samples.last_k_iterations
    first = 0 if last_k == 0 else max(0, iteration - last_k + 1)
    data = [str(settings.iteration_dir(j) / "trajectories") for j in range(first, iteration + 1)
            if (settings.iteration_dir(j) / "trajectories").is_dir()]
    train_dir = settings.iteration_dir(iteration) / "train"
    if train_dir.exists() and not train_dir.is_dir():
        raise LoopError(f"{train_dir} exists and is not a folder; remove it to let the loop train")
    train_settings = TrainSettings(
        model=model, model_revision=settings.model_revision if model == settings.model else None, data=data,
        out=str(train_dir), resume=bool(complete_checkpoints(train_dir)),
        seed=settings.seed * 1000 + iteration, training=settings.training)
    try:
        if settings.train_launcher:
            checkpoint, trainer_state = _train_launched(settings, train_settings)
        else:
            checkpoint = train(train_settings).checkpoint
            trainer_state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    except NoTrainingDataError as exc:
        if not settings.skip_empty_train:
            raise
        log.warning("iteration %d: nothing to train on (%s); keeping %s", iteration, exc, model)
        return {"skipped": " ".join(str(exc).split()), "checkpoint": model, "data": data}
    target = settings.iteration_dir(iteration) / "checkpoint"
    if settings.training.lora:
        # The policy server, vLLM and the next iteration's trainer all load ordinary checkpoints.
        merge_adapter(checkpoint, target, base=model, revision=train_settings.model_revision)
    else:
        _publish_checkpoint(checkpoint, target)
    losses = [entry["loss"] for entry in trainer_state.get("log_history", [])]
    return {"checkpoint": str(target), "trainer_checkpoint": str(checkpoint), "steps": trainer_state["step"],
            "counts": trainer_state.get("counts", {}), "data": data,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}


def _train_launched(settings: LoopSettings, train_settings: TrainSettings) -> tuple[Path, dict[str, Any]]:
    """Run ``webgym-rl train`` under `settings.train_launcher` (e.g. ``accelerate launch --config_file
    fsdp.yaml``) in a child process; returns the final checkpoint and its trainer state."""
    import sys

    import yaml

    from webgym_rl.samples import build_samples, load_trajectories
    from webgym_rl.train import STATE_FILE as TRAINER_STATE
    from webgym_rl.train import complete_checkpoints

    # Same selection as the trainer, here: "nothing to train on" must not look like a crash.
    build_samples(load_trajectories(train_settings.data, cache_dir=train_settings.cache_dir),
                  train_settings.training.objective, train_settings.training.samples)
    out = train_settings.out_dir
    config = out.parent / "train-settings.yaml"
    write_atomic(config, yaml.safe_dump(settings_to_dict(train_settings), sort_keys=False))
    program = Path(sys.executable).with_name("webgym-rl")
    if not program.exists():
        program = Path(shutil.which("webgym-rl") or "webgym-rl")
    argv = [*shlex.split(settings.train_launcher), str(program), "train", "--config", str(config)]
    log.info("training: %s", shlex.join(argv))
    try:
        # The trainer dies with the loop (even by SIGKILL): a rerun never races an orphan.
        finished = subprocess.run(argv, check=False, preexec_fn=_die_with_parent)
    except OSError as exc:
        raise LoopError(f"--train-launcher could not start {argv[0]!r}: {exc}") from exc
    if finished.returncode != 0:
        raise LoopError(f"the training command exited with status {finished.returncode}: {shlex.join(argv)}")
    complete = complete_checkpoints(out)
    if not complete:
        raise LoopError(f"the training command wrote no complete checkpoint to {out}")
    return complete[-1], json.loads((complete[-1] / TRAINER_STATE).read_text(encoding="utf-8"))


def _push(settings: LoopSettings, iteration: int, record: dict[str, Any]) -> dict[str, Any]:
    from webgym_rl.hub import PushSettings, push_checkpoint

    train = record["train"]
    if train.get("skipped"):
        return {"skipped": "no new checkpoint in this iteration"}
    rates = {}
    if "eval" in record and not record["eval"].get("skipped"):
        rates[f"eval ({settings.eval_split} split)"] = float(record["eval"]["success_rate"])
    commit = push_checkpoint(PushSettings(
        checkpoint=Path(train["checkpoint"]), repo_id=str(settings.push_to), success_rates=rates,
        private=settings.push_private, commit_message=f"webgym-rl loop: iteration {iteration}"))
    return {"repo_id": settings.push_to, "commit": str(getattr(commit, "oid", "") or commit)}


# -------------------------------------------------------------------------------------- the loop

def _current_checkpoint(settings: LoopSettings, state: dict[str, Any], before: int) -> str:
    """The checkpoint the iterations before `before` ended with (the starting model if none trained)."""
    checkpoint = settings.model
    for i in range(before):
        train = state["iterations"].get(str(i), {}).get("train")
        if train is not None:
            checkpoint = train["checkpoint"]
    return checkpoint


def _run_phase(settings: LoopSettings, services: LoopServices, state: dict[str, Any], iteration: int,
               phase: str) -> dict[str, Any]:
    record = state["iterations"][str(iteration)]
    folder = settings.iteration_dir(iteration)
    seed = settings.seed * 1000 + iteration
    if phase == "rollout":
        bootstrap = iteration == 0 and settings.bootstrap_policy == "random"
        checkpoint = _current_checkpoint(settings, state, iteration)
        tasks = _task_batch(settings, source=settings.tasks, split=settings.split, sampler=settings.sampler,
                            iteration=iteration, target=folder / "tasks.jsonl",
                            history=lambda: _history(settings, iteration))
        return _rollout(settings, services, iteration=iteration, tasks=tasks, split=settings.split,
                        out=folder / "trajectories", checkpoint=None if bootstrap else checkpoint, seed=seed,
                        temperature=settings.policy.sampling.temperature)
    if phase == "train":
        return _train(settings, iteration, _current_checkpoint(settings, state, iteration))
    if phase == "eval":
        tasks = _task_batch(settings, source=settings.eval_tasks or settings.tasks, split=settings.eval_split,
                            sampler=settings.eval_sampler, iteration=iteration,
                            target=folder / "eval-tasks.jsonl")
        result = _rollout(settings, services, iteration=iteration, tasks=tasks, split=settings.eval_split,
                          out=folder / "eval", checkpoint=record["train"]["checkpoint"], seed=seed,
                          temperature=settings.eval_temperature, horizon_table=settings.eval_horizons)
        return {**result, **_evaluation_report(settings, state, iteration, folder / "eval")}
    return _push(settings, iteration, record)


def _evaluation_report(settings: LoopSettings, state: dict[str, Any], iteration: int,
                       evaluation: Path) -> dict[str, Any]:
    """The report of this evaluation (success with intervals, breakdowns) and the learning curve so
    far: train success of every rollout, test success of every evaluation, as OUT/learning_curve.png
    and in the report of this iteration (OUT/iter-XXXX/report)."""
    from webgym_rollout.charts import CurvePoint, write_learning_curve
    from webgym_rollout.report import build_report, write_report

    report = build_report([evaluation], settings.report, labels=[f"iteration {iteration}"])
    overall = report.runs[0].overall
    confidence = settings.report.confidence
    points = []
    for i in range(iteration + 1):
        record = state["iterations"].get(str(i), {})
        rollout = record.get("rollout")
        if rollout and rollout["episodes"] > rollout["errors"]:  # infrastructure failures say nothing
            judged = rollout["episodes"] - rollout["errors"]
            points.append(CurvePoint.from_counts(i, "train", rollout["successes"], judged, confidence))
        successes, trials = (overall.successes, overall.trials) if i == iteration else \
            record.get("eval", {}).get("evaluated", (0, 0))
        if trials:
            points.append(CurvePoint.from_counts(i, "test", successes, trials, confidence))
    curve = settings.out_dir / "learning_curve.png"
    if points:
        write_learning_curve(points, curve, title=f"{settings.out_dir.name}: success rate by iteration")
    page = write_report(report, settings.iteration_dir(iteration) / "report", learning_curve=points or None)
    return {"evaluated": [overall.successes, overall.trials], "success_low": overall.low,
            "success_high": overall.high, "report": str(page),
            "learning_curve": str(curve) if points else None}


def _due(settings: LoopSettings, iteration: int, phase: str) -> bool:
    if phase == "eval":
        return bool(settings.eval_every) and (iteration + 1) % settings.eval_every == 0
    if phase == "push":
        return bool(settings.push_to)
    return True


def run_loop(settings: LoopSettings, *, services: LoopServices | None = None,
             on_event: Callable[[str, dict[str, Any]], None] | None = None) -> LoopResult:
    """Run (or resume) the loop until `settings.iterations` iterations are finished.

    `services`: endpoints to use (the caller starts and stops them); by default the loop makes its
    own and stops them before returning. `on_event(kind, detail)` is told when each phase starts
    (``phase_started``) and ends (``phase_done``, ``phase_skipped`` for phases already done).
    """
    _check_paths(settings)
    out = settings.out_dir
    emit = on_event or (lambda kind, detail: None)
    out.mkdir(parents=True, exist_ok=True)
    state = load_state(settings)
    save_state(settings, state)
    with contextlib.ExitStack() as stack:
        if services is None:
            services = stack.enter_context(LoopServices(settings, on_event=emit))
        if settings.rollout.mode == "async":
            from webgym_rl.async_loop import run_async_loop

            record = run_async_loop(settings, services, state, emit)
            return LoopResult(out=out, checkpoint=record["versions"][-1]["checkpoint"],
                              iterations=[{"train": b.get("train", {})} for _, b in
                                          sorted(record["batches"].items(), key=lambda kv: int(kv[0]))])
        for iteration in range(settings.iterations):
            record = state["iterations"].setdefault(str(iteration), {})
            for phase in PHASES:
                if phase in record:
                    emit("phase_skipped", {"iteration": iteration, "phase": phase})
                    continue
                if not _due(settings, iteration, phase):
                    continue
                emit("phase_started", {"iteration": iteration, "phase": phase})
                began = time.perf_counter()
                try:
                    result = _run_phase(settings, services, state, iteration, phase)
                except Exception as exc:
                    state["last_error"] = {"iteration": iteration, "phase": phase,
                                           "error": f"{type(exc).__name__}: {exc}", "at": time.time()}
                    save_state(settings, state)
                    raise PhaseFailed(iteration, phase, exc, out) from exc
                result["seconds"] = time.perf_counter() - began
                record[phase] = result
                state["last_error"] = None
                save_state(settings, state)
                emit("phase_done", {"iteration": iteration, "phase": phase, "result": result})
    return LoopResult(out=out, checkpoint=_current_checkpoint(settings, state, settings.iterations),
                      iterations=[state["iterations"][str(i)] for i in range(settings.iterations)])


# ------------------------------------------------------------------------------------------- CLI

def _echo_event(kind: str, detail: dict[str, Any]) -> None:
    if kind == "phase_started":
        click.echo(f"[loop] iteration {detail['iteration']}: {detail['phase']} ...", err=True)
    elif kind == "phase_skipped":
        click.echo(f"[loop] iteration {detail['iteration']}: {detail['phase']} already done", err=True)
    elif kind == "phase_done":
        result = detail["result"]
        if detail["phase"] in ("rollout", "eval"):
            extra = (f"{result['episodes']} episodes, success {result['success_rate']:.1%}, valid actions "
                     f"{result['valid_action_rate']:.1%}, {result['steps_per_s']:.2f} steps/s")
        elif detail["phase"] == "train":
            extra = (f"skipped: {result['skipped']}" if result.get("skipped")
                     else f"{result['steps']} steps, loss {result['first_loss']:.4f} -> "
                          f"{result['last_loss']:.4f}")
        else:
            extra = str(result)
        click.echo(f"[loop] iteration {detail['iteration']}: {detail['phase']} done ({extra})", err=True)
    elif kind.startswith("policy_"):
        click.echo(f"[loop] {kind.replace('_', ' ')}: {detail.get('checkpoint', detail)}", err=True)
    elif kind in ("browser_started", "sites_started"):
        click.echo(f"[loop] {kind.replace('_', ' ')}: {detail['url']}", err=True)
    elif kind == "async_started":
        click.echo(f"[loop] async: from version {detail['version']}, {detail['batch_episodes']} episodes per "
                   f"version, max staleness {detail['max_staleness']}", err=True)
    elif kind == "chunk_started":
        click.echo(f"[loop] async: chunk {detail['chunk']} started (trainer at v{detail['version']})",
                   err=True)
    elif kind == "batch_ready":
        click.echo(f"[loop] async: batch for v{detail['version'] + 1} ready ({detail['episodes']} episodes, "
                   f"{detail['dropped_stale']} too stale); training", err=True)
    elif kind == "chunk_done":
        click.echo(f"[loop] async: chunk {detail['chunk']} done ({detail['episodes']} episodes, "
                   f"{detail['successes']} successes)", err=True)
    elif kind == "version_published":
        metrics = detail["metrics"]
        histogram = " ".join(f"{k}:{v}" for k, v in metrics["staleness_histogram"].items()) or "-"
        success = " ".join(f"v{v} {s['successes']}/{s['episodes']}"
                           for v, s in metrics["success_by_version"].items()) or "-"
        click.echo(f"[loop] async: v{detail['version']} published ({detail['checkpoint']}); "
                   f"{metrics['versions_published']} versions in {metrics['elapsed_s']:.0f} s; staleness of "
                   f"trained samples mean {metrics['staleness_mean']:.2f} max {metrics['staleness_max']} "
                   f"(versions behind:samples {histogram}); rollout idle {metrics['rollout_idle_s']:.1f} s, "
                   f"trainer idle {metrics['trainer_idle_s']:.1f} s; {metrics['episodes_per_s']:.2f} "
                   f"episodes/s, {metrics['samples_per_s']:.2f} samples/s; success by policy version "
                   f"{success}", err=True)
    elif kind == "eval_started":
        click.echo(f"[loop] async: evaluating v{detail['version']} (beside training)", err=True)
    elif kind == "eval_done":
        click.echo(f"[loop] async: v{detail['version']} evaluated: success {detail['success_rate']:.1%} of "
                   f"{detail['evaluated'][1]} ({detail['report']})", err=True)


@click.command("loop", context_settings={"help_option_names": ["-h", "--help"]})
@settings_options(LoopSettings)
def loop_command(config: str | None, **flags: Any) -> None:
    """Run the online RL loop: roll out, train, evaluate, repeat; resumable.

    Each iteration rolls out the train tasks with the current checkpoint (iteration 0 with the
    random policy by default), writes OUT/iter-XXXX/trajectories, trains on the last K iterations
    (filtered_bc) into OUT/iter-XXXX/checkpoint, and evaluates every --eval-every iterations (at
    --eval-temperature). Rerun the same command to resume at the first unfinished phase.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl loop --tasks out/tasks --only-environment miniwob --model out/tiny-qwen2vl \\
          --out out/loop --iterations 3 --eval-every 1 --max-steps 20
      # rollouts and training at once, episodes at most 1 version stale:
      webgym-rl loop --tasks out/tasks --model out/tiny-qwen2vl --out out/loop-async --mode async \\
          --iterations 3 --max-staleness 1 --sampler-batch-size 4
      # vLLM on a GPU machine, restarted with each new checkpoint (not tested without a GPU):
      webgym-rl loop --config loop.yaml --policy-base-url http://127.0.0.1:8000/v1 \\
          --policy-command 'vllm serve {checkpoint} --port {port} --served-model-name {name}'
    """
    from webgym_data.schema import TaskValidationError
    from webgym_rollout.errors import RolloutError

    try:
        settings = load_settings(LoopSettings, config, flags)
        result = run_loop(settings, on_event=_echo_event if settings.progress else None)
    except (SettingsError, WebgymRLError, TaskValidationError, RolloutError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{len(result.iterations)} iterations done in {result.out}; "
               f"newest checkpoint: {result.checkpoint}")
