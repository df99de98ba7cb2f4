"""The settings of a rollout run: `RolloutSettings` (how episodes are scheduled and stored, shared
by ``webgym-rollout run`` and ``webgym-rl loop``) and `RunSettings` (the whole ``run`` command)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from webgym_core.settings import flat
from webgym_core.sources import url_problem
from webgym_data.sampler import SamplerSettings
from webgym_rollout.agent.policies import PolicySettings
from webgym_rollout.fleet import FleetSettings
from webgym_rollout.judge.judges import JudgeSettings
from webgym_rollout.settings import EnvSettings
from webgym_rollout.trajectory.recordings import RecordSettings
from webgym_sites.truth import TruthSettings

__all__ = ["RolloutSettings", "RunSettings"]


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
    start_order: Literal["longest", "given"] = "longest"
    """Which episodes start first: longest, those expected to take the most steps (by their website
    and step budget, learnt from the run's ended episodes and, in a resumed run, the earlier ones),
    so that the run ends on short episodes and its drain is short; or given, the order of the tasks.
    Asynchronous schedule only: the lockstep schedule plays the tasks in order."""
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
        for url in self.servers:
            if url_problem(url):
                raise ValueError(url_problem(url, what="servers: browser server URL"))
        if self.sampler.kind == "success_aware":
            raise ValueError("sampler.kind: success_aware draws by the outcomes of earlier iterations, which "
                             "`webgym-rollout run` does not keep; use it in `webgym-rl loop` (which keeps "
                             "them), or choose epoch or uniform_difficulty")

    @property
    def horizon_split(self) -> str:
        """The split whose horizon table the episodes use."""
        return self.split if self.horizon_table == "split" else self.horizon_table
