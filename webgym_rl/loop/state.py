"""The loop's state file, ``OUT/loop_state.json``: typed records of what each round did.

Both schedules keep the same records (pydantic models, so a file that does not fit is refused with
the field named)::

    LoopState (schema_version 2)
     ├── identity, settings          what defines this run; the current settings (secrets blanked)
     ├── rounds: {r: RoundRecord}    round r trains version r + 1
     │    ├── rollout: RolloutRecord   sync: the round's own rollout (async: none, see batch)
     │    ├── batch: BatchRecord       the episodes the round adds to the training data
     │    ├── train: TrainRecord       what the resident trainer did in the round
     │    ├── eval: EvalRecord         the evaluation of version r + 1 (every --eval-every)
     │    └── push: PushRecord         the Hub push of version r + 1 (--push-to)
     ├── versions: [VersionRecord]   every publish, in order (v0 = the starting model); a version
     │                               superseded by a resume (its round trained again) says so
     ├── checkpoints: [CheckpointRecord]  the newest full trainer checkpoint (weights + optimizer)
     ├── superseded: [RoundRecord]   the records of rounds trained again after a resume
     ├── position, metrics, cancelled  the async schedule's stream position, figures, cancelled episodes
     └── last_error                  the phase that failed, if the last run failed

The file is rewritten atomically (`webgym_core.files.write_json_atomic`) after every phase, so a
crash leaves the previous state. A rerun with other values of the identity settings (`IDENTITY`)
is another run and is refused with `LoopStateError`; any other setting may change between reruns.
Secrets (API keys, tokens) are not written. A file of schema 1 (written before the loop was one
package) is read and converted (`_from_v1`): its trained rounds resume from their published
weights, with a fresh optimizer (as schema 1 itself did every round).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webgym_core.files import write_json_atomic
from webgym_core.settings import settings_to_dict
from webgym_rl.errors import LoopStateError

if TYPE_CHECKING:
    from webgym_rl.loop.settings import LoopSettings

__all__ = [
    "IDENTITY",
    "STATE_FILE",
    "STATE_VERSION",
    "AsyncMetrics",
    "BatchRecord",
    "CheckpointRecord",
    "ErrorRecord",
    "EvalRecord",
    "LoopState",
    "PushRecord",
    "RolloutRecord",
    "RoundRecord",
    "TrainRecord",
    "VersionRecord",
    "load_state",
    "save_state",
]

STATE_FILE = "loop_state.json"
STATE_VERSION = 2
IDENTITY = ("tasks", "model", "objective", "bootstrap_policy", "attempts", "split", "sampler",
            "seed", "schedule")
"""Settings that define what a loop folder holds (YAML keys): a rerun with other values is another run."""
_SECRETS = ("api_key", "browser_token")
_LOOP_FOLDERS = ("iter-", "rollouts", "batches", "checkpoints", "adapters", "evals", "trainer")
"""Folders a loop writes (``iter-`` those of schema 1): a folder with one of them but no state is
not a new loop folder."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.1f}%)" if whole else "0/0"


def _bugs(internal_errors: int) -> str:
    return (f"; BUG: {internal_errors} episodes ended error:internal (see the log; please report it)"
            if internal_errors else "")


class RolloutRecord(_Record):
    """One rollout (a round's, or an evaluation's): where it went and what it measured."""

    out: str
    """The trajectory folder."""
    tasks: str
    """The JSONL file of the tasks it played (drawn before it started)."""
    policy: str
    """Who played: ``random`` or the version ``v<N>``."""
    version: int = 0
    """The policy version that played (0 also for the random bootstrap)."""
    episodes: int = 0
    successes: int = 0
    errors: int = 0
    """Episodes that ended in an infrastructure failure (not counted against the agent)."""
    internal_errors: int = 0
    """Of `errors`, episodes with ``error:internal``: a bug of the toolkit, to report."""
    steps: int = 0
    valid_actions: int = 0
    success_rate: float = 0.0
    valid_action_rate: float = 0.0
    steps_per_s: float = 0.0
    elapsed_s: float = 0.0
    episodes_this_run: int = 0
    """Episodes played by the invocation that finished it (a resumed rollout plays the rest)."""
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"{self.episodes} episodes, success {_rate(self.successes, self.episodes - self.errors)} "
                f"of evaluated ({_rate(self.successes, self.episodes)} counting infrastructure failures), "
                f"valid actions {100 * self.valid_action_rate:.1f}%, {self.steps_per_s:.2f} steps/s"
                + _bugs(self.internal_errors))


class BatchRecord(_Record):
    """The episodes a round adds to the training data: a sync round's rollout folder, or the
    committed episodes an async round took from the stream, listed in `members` (recorded before
    it trains; nothing is copied)."""

    folder: str
    """A sync round's rollout folder; async: the folder of the rollout's chunks (the members'
    parent; a batch recorded before `members` existed: the folder its episodes were copied to)."""
    members: list[list[str]] = Field(default_factory=list)
    """Async: the batch's manifest, ``[chunk folder, episode id]`` per episode trained on (the taken
    episodes less the stale ones), in the order taken; the trainer reads them where the rollout
    wrote them, each as an episode of this round."""
    episodes: list[str] = Field(default_factory=list)
    """Async: the episode ids taken, in order (each committed episode belongs to one batch)."""
    dropped_stale: list[str] = Field(default_factory=list)
    """Async: episodes staler than --max-staleness, left out of the folder (every objective)."""
    staleness: dict[str, int] = Field(default_factory=dict)
    """Versions behind the trainer -> trainable samples (steps) of the batch's own episodes."""
    successes_by_version: dict[str, list[int]] = Field(default_factory=dict)
    """Policy version (of an episode's first step) -> [successes, judged episodes]."""
    position: dict[str, list[int]] = Field(default_factory=dict)
    """Async: the stream position after this batch (`webgym_rl.loop.stream.StreamPosition`)."""
    composed_at: float = 0.0
    waited_s: float = 0.0
    """How long the trainer waited for the batch."""


class TrainRecord(_Record):
    """What the resident trainer did in one round."""

    window: list[int] = Field(default_factory=list)
    """The rounds of the last --last-k-iterations whose batches had judged episodes."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Round -> sampling weight of its samples (recency: ``(age + 1) ** -recency_power``)."""
    samples_by_round: dict[str, int] = Field(default_factory=dict)
    """Round -> samples trained on from its batch: the provenance of the round's data."""
    data: list[str] = Field(default_factory=list)
    steps: int = 0
    """Optimizer steps of this round."""
    trainer_step: int = 0
    """Optimizer steps of the run after this round."""
    counts: dict[str, Any] = Field(default_factory=dict)
    """`webgym_rl.samples.SampleCounts` of the round's data."""
    samples: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    skipped: str | None = None
    """Why nothing was trained (no sample survived the selection)."""
    on_policy: dict[str, dict[str, float]] = Field(default_factory=dict)
    """The on-policy check before the round's first update, per policy version: ``{"v3": {"samples",
    "tokens", "mean_abs", "max_abs"}}``, the absolute difference between the trainer's and the
    rollout's log-probability of each sampled token (`webgym_rl.train.Trainer.on_policy_check`):
    noise for the version the trainer holds, the weights' drift since for older ones."""
    started_at: float = 0.0
    done_at: float = 0.0
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        loss = (f", loss {self.first_loss:.4f} -> {self.last_loss:.4f}"
                if self.first_loss is not None and self.last_loss is not None else "")
        groups = self.counts.get("group_sizes") or {}
        dropped = (f", {self.counts.get('groups_dropped', 0)} of {sum(groups.values())} groups dropped "
                   "(equal rewards)" if self.counts.get("groups_dropped") else "")
        check = "; on-policy check " + ", ".join(
            f"{version} mean {entry['mean_abs']:.1e} max {entry['max_abs']:.1e}"
            for version, entry in self.on_policy.items()) if self.on_policy else ""
        retokenised = (f"; {self.counts['retokenised']} samples without token ids (re-tokenised)"
                       if self.counts.get("retokenised") else "")
        return (f"{self.steps} steps on {self.samples} samples of rounds {self.window}{loss}{dropped}{check}"
                f"{retokenised}")


class EvalRecord(RolloutRecord):
    """An evaluation of one version."""

    evaluated: list[int] = Field(default_factory=lambda: [0, 0])
    """[successes, judged episodes] (infrastructure failures left out)."""
    success_low: float = 0.0
    success_high: float = 0.0
    report: str = ""
    learning_curve: str | None = None
    step_versions: dict[str, int] = Field(default_factory=dict)
    """Steps answered per version (async: an evaluation that outlasts a publish sees both)."""
    started_at: float = 0.0
    done_at: float = 0.0

    def summary(self) -> str:
        return (f"v{self.version}: success {_rate(*self.evaluated)} [{self.success_low:.2f}, "
                f"{self.success_high:.2f}] of evaluated, {_rate(self.evaluated[0], self.episodes)} counting "
                f"infrastructure failures ({self.report})" + _bugs(self.internal_errors))


class PushRecord(_Record):
    repo_id: str | None = None
    commit: str | None = None
    checkpoint: str | None = None
    skipped: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        return f"skipped: {self.skipped}" if self.skipped else f"{self.repo_id} @ {self.commit}"


class RoundRecord(_Record):
    rollout: RolloutRecord | None = None
    batch: BatchRecord | None = None
    train: TrainRecord | None = None
    eval: EvalRecord | None = None
    push: PushRecord | None = None
    round: int | None = None
    """Set on the records kept in `LoopState.superseded`."""


class VersionRecord(_Record):
    """One publish of a policy version to the endpoint."""

    version: int
    round: int | None = None
    """The round that trained it (None: version 0, the starting model)."""
    path: Literal["start", "memory", "folder"] = "folder"
    published_at: float = Field(default_factory=time.time)
    publish_s: float = 0.0
    """Trainer holds the weights -> the endpoint serves them."""
    checkpoint: str | None = None
    """A servable checkpoint folder of this version, if one was written."""
    adapter: str | None = None
    """LoRA: the version's adapter folder, if one was written."""
    superseded: bool = False
    """A resume trained this version's round again: another publish of the same number follows."""


class CheckpointRecord(_Record):
    """A checkpoint the resident trainer can resume from."""

    round: int
    """The last round it holds."""
    folder: str
    optimizer: bool = True
    """False for weights without optimizer state (a schema-1 loop folder): the trainer starts a fresh
    optimizer from them."""
    written_at: float = Field(default_factory=time.time)


class AsyncMetrics(_Record):
    """The asynchronous schedule's figures so far (also TensorBoard scalars under OUT/logs/async)."""

    versions_published: int = 0
    staleness_histogram: dict[str, int] = Field(default_factory=dict)
    staleness_mean: float = 0.0
    staleness_max: int = 0
    rollout_idle_s: float = 0.0
    """Time no episode was running (this process)."""
    trainer_idle_s: float = 0.0
    """Time the trainer waited for a batch (this process)."""
    elapsed_s: float = 0.0
    episodes_per_s: float = 0.0
    samples_per_s: float = 0.0
    success_by_version: dict[str, dict[str, float]] = Field(default_factory=dict)
    in_flight_max: int = 0
    """Most episodes running at once."""
    episodes_submitted: dict[str, int] = Field(default_factory=dict)
    """Version serving when they began -> episodes begun (this process;
    `webgym_rl.loop.staleness.StalenessManager`)."""
    episodes_accepted: dict[str, int] = Field(default_factory=dict)
    """Episode version -> episodes taken into a batch and trained on (this process)."""
    episodes_rejected: dict[str, int] = Field(default_factory=dict)
    """Episode version -> episodes taken but too stale: left out of their batch (this process)."""

    def summary(self) -> str:
        histogram = " ".join(f"{k}:{v}" for k, v in self.staleness_histogram.items()) or "-"
        success = " ".join(f"v{v} {int(s['successes'])}/{int(s['episodes'])}"
                           for v, s in self.success_by_version.items()) or "-"
        return (f"{self.versions_published} versions in {self.elapsed_s:.0f} s; staleness of trained samples "
                f"mean {self.staleness_mean:.2f} max {self.staleness_max} (versions behind:samples "
                f"{histogram}); rollout idle {self.rollout_idle_s:.1f} s, trainer idle "
                f"{self.trainer_idle_s:.1f} s; {self.episodes_per_s:.2f} episodes/s, "
                f"{self.samples_per_s:.2f} samples/s; success by policy version {success}; "
                f"episodes submitted/accepted/rejected by version {self._episodes_by_version()}")

    def _episodes_by_version(self) -> str:
        kinds = (self.episodes_submitted, self.episodes_accepted, self.episodes_rejected)
        versions = sorted({int(v) for counts in kinds for v in counts})
        return " ".join(f"v{v} " + "/".join(str(counts.get(str(v), 0)) for counts in kinds)
                        for v in versions) or "-"


class ErrorRecord(_Record):
    round: int
    phase: str
    error: str
    at: float = Field(default_factory=time.time)


class LoopState(_Record):
    schema_version: Literal[2] = STATE_VERSION
    identity: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    rounds: dict[int, RoundRecord] = Field(default_factory=dict)
    versions: list[VersionRecord] = Field(default_factory=list)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    superseded: list[RoundRecord] = Field(default_factory=list)
    position: dict[str, list[int]] = Field(default_factory=dict)
    """Async: the stream position after the last batch taken."""
    metrics: AsyncMetrics | None = None
    cancelled: int = 0
    """Async: episodes admitted but unfinished when the run ended (never trained on)."""
    last_error: ErrorRecord | None = None

    def round(self, r: int) -> RoundRecord:
        """The record of round `r` (made empty on first use)."""
        return self.rounds.setdefault(r, RoundRecord())

    @property
    def live_versions(self) -> list[VersionRecord]:
        """The versions not superseded, oldest first (v0 first)."""
        return [v for v in self.versions if not v.superseded]

    @property
    def version(self) -> VersionRecord:
        """The newest version not superseded (v0 before any training)."""
        return self.live_versions[-1]

    @property
    def trained_rounds(self) -> int:
        """How many rounds (from round 0, without gaps) have a train record."""
        r = 0
        while r in self.rounds and self.rounds[r].train is not None:
            r += 1
        return r


def _recorded(value: Any) -> Any:
    """`value` (from `settings_to_dict`) with the secrets blanked out."""
    if isinstance(value, Mapping):
        return {k: ("(set)" if k in _SECRETS and v else _recorded(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_recorded(v) for v in value]
    return value


def _identity(settings: LoopSettings) -> dict[str, Any]:
    # Flat groups' keys sit beside the loop's own (``objective``, ``attempts``), as in YAML.
    recorded = settings_to_dict(settings)
    return {name: recorded[name] for name in IDENTITY}


def load_state(settings: LoopSettings) -> LoopState:
    """The state of the loop folder ``settings.out``: a fresh one for a new folder, else the one in
    the file (schema 1 converted), checked against the identity settings (raises `LoopStateError`
    naming the one that differs) and with the current settings recorded."""
    out = settings.out_dir
    path = out / STATE_FILE
    identity = _identity(settings)
    recorded = _recorded(settings_to_dict(settings))
    if not path.exists():
        if out.is_dir() and any(p.name.startswith(_LOOP_FOLDERS) for p in out.iterdir()):
            raise LoopStateError(f"{out} holds a loop's folders but no {STATE_FILE}; "
                                 "choose an empty or new --out folder")
        return LoopState(identity=identity, settings=recorded,
                         versions=[VersionRecord(version=0, path="start", checkpoint=settings.model)])
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LoopStateError(f"{path} is unreadable: {exc}") from None
    if not isinstance(raw, dict) or raw.get("schema_version", raw.get("version")) not in (1, STATE_VERSION):
        raise LoopStateError(f"{path}: not a webgym-rl loop state (schema 1 or {STATE_VERSION})")
    if "schema_version" not in raw:
        raw = _from_v1(raw, settings)
    try:
        state = LoopState.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise LoopStateError(f"{path}: {where}: {first['msg']} ({exc.error_count()} problem(s))") from None
    for name, value in identity.items():
        if state.identity.get(name) != value:
            raise LoopStateError(
                f"{path} belongs to a run with {name}={state.identity.get(name)!r}, not {value!r}; "
                "rerun with the same value to resume, or choose a new --out folder")
    state.settings = recorded
    return state


def save_state(settings: LoopSettings, state: LoopState) -> Path:
    """Write `state` to the loop folder's state file, atomically; returns its path."""
    path = settings.out_dir / STATE_FILE
    write_json_atomic(path, state.model_dump(mode="json"))
    return path


# ------------------------------------------------------------------------------------- schema 1

_ROLLOUT_KEYS = set(RolloutRecord.model_fields) - {"policy", "version"}
_EVAL_KEYS = set(EvalRecord.model_fields) - {"policy", "version"}


def _pick(record: Mapping[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k in keys}


def _train_v1(record: Mapping[str, Any]) -> TrainRecord:
    counts = record.get("counts") or {}
    return TrainRecord(window=list(counts.get("iterations_kept", [])), data=list(record.get("data", [])),
                       steps=int(record.get("steps", 0)), counts=counts,
                       samples=int(record.get("samples", counts.get("steps_kept", 0))),
                       first_loss=record.get("first_loss"), last_loss=record.get("last_loss"),
                       skipped=record.get("skipped"), seconds=float(record.get("seconds", 0.0)))


def _from_v1(raw: dict[str, Any], settings: LoopSettings) -> dict[str, Any]:
    """A schema-1 state (``{"version": 1, "iterations": ...}`` for sync, ``"async": {...}`` for
    async) as a schema-2 one. Each trained round's published weights become the checkpoint the
    trainer resumes from (without optimizer state: schema 1 kept none across rounds)."""
    identity = dict(raw.get("identity", {}))
    identity["schedule"] = identity.pop("mode", "sync")
    state = LoopState(identity=identity, settings=raw.get("settings", {}),
                      versions=[VersionRecord(version=0, path="start", checkpoint=settings.model)])
    for key, record in sorted(raw.get("iterations", {}).items(), key=lambda kv: int(kv[0])):
        r = int(key)
        entry = state.round(r)
        if "rollout" in record:
            rollout = record["rollout"]
            played = rollout.get("checkpoint", "")
            entry.rollout = RolloutRecord(policy="random" if played == "random" else f"v{r}", version=r,
                                          **_pick(rollout, _ROLLOUT_KEYS))
            entry.batch = BatchRecord(folder=rollout["out"], successes_by_version={
                str(r): [int(rollout.get("successes", 0)),
                         int(rollout.get("episodes", 0)) - int(rollout.get("errors", 0))]})
        if "train" in record:
            entry.train = _train_v1(record["train"])
            checkpoint = record["train"]["checkpoint"]
            state.versions.append(VersionRecord(version=r + 1, round=r, path="folder", checkpoint=checkpoint))
            state.checkpoints.append(CheckpointRecord(round=r, folder=checkpoint, optimizer=False))
        if "eval" in record and not record["eval"].get("skipped"):
            evaluation = record["eval"]
            entry.eval = EvalRecord(policy=f"v{r + 1}", version=r + 1, **_pick(evaluation, _EVAL_KEYS))
        if "push" in record:
            entry.push = PushRecord(**_pick(record["push"], set(PushRecord.model_fields)))
    old = raw.get("async")
    if old:
        for published in old.get("versions", [])[1:]:
            r = int(published["version"]) - 1
            state.versions.append(VersionRecord(
                version=r + 1, round=r, path="folder", checkpoint=published.get("checkpoint"),
                adapter=published.get("adapter"), published_at=float(published.get("published_at", 0.0))))
            resume_from = published.get("adapter") or published.get("checkpoint")
            if resume_from:
                state.checkpoints.append(CheckpointRecord(round=r, folder=resume_from, optimizer=False))
        for key, batch in old.get("batches", {}).items():
            entry = state.round(int(key))
            entry.batch = BatchRecord(
                folder=batch["folder"], episodes=batch.get("episodes", []),
                dropped_stale=batch.get("dropped_stale", []), staleness=batch.get("staleness", {}),
                successes_by_version=batch.get("successes_by_version", {}),
                position=batch.get("position", {}), composed_at=float(batch.get("composed_at", 0.0)))
            if "train" in batch:
                entry.train = _train_v1(batch["train"])
        for key, evaluation in old.get("evals", {}).items():
            version = int(key)
            state.round(version - 1).eval = EvalRecord(policy=f"v{version}", version=version,
                                                       **_pick(evaluation, _EVAL_KEYS))
        state.position = {str(k): [int(v[0]), int(v[1])] for k, v in old.get("position", {}).items()}
    if raw.get("last_error"):
        error = raw["last_error"]
        state.last_error = ErrorRecord(round=int(error.get("iteration", 0)),
                                       phase=str(error.get("phase", "")), error=str(error.get("error", "")),
                                       at=float(error.get("at", 0.0)))
    return state.model_dump(mode="json")
