"""`LoopSettings`: everything ``webgym-rl loop`` needs, composed of the settings of the parts it drives.

Each group is defined once where its layer keeps its settings and held here as a field: the rollout
(`RolloutSettings`), the environment (`webgym_rollout.settings.EnvSettings`), the loop's own
browser server (`PoolSettings`, flags ``--pool-*``), the judge (`JudgeSettings`, ``--judge*``), the
samplers (``--sampler*``, ``--eval-sampler*``), the training (`webgym_rl.settings.OptimizationSettings`).
The loop's own groups are here, in the one module the loop's other modules read them from:
`PolicyEndpointSettings` (the policy endpoint, ``--policy-*``), `AsyncSettings` (the asynchronous
schedule) and `ResidentTrainerSettings` (the resident trainer process: where it runs, how often it
checkpoints, how it publishes). Filled from defaults, then a YAML file or a shipped recipe
(`webgym_rl.loop.recipes`), then CLI flags (`webgym_core.settings`).

Two names that sound alike: ``schedule`` is the loop's (``sync``: roll out, then train, in turn;
``async``: both at once under a staleness bound); ``lockstep`` (of `RolloutSettings`) is how the
episodes of one rollout are scheduled (the naive lockstep baseline, or each at its own pace).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from webgym_core.endpoint import Endpoint
from webgym_core.lazy import moved_names
from webgym_core.settings import flat
from webgym_core.sources import url_problem
from webgym_data.sampler import SamplerSettings
from webgym_rl.errors import LoopSettingsError
from webgym_rl.settings import OptimizationSettings
from webgym_rollout.agent.policies import SamplingSettings
from webgym_rollout.agent.protocol import AgentSettings
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.fleet import FleetSettings
from webgym_rollout.judge.judges import JudgeSettings
from webgym_rollout.report.html import ReportSettings
from webgym_rollout.runner import RolloutSettings
from webgym_rollout.settings import EnvSettings
from webgym_rollout.tasks.kind import kind_names

__all__ = ["AsyncSettings", "Bootstrap", "LoopSettings", "PolicyEndpointSettings", "Publish",
           "ResidentTrainerSettings", "Schedule", "Split", "UpdaterKind"]

# Renamed in 0.3.0 (the resident trainer process's settings); the old name goes in the next release.
__getattr__ = moved_names(__name__, {"TrainerSettings": "webgym_rl.loop.settings:ResidentTrainerSettings"})

_SERVED_NAME = "webgym-policy"
UpdaterKind = Literal["auto", "cpu", "vllm_lora", "vllm_weights", "restart"]


@dataclass(frozen=True)
class PolicyEndpointSettings:
    """The policy endpoint the loop's rollouts call, and how it is switched to each new checkpoint
    (the ``--policy-*`` flags of ``webgym-rl loop``)."""

    endpoint: Endpoint = flat(lambda: Endpoint(model=_SERVED_NAME))
    """Where the policy is served: ``base_url`` ('' = the CPU policy server the loop runs) and
    ``model``, the name it is served under (vLLM: --served-model-name)."""
    sampling: SamplingSettings = flat(SamplingSettings)
    """Sampling of the train rollouts (the evaluation uses ``LoopSettings.eval_temperature``)."""
    agent: AgentSettings = flat(AgentSettings)
    command: str = ""
    """Command that serves a checkpoint, restarted for each new one; placeholders {checkpoint},
    {port}, {name}. E.g. 'vllm serve {checkpoint} --port {port} --served-model-name {name}'."""
    reload_url: str | None = None
    """With --policy-base-url: URL the loop POSTs {"model": CHECKPOINT} to for each new checkpoint."""
    start_timeout_s: float = 900.0
    """How long a started --policy-command may take until /v1/models answers (also the reload's bound)."""
    max_new_tokens: int = 256
    """CPU policy server: most tokens generated per reply."""
    updater: UpdaterKind = "auto"
    """How the loop switches the endpoint to each new version: auto (the CPU policy server, or
    restart for --policy-command), cpu (POST /weights or /reload), vllm_lora (with --lora: each
    version's LoRA adapter loaded into a vLLM serving --model), vllm_weights (vLLM's pause / update
    weights / resume), restart (restart --policy-command)."""

    def __post_init__(self) -> None:
        base_url = self.endpoint.base_url
        vllm_updater = self.updater in ("vllm_lora", "vllm_weights")
        if base_url and not (self.command or self.reload_url or vllm_updater):
            raise LoopSettingsError(
                "base_url: needs a way to switch the endpoint to each new checkpoint: --policy-command "
                "(the loop restarts it), --policy-reload-url (the loop POSTs to it), or --policy-updater "
                "vllm_lora / vllm_weights")
        if self.reload_url and not base_url:
            raise LoopSettingsError("reload_url: goes with --policy-base-url (the endpoint it reloads)")
        if self.command and not any("{checkpoint}" in arg for arg in self.argv):
            raise LoopSettingsError("command: must contain {checkpoint} (where the checkpoint folder goes), "
                                    f"got {self.command!r}")
        if not self.start_timeout_s > 0:
            raise LoopSettingsError(f"start_timeout_s: must be > 0, got {self.start_timeout_s}")
        if self.max_new_tokens < 1:
            raise LoopSettingsError(f"max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        if self.updater not in get_args(UpdaterKind):
            raise LoopSettingsError(f"updater: {self.updater!r} is unknown; choose auto, cpu, vllm_lora, "
                                    "vllm_weights or restart")
        if self.updater in ("vllm_lora", "vllm_weights") and not base_url:
            raise LoopSettingsError(f"updater: {self.updater} needs --policy-base-url (the vLLM server)")
        if self.updater == "restart" and not self.command:
            raise LoopSettingsError("updater: restart needs --policy-command (what to restart)")

    @property
    def served_name(self) -> str:
        """The model name the policy is served under."""
        return self.endpoint.model or _SERVED_NAME

    @property
    def argv(self) -> list[str]:
        """`command` split into arguments (placeholders not yet replaced)."""
        return shlex.split(self.command)


Schedule = Literal["sync", "async"]
Split = Literal["train", "test"]
Bootstrap = Literal["model", "random"]
Publish = Literal["auto", "memory", "folder"]


@dataclass(frozen=True)
class AsyncSettings:
    """The asynchronous schedule (``--schedule async``): staleness bound and batching."""

    max_staleness: int = 1
    """Most versions an episode's oldest step may lag behind the trainer (0 = on-policy only)."""
    batch_episodes: int = 0
    """Committed episodes per training round (0 = one task batch: the sampler's batch x attempts)."""
    overprovision: int = 0
    """Episodes admitted beyond what the batches need, so that a batch takes the first episodes to
    finish instead of waiting for the slowest; the rest count toward the next batch, and those still
    unfinished when the run ends are cancelled (counted in the state, never trained on)."""
    commit_every: int = 1
    """Episodes per trajectory shard: the trainer sees an episode once its shard is committed."""
    poll_s: float = 0.2
    """How often the trainer looks for newly committed shards while it waits."""

    def __post_init__(self) -> None:
        for name in ("max_staleness", "batch_episodes", "overprovision"):
            if getattr(self, name) < 0:
                raise LoopSettingsError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.commit_every < 1:
            raise LoopSettingsError(f"commit_every: must be >= 1, got {self.commit_every}")
        if not self.poll_s > 0:
            raise LoopSettingsError(f"poll_s: must be > 0, got {self.poll_s}")


@dataclass(frozen=True)
class ResidentTrainerSettings:
    """The resident trainer (`webgym_rl.loop.resident`): the model, optimizer, learning-rate schedule
    and Accelerate state stay in memory from the first round to the last."""

    checkpoint_every: int = 1
    """Write a full checkpoint (weights, optimizer, schedule, RNG) every N versions, and always at
    the end; a rerun after a crash resumes from the newest one and trains the rounds after it again."""
    train_process: bool = True
    """Run the trainer in a child process of its own (imports paid once; in this process it would
    share Python's GIL with the rollouts). Off: in this process (tests, debugging)."""
    train_launcher: str = ""
    """Run the trainer under this launcher, e.g. 'accelerate launch --config_file fsdp.yaml' for
    several GPUs; its ranks stay up across versions ('' = one process)."""
    publish: Publish = "auto"
    """How each new version reaches the policy endpoint: memory (the weights are sent over the CPU
    policy server's API, no disk), folder (a checkpoint folder the endpoint loads), auto (memory
    where the endpoint takes it, else folder)."""

    def __post_init__(self) -> None:
        if self.checkpoint_every < 1:
            raise LoopSettingsError(f"checkpoint_every: must be >= 1, got {self.checkpoint_every}")
        if self.publish not in get_args(Publish):
            raise LoopSettingsError(f"publish: {self.publish!r} is unknown; choose auto, memory or folder")


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
    """Loop folder: loop_state.json, the rounds' rollouts, batches, versions and checkpoints."""
    iterations: int = 1
    """Training rounds (policy versions) to have finished when the command ends (a rerun with a
    larger value continues)."""
    schedule: Schedule = "sync"
    """sync: each round rolls out its batch, then trains on it, then evaluates; async: rollouts and
    training at once, every episode at most --max-staleness versions behind the trainer."""
    split: Split = "train"
    """Task split rolled out for training."""
    bootstrap_policy: Bootstrap = "model"
    """Policy of the first rollouts (before any training): 'model' (the starting model, the
    paper's starting point) or 'random' (the DOM-aware random policy; it never answers, so web
    tasks judged by a rubric give it no success)."""
    servers: list[str] = field(default_factory=list)
    """Running browser servers (repeat); none = the loop runs one on 127.0.0.1 (see --pool-*)."""
    fleet: FleetSettings = flat(FleetSettings)
    """A browser fleet on Ray (--fleet NAME --ray-address ADDR) instead of --servers."""
    browser_token: str | None = field(default=None, metadata={"env": "WEBGYM_BROWSER_TOKEN"})
    """Bearer token of the browser servers."""
    eval_every: int = 0
    """Evaluate every M-th version on the evaluation tasks (0 = never): in sync right after its
    round, in async on a thread of its own while rollouts and training go on."""
    eval_tasks: str | None = None
    """Evaluation task source (default: --tasks)."""
    eval_split: Split = "test"
    """Split of the evaluation tasks."""
    eval_temperature: float = 0.0
    """Sampling temperature of the evaluation rollouts (train rollouts use --policy-temperature)."""
    eval_attempts: int = 1
    """Attempts per evaluation task (train rollouts use --attempts; at temperature 0 a second
    attempt mostly replays the first)."""
    eval_horizons: Literal["split", "train", "test"] = "test"
    """Step budgets of the evaluation rollouts: the test horizons (the paper's protocol), the
    train ones, or those of the evaluation split."""
    push_to: str | None = None
    """Hub model repository to push each version's checkpoint to (none = no push)."""
    push_private: bool = False
    """Create the Hub repository as private."""
    skip_empty_train: bool = True
    """A round with nothing to train on (e.g. no success) publishes the weights unchanged instead of
    failing."""
    seed: int = 0
    """Seed of the rollouts and the training data order (each round derives its own)."""
    progress: bool = True
    """Show progress on the terminal."""
    rollout: RolloutSettings = flat(lambda: RolloutSettings(concurrency=4))
    async_loop: AsyncSettings = flat(AsyncSettings)
    trainer: ResidentTrainerSettings = flat(ResidentTrainerSettings)
    env: EnvSettings = flat(EnvSettings)
    sampler: SamplerSettings = field(default_factory=lambda: SamplerSettings(kind="epoch"))
    """Which training tasks each round rolls out (--sampler*: strategy, batch size, filters); by
    default a fresh random batch each round (epoch: without replacement until all were drawn)."""
    eval_sampler: SamplerSettings = field(default_factory=SamplerSettings)
    """Which evaluation tasks each evaluation rolls out (--eval-sampler*; default: all of them)."""
    report: ReportSettings = field(default_factory=ReportSettings)
    """The evaluation report written after each evaluation (--report-*)."""
    pool: PoolSettings = field(default_factory=lambda: PoolSettings(browsers=1, contexts_per_browser=4))
    """The loop's own browser server (used when --servers is not given)."""
    policy: PolicyEndpointSettings = field(default_factory=PolicyEndpointSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    training: OptimizationSettings = flat(OptimizationSettings)

    def __post_init__(self) -> None:
        for name in ("tasks", "model", "out"):
            if not getattr(self, name):
                raise LoopSettingsError(f"{name}: is required")
        for name, allowed in (("split", Split), ("eval_split", Split), ("bootstrap_policy", Bootstrap),
                              ("schedule", Schedule)):
            if getattr(self, name) not in get_args(allowed):
                raise LoopSettingsError(f"{name}: {getattr(self, name)!r} is unknown; choose one of "
                                        f"{', '.join(repr(a) for a in get_args(allowed))}")
        kinds = _environment_kinds()
        for name in ("sampler", "eval_sampler"):
            unknown = sorted(set(getattr(self, name).kinds) - set(kinds))
            if unknown:
                raise LoopSettingsError(f"{name}.kinds: {', '.join(unknown)} unknown; choose from "
                                        f"{', '.join(kinds)}")
        for url in self.servers:
            if url_problem(url):
                raise LoopSettingsError(url_problem(url, what="servers: browser server URL"))
        if self.eval_sampler.kind == "success_aware":
            raise LoopSettingsError("eval_sampler.kind: success_aware draws by the policy's training "
                                    "history; evaluations keep none (use all, epoch or uniform_difficulty)")
        if self.policy.updater == "vllm_lora" and not self.training.lora:
            raise LoopSettingsError(
                "policy.updater: vllm_lora loads each version as a LoRA adapter of --model, so it needs "
                "training.lora (--lora); for a full fine-tune use --policy-updater vllm_weights")
        if self.trainer.publish == "memory" and (self.policy.endpoint.base_url or self.policy.command):
            raise LoopSettingsError("trainer.publish: memory sends the weights to the CPU policy server "
                                    "the loop runs; an endpoint given by --policy-base-url or "
                                    "--policy-command loads folders (use --publish folder or auto)")
        if self.servers and self.fleet.enabled:
            raise LoopSettingsError(f"servers: give browser server URLs or --fleet {self.fleet.fleet}, "
                                    "not both")
        if self.iterations < 1:
            raise LoopSettingsError(f"iterations: must be >= 1, got {self.iterations}")
        if self.training.lr_scheduler != "constant" and not self.training.max_steps:
            raise LoopSettingsError(
                f"lr_scheduler: {self.training.lr_scheduler} decays over the run's optimizer steps, which "
                "the loop knows only with --max-steps (steps per round); give it, or use 'constant'")
        if self.eval_attempts < 1:
            raise LoopSettingsError(f"eval_attempts: must be >= 1, got {self.eval_attempts}")
        for name in ("eval_every", "eval_temperature"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise LoopSettingsError(f"{name}: must be >= 0, got {value}")

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    @property
    def total_steps(self) -> int | None:
        """Optimizer steps of the whole run, when known in advance (--max-steps per round)."""
        return self.iterations * self.training.max_steps if self.training.max_steps else None
