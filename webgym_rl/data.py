"""Training samples from trajectory shards: one sample per kept step of a kept episode.

A sample's prompt is the exact chat the policy saw at that step (`expand_messages` puts the
screenshots back) and its target is the raw response the policy returned. Which episodes and
steps are kept, and with what weight or advantage, depends on the objective:

- ``filtered_bc``: steps of successful episodes (``reward >= success_threshold``) of the last K
  iterations, ``same_as_next`` steps dropped; sampled with recency weights
  ``(age + 1) ** -recency_power`` (age 0 = the newest iteration).
- ``reinforce``: steps of every judged episode of the last K iterations, ``same_as_next`` steps
  dropped; advantage = reward minus the mean reward of that task's attempts in the same iteration
  (optionally divided by the group's standard deviation), clipped to ``[-clip, clip]``.

Episodes are never trained on when they belong to the test split, have no reward, or ended in an
infrastructure failure (``status`` ``error:<kind>`` or ``blocked``): those say nothing about the
agent. Everything skipped is counted in `SampleCounts`.

Exceptions::

    TrainingDataError (ValueError)   bad or unusable trajectory data; the message names the source
     ├── MissingColumnError          a shard lacks a column the trainer reads (names file + column)
     └── NoTrainingDataError         nothing left to train on (empty, reward-free, all filtered)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from webgym_rollout.trajectory import expand_messages

__all__ = [
    "OBJECTIVE_NAMES",
    "MissingColumnError",
    "NoTrainingDataError",
    "Sample",
    "SampleCounts",
    "StepSamples",
    "TrainingDataError",
    "TrajectorySource",
    "build_samples",
    "describe_sources",
    "load_trajectories",
]

log = logging.getLogger(__name__)

Objective = Literal["filtered_bc", "reinforce"]
OBJECTIVE_NAMES: tuple[str, ...] = ("filtered_bc", "reinforce")

# What the trainer reads; every other column of a trajectory row is ignored here.
REQUIRED_COLUMNS = ("episode_id", "iteration", "task_id", "split", "reward", "status", "steps")
REQUIRED_STEP_FIELDS = ("screenshot", "messages", "response", "same_as_next")


class TrainingDataError(ValueError):
    """Trajectory data the trainer cannot use; the message names the source, file or column."""


class MissingColumnError(TrainingDataError):
    """A shard lacks a column (or step field) the trainer reads."""


class NoTrainingDataError(TrainingDataError):
    """After reading and filtering, nothing is left to train on."""


@dataclass(frozen=True)
class TrajectorySource:
    """One loaded trajectory dataset (a rollout folder or a Hub dataset at a revision)."""

    id: str
    """The folder path or the Hub dataset id, as given."""
    version: str
    """Hub: the resolved commit; folder: a digest of its parquet file names and sizes."""
    dataset: Any
    """The `datasets.Dataset` of episode rows."""


@dataclass
class Sample:
    """One training sample: the prompt the policy saw and the response it gave."""

    messages: list[dict[str, Any]]
    """Chat messages with image parts ``{"type": "image", "image": PIL.Image}``."""
    response: str
    """The raw policy response (the target)."""
    advantage: float
    """1.0 for filtered_bc; the clipped advantage for reinforce."""
    episode_id: str
    step: int


@dataclass
class SampleCounts:
    """What was read and what was kept, for the log, the metrics and the model card."""

    objective: str
    trajectories_read: int = 0
    trajectories_kept: int = 0
    steps_read: int = 0
    steps_kept: int = 0
    same_as_next_dropped: int = 0
    iterations_kept: list[int] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Episodes not used, by reason."""

    def summary(self) -> str:
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items())) or "none"
        return (f"{self.objective}: {self.trajectories_read} trajectories read, "
                f"{self.trajectories_kept} kept (iterations {self.iterations_kept}); "
                f"{self.steps_read} steps read, {self.steps_kept} kept, "
                f"{self.same_as_next_dropped} same_as_next dropped; skipped: {skipped}")

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class _StepRef:
    source: int
    row: int
    step: int


class StepSamples:
    """A map-style dataset of `Sample` (usable by a torch ``DataLoader``); images decode lazily."""

    def __init__(self, sources: Sequence[TrajectorySource], refs: Sequence[_StepRef],
                 advantages: Sequence[float], weights: Sequence[float], counts: SampleCounts):
        self.sources = list(sources)
        self._refs = list(refs)
        self.advantages = list(advantages)
        self.weights = list(weights)
        """Relative sampling weight of each sample (recency); all 1.0 when uniform."""
        self.counts = counts
        # Arrow rows: reading one step's bytes decodes nothing else of the episode.
        self._tables = [source.dataset.with_format("arrow") for source in self.sources]

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, index: int) -> Sample:
        from datasets import Image

        ref = self._refs[index]
        table = self._tables[ref.source][ref.row]
        episode_id = table.column("episode_id")[0].as_py()
        steps = table.column("steps")[0].values
        step = {name: steps.field(name) for name in ("screenshot", "messages", "response")}
        decoder = Image()

        def image_for_step(j: int):
            if not 0 <= j < len(steps):
                raise TrainingDataError(f"episode {episode_id} step {ref.step}: its messages show the "
                                        f"screenshot of step {j}, but the episode has {len(steps)} steps")
            stored = step["screenshot"][j].as_py()
            if not stored or (stored.get("bytes") is None and not stored.get("path")):
                raise TrainingDataError(f"episode {episode_id} step {ref.step}: its messages show the "
                                        f"screenshot of step {j}, which has no image")
            image = decoder.decode_example(stored)
            return image.convert("RGB") if image.mode != "RGB" else image

        messages = expand_messages(step["messages"][ref.step].as_py(), image_for_step)
        return Sample(messages=messages, response=step["response"][ref.step].as_py() or "",
                      advantage=self.advantages[index], episode_id=episode_id, step=ref.step)


def _parquet_files(folder: Path) -> list[Path]:
    """The shards of a rollout folder: those its manifest.json lists when it has one (a shard a
    crash left unlisted may repeat episodes), else every non-hidden ``*.parquet`` below it (hidden
    files are a writer's temporaries)."""
    manifest = folder / "manifest.json"
    if manifest.is_file():
        try:
            shards = json.loads(manifest.read_text(encoding="utf-8")).get("shards")
        except (OSError, ValueError, AttributeError) as exc:
            raise TrainingDataError(f"{manifest} cannot be read: {exc}") from exc
        if isinstance(shards, list) and all(isinstance(s, dict) and "path" in s for s in shards):
            files = [folder / s["path"] for s in shards]
            for path in files:
                if not path.is_file():
                    raise TrainingDataError(f"{manifest} lists {path.relative_to(folder)}, which is missing")
            return files
    return sorted(p for p in folder.rglob("*.parquet")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _check_schema(names: Sequence[str], step_names: Sequence[str] | None, where: str) -> None:
    for column in REQUIRED_COLUMNS:
        if column not in names:
            raise MissingColumnError(f"{where}: missing column '{column}' (a trajectory shard needs "
                                     f"{', '.join(REQUIRED_COLUMNS)}; see webgym_rollout.trajectory)")
    for name in REQUIRED_STEP_FIELDS:
        if step_names is not None and name not in step_names:
            raise MissingColumnError(f"{where}: missing step field 'steps.{name}'")


def _arrow_step_names(schema) -> list[str] | None:
    import pyarrow as pa

    steps = schema.field("steps").type
    if pa.types.is_list(steps) or pa.types.is_large_list(steps):
        inner = steps.value_type
        if pa.types.is_struct(inner):
            return [inner.field(i).name for i in range(inner.num_fields)]
    return []


def _load_folder(folder: Path, cache_dir: str | None) -> TrajectorySource:
    import datasets
    import pyarrow.parquet as pq

    files = _parquet_files(folder)
    if not files:
        raise NoTrainingDataError(f"{folder}: no parquet shards found (expected <folder>/data/*.parquet)")
    # A shard with no rows says nothing (and may not even carry the schema): skip it.
    files = [path for path in files if pq.read_metadata(path).num_rows > 0]
    if not files:
        raise NoTrainingDataError(f"no trajectories in {folder}: the trajectory set is empty "
                                  "(every parquet shard has 0 rows)")
    digest = hashlib.sha256()
    for path in files:
        schema = pq.read_schema(path)
        _check_schema(schema.names, _arrow_step_names(schema) if "steps" in schema.names else None, str(path))
        digest.update(f"{path.relative_to(folder)}:{path.stat().st_size}\n".encode())
    dataset = datasets.load_dataset("parquet", data_files=[str(p) for p in files], split="train",
                                    cache_dir=cache_dir)
    return TrajectorySource(id=str(folder), version=digest.hexdigest()[:16], dataset=dataset)


def _load_hub(repo_id: str, revision: str, cache_dir: str | None) -> TrajectorySource:
    import datasets
    from huggingface_hub import HfApi

    try:
        loaded = datasets.load_dataset(repo_id, revision=revision, cache_dir=cache_dir)
    except Exception as exc:  # the Hub raises many kinds; the user needs the id
        raise TrainingDataError(f"cannot load trajectory dataset '{repo_id}' at revision '{revision}' "
                                f"(not a local folder either): {exc}") from exc
    splits = list(loaded.values()) if isinstance(loaded, datasets.DatasetDict) else [loaded]
    for split in splits:
        inner = getattr(split.features.get("steps"), "feature", None)  # datasets.List(...) of a dict
        step_names = list(inner) if isinstance(inner, dict) else None
        _check_schema(split.column_names, step_names, f"Hub dataset {repo_id}@{revision}")
    dataset = datasets.concatenate_datasets(splits) if len(splits) > 1 else splits[0]
    try:
        version = HfApi().dataset_info(repo_id, revision=revision).sha or revision
    except Exception:  # the version is informative only; the data did load
        version = revision
    return TrajectorySource(id=repo_id, version=version, dataset=dataset)


def load_trajectories(sources: Sequence[str | Path], *,
                      cache_dir: str | Path | None = None) -> list[TrajectorySource]:
    """Load each source: a local rollout folder (all ``*.parquet`` below it) or a Hub dataset id,
    optionally ``id@revision`` (default ``main``). Raises `MissingColumnError` naming the shard."""
    if not sources:
        raise NoTrainingDataError("no trajectory sources given (pass one or more --data folders or Hub ids)")
    loaded = []
    cache = str(cache_dir) if cache_dir else None
    for source in sources:
        path = Path(source)
        if path.exists():
            if not path.is_dir():
                raise TrainingDataError(f"{path}: expected a rollout folder, got a file")
            loaded.append(_load_folder(path, cache))
        else:
            repo_id, _, revision = str(source).partition("@")
            loaded.append(_load_hub(repo_id, revision or "main", cache))
    return loaded


def _skip_reason(split: str | None, status: str | None, reward: float | None) -> str | None:
    if split == "test":
        return "test-split episodes"
    if status and (status.startswith("error:") or status == "blocked"):
        return "infrastructure failures"
    if reward is None:
        return "episodes without reward"
    return None


def build_samples(
    sources: Sequence[TrajectorySource],
    objective: Objective,
    *,
    last_k_iterations: int = 4,
    recency_power: float = 1.0,
    success_threshold: float = 1.0,
    normalize_advantage: bool = False,
    advantage_clip: float = 5.0,
    drop_same_as_next: bool = True,
) -> StepSamples:
    """Select the training samples of `objective` from `sources` (see the module docstring).

    Raises `NoTrainingDataError` when the set is empty, has no rewards, or nothing survives."""
    if objective not in OBJECTIVE_NAMES:
        raise TrainingDataError(f"unknown objective '{objective}'; "
                                f"choose one of {', '.join(OBJECTIVE_NAMES)}")
    names = ", ".join(source.id for source in sources)
    counts = SampleCounts(objective=objective)
    skipped: Counter[str] = Counter()
    episodes = []  # (source, row, iteration, task_id, reward, same_as_next flags)
    for s, source in enumerate(sources):
        # Arrow columns: the flags are read without touching (or decoding) a single screenshot.
        table = source.dataset.with_format("arrow")[:]
        columns = {name: table.column(name).to_pylist()
                   for name in ("iteration", "task_id", "split", "reward", "status")}
        flags: list[list[bool]] = []
        for chunk in table.column("steps").chunks:
            lengths = chunk.value_lengths().fill_null(0).to_pylist()
            values = chunk.flatten().field("same_as_next").fill_null(False).to_pylist()
            offset = 0
            for n in lengths:
                flags.append(values[offset:offset + n])
                offset += n
        for row in range(table.num_rows):
            counts.trajectories_read += 1
            counts.steps_read += len(flags[row])
            reason = _skip_reason(columns["split"][row], columns["status"][row], columns["reward"][row])
            if reason:
                skipped[reason] += 1
                continue
            episodes.append((s, row, int(columns["iteration"][row] or 0), columns["task_id"][row],
                             float(columns["reward"][row]), flags[row]))
    if counts.trajectories_read == 0:
        raise NoTrainingDataError(f"no trajectories in {names}: the trajectory set is empty")
    if not episodes:
        raise NoTrainingDataError(f"none of the {counts.trajectories_read} trajectories in {names} can be "
                                  f"trained on ({dict(skipped)}): the set is reward-free")

    iterations = sorted({episode[2] for episode in episodes})
    kept_iterations = iterations[-last_k_iterations:] if last_k_iterations > 0 else iterations
    age = {it: len(kept_iterations) - 1 - i for i, it in enumerate(kept_iterations)}
    counts.iterations_kept = kept_iterations
    older = [e for e in episodes if e[2] not in age]
    if older:
        skipped[f"episodes older than the last {last_k_iterations} iterations"] += len(older)
    episodes = [e for e in episodes if e[2] in age]

    advantage_of: dict[int, float] = {}
    if objective == "filtered_bc":
        failed = [i for i, e in enumerate(episodes) if e[4] < success_threshold]
        if failed:
            skipped[f"episodes with reward < {success_threshold:g}"] += len(failed)
        episodes = [e for e in episodes if e[4] >= success_threshold]
        if not episodes:
            raise NoTrainingDataError(f"filtered_bc: no trajectory in {names} has reward >= "
                                      f"{success_threshold:g} (of {counts.trajectories_read} read): "
                                      "nothing to imitate")
        advantage_of = {i: 1.0 for i in range(len(episodes))}
    else:
        groups: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i, e in enumerate(episodes):
            groups[(e[2], e[3])].append(i)
        for members in groups.values():
            rewards = [episodes[i][4] for i in members]
            mean = sum(rewards) / len(rewards)
            std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
            for i in members:
                value = episodes[i][4] - mean
                if normalize_advantage:
                    value /= std + 1e-6
                advantage_of[i] = max(-advantage_clip, min(advantage_clip, value))
        if all(abs(a) < 1e-12 for a in advantage_of.values()):
            raise NoTrainingDataError(f"reinforce: every advantage in {names} is zero (each task got the "
                                      "same reward on all its attempts): no learning signal")

    refs, advantages, weights = [], [], []
    for i, (s, row, iteration, _task, _reward, flags) in enumerate(episodes):
        counts.trajectories_kept += 1
        for j, same in enumerate(flags):
            if same and drop_same_as_next:
                counts.same_as_next_dropped += 1
                continue
            refs.append(_StepRef(s, row, j))
            advantages.append(advantage_of[i])
            weights.append((age[iteration] + 1) ** -recency_power if objective == "filtered_bc" else 1.0)
    counts.steps_kept = len(refs)
    counts.skipped = dict(skipped)
    if not refs:
        raise NoTrainingDataError(f"{objective}: the kept trajectories in {names} have no trainable steps "
                                  f"({counts.same_as_next_dropped} same_as_next steps dropped)")
    log.info("%s", counts.summary())
    return StepSamples(sources, refs, advantages, weights, counts)


def describe_sources(sources: Sequence[TrajectorySource]) -> list[dict[str, Any]]:
    """``[{"id", "version", "rows"}]`` for the trainer state and the model card."""
    return [{"id": s.id, "version": s.version, "rows": len(s.dataset)} for s in sources]

