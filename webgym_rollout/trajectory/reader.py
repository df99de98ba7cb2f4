"""Reading trajectory datasets: `read_episodes(source)` -> `TrajectorySet` (episodes, stats, batches).

A source is a dataset folder written by `webgym_rollout.trajectory.writer` (its manifest lists the
finished shards), a parquet file, or a Hub dataset id. Before anything is read every shard is
checked against its schema version (`webgym_rollout.trajectory.contract.check_shard`); rows become
`Episode`s through the contract (`Episode.from_row`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from webgym_core.sources import looks_like_path
from webgym_rollout.trajectory.contract import (
    MANIFEST,
    READABLE_SCHEMA_VERSIONS,
    TRAJECTORY_SCHEMA_VERSION,
    Episode,
    EpisodeColumn,
    EpisodeStatus,
    ShardSchemaError,
    StepField,
    TrajectoryError,
    check_shard,
    schema_version_of,
    shard_schema_problem,
    succeeded,
    trajectory_features,
    version_of,
)

__all__ = ["TrajectorySet", "TrajectoryStats", "read_episodes", "read_manifest", "task_set_message"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrajectoryStats:
    """Counts over a trajectory dataset, read from a few columns (no screenshot is loaded)."""

    episodes: int = 0
    successes: int = 0
    """Episodes that succeeded (`webgym_rollout.trajectory.contract.succeeded`)."""
    errors: int = 0
    """Episodes that ended in an infrastructure failure (`EpisodeStatus.is_error`)."""
    steps: int = 0
    valid_actions: int = 0
    """Steps whose reply parsed into an action (an unparsed reply is a no-op step)."""
    internal_errors: int = 0
    """Of `errors`, episodes with ``error:internal``: a bug of the toolkit, to report."""

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def valid_action_rate(self) -> float:
        return self.valid_actions / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "success_rate": self.success_rate,
                "valid_action_rate": self.valid_action_rate}


class TrajectorySet:
    """The episodes of one source, as `read_episodes` found them.

    Iterate it for `Episode` objects (read in small batches: screenshots never pile up), use
    `dataset` for a `datasets.Dataset` of the rows (the trainer reads it column-wise), or `stats`.
    """

    def __init__(self, source_id: str, version: str, schema_version: str, *, files: Sequence[Path] = (),
                 dataset: Any = None, cache_dir: str | None = None):
        self.id = source_id
        """The folder path or the Hub dataset id, as given."""
        self.version = version
        """A Hub dataset's commit; for a folder, a digest of its shard names and sizes."""
        self.schema_version = schema_version
        self.files = list(files)
        """The parquet shards (a local folder); empty for a Hub dataset."""
        self._dataset, self._cache_dir = dataset, cache_dir

    def __repr__(self) -> str:
        return f"TrajectorySet({self.id!r}, version={self.version!r}, schema {self.schema_version})"

    @cached_property
    def dataset(self) -> Any:
        """The rows as a `datasets.Dataset` (screenshots decode to PIL images on access)."""
        if self._dataset is not None:
            return self._dataset
        import datasets  # optional: datasets

        if not self.files:
            features = trajectory_features()
            return datasets.Dataset.from_dict({name: [] for name in features}, features=features)
        try:
            return datasets.load_dataset("parquet", data_files=[str(p) for p in self.files], split="train",
                                         cache_dir=self._cache_dir)
        except Exception as exc:  # datasets wraps the shard's own error; name the source
            cause = exc.__cause__ or exc
            raise TrajectoryError(f"{self.id}: its shards cannot be read as one dataset: "
                                  f"{type(cause).__name__}: {cause}") from exc

    def __len__(self) -> int:
        if self._dataset is None:
            import pyarrow.parquet as pq  # optional: pyarrow

            total = 0
            for path in self.files:
                try:
                    total += pq.read_metadata(path).num_rows
                except Exception as exc:  # changed on disk since `read_episodes` checked it
                    raise TrajectoryError(f"{path}: not a readable parquet shard: {exc}") from None
            return total
        return len(self.dataset)

    def batches(self, columns: Sequence[str] | None = None, batch_size: int = 16) -> Iterator[Any]:
        """Arrow record batches of the rows (only `columns` when given). A shard that turns out
        unreadable part way (corrupt pages, changed on disk) raises `TrajectoryError` naming it."""
        if self._dataset is None:
            import pyarrow.parquet as pq  # optional: pyarrow

            for path in self.files:
                try:
                    parquet = pq.ParquetFile(path)
                    present = [c for c in columns if c in parquet.schema_arrow.names] if columns else None
                    yield from parquet.iter_batches(batch_size=batch_size, columns=present)
                except TrajectoryError:
                    raise
                except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
                    # pyarrow's errors (ArrowInvalid, ArrowIOError) are ValueError / OSError kinds
                    raise TrajectoryError(f"{path}: not a readable parquet shard: {exc}") from None
            return
        table = self.dataset.with_format("arrow")
        if columns:
            table = table.select_columns([c for c in columns if c in self.dataset.column_names])
        for start in range(0, len(table), batch_size):
            yield from table[start:start + batch_size].to_batches()

    def __iter__(self) -> Iterator[Episode]:
        for batch in self.batches():
            for row in batch.to_pylist():
                yield Episode.from_row(row)

    def stats(self) -> TrajectoryStats:
        """Episode and step counts, read from the reward, status and action columns only."""
        import pyarrow.compute as pc  # optional: pyarrow

        counts = dict.fromkeys(
            ("episodes", "successes", "errors", "steps", "valid_actions", "internal_errors"), 0)
        columns = (EpisodeColumn.REWARD, EpisodeColumn.STATUS, EpisodeColumn.STEPS)
        for batch in self.batches(columns=columns, batch_size=64):
            counts["episodes"] += batch.num_rows
            rewards = batch.column(EpisodeColumn.REWARD).to_pylist()
            statuses = batch.column(EpisodeColumn.STATUS).to_pylist()
            counts["successes"] += sum(1 for r in rewards if succeeded(r))
            try:
                counts["errors"] += sum(1 for s in statuses if s and EpisodeStatus(s).is_error)
                counts["internal_errors"] += sum(1 for s in statuses if s == EpisodeStatus.INTERNAL.value)
            except ValueError as exc:
                raise TrajectoryError(f"{self.id}: {exc} (a status is ok, timeout, blocked or "
                                      "error:<kind>)") from None
            actions = pc.struct_field(pc.list_flatten(batch.column(EpisodeColumn.STEPS)), StepField.ACTION)
            counts["steps"] += len(actions)
            counts["valid_actions"] += int(pc.sum(pc.not_equal(actions, "")).as_py() or 0)
        return TrajectoryStats(**counts)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of a trajectory folder; raises `TrajectoryError` naming the file when it is
    missing, unreadable or lists a shard that is not there."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrajectoryError(f"{path} does not exist: not a trajectory dataset folder") from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
        raise TrajectoryError(f"{path} cannot be read: {exc}") from None
    if isinstance(manifest, dict) and "shards" not in manifest and isinstance(manifest.get("files"), dict):
        raise TrajectoryError(task_set_message(folder))  # a build's manifest lists its files
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise TrajectoryError(f"{path} has no 'shards' list")
    for number, shard in enumerate(manifest["shards"]):
        problem = _shard_entry_problem(shard)
        if problem:
            raise TrajectoryError(f"{path}: shard entry {number}: {problem}")
        if not (folder / shard["path"]).is_file():
            raise TrajectoryError(f"{path} lists {shard['path']}, which is missing")
    version = manifest.get("schema_version", "1.1")
    if not isinstance(version, str):
        raise TrajectoryError(f"{path}: 'schema_version' must be a string such as "
                              f"{TRAJECTORY_SCHEMA_VERSION!r}, got {version!r}")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise TrajectoryError(f"{path}: trajectory schema {version} is not one this version reads "
                              f"({', '.join(READABLE_SCHEMA_VERSIONS)}); upgrade webgym")
    return manifest


def task_set_message(folder: str | Path) -> str:
    """What to say of a task set (a ``webgym-data build`` folder) given where trajectories are read."""
    return (f"{folder} is a task set (written by webgym-data build), not a trajectory set; make "
            f"trajectories from it with `webgym-rollout run --tasks {folder} --servers URL --out OUT` "
            "and pass OUT instead")


def _holds_tasks(file: Path) -> bool:
    """A parquet file of task rows (a task set's shard): a ``task_name`` column and no ``steps``."""
    import pyarrow.parquet as pq  # optional: pyarrow

    try:
        names = pq.read_schema(file).names
    except Exception:  # reported, naming the file, by the check of each shard
        return False
    return "task_name" in names and EpisodeColumn.STEPS not in names


def _shard_entry_problem(shard: Any) -> str:
    """What is wrong with one entry of a manifest's ``shards`` ("" when nothing): a ``path`` inside
    the folder, a ``split``, and ``episodes`` as ``[task_id, attempt, episode_id]`` triples."""
    if not isinstance(shard, dict) or not isinstance(shard.get("path"), str) or not shard["path"]:
        return "has no 'path'"
    if shard["path"].startswith("/") or ".." in re.split(r"[\\/]", shard["path"]):
        return f"path {shard['path']!r} is not inside the folder"
    if "split" in shard and not isinstance(shard["split"], str):
        return f"'split' must be a string, got {shard['split']!r}"
    episodes = shard.get("episodes", [])
    if not isinstance(episodes, list) or not all(
            isinstance(key, list) and len(key) == 3 and isinstance(key[0], str) and isinstance(key[2], str)
            and isinstance(key[1], int) and not isinstance(key[1], bool) for key in episodes):
        return "'episodes' must be a list of [task_id, attempt, episode_id]"
    return ""


def _folder_files(folder: Path, split: str | None) -> tuple[list[Path], str]:
    """The shards of a rollout folder and its schema version: those the manifest lists when there is
    one (a shard a crash left unlisted may repeat episodes), else every non-hidden parquet file."""
    if (folder / MANIFEST).is_file():
        manifest = read_manifest(folder)
        shards = [s for s in manifest["shards"] if split is None or s.get("split") == split]
        return [folder / s["path"] for s in shards], str(manifest.get("schema_version", "1.1"))
    files = sorted(p for p in folder.rglob("*.parquet")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if split is not None:
        files = [p for p in files if p.name.startswith(f"{split}-")]
    if not files:
        return files, TRAJECTORY_SCHEMA_VERSION
    import pyarrow.parquet as pq  # optional: pyarrow

    try:
        schema = pq.read_schema(files[0])
    except Exception:  # reported, naming the file, by the check of each shard
        return files, version_of([])
    return files, schema_version_of(schema)


def read_episodes(source: str | Path, *, split: str | None = None,
                  cache_dir: str | Path | None = None) -> TrajectorySet:
    """The episodes of a rollout folder (the shards its manifest lists) or of a Hub dataset
    (``org/name`` or ``org/name@revision``; default revision ``main``), optionally of one split.

    Raises `TrajectoryError` naming the source when it is neither, or its manifest is broken."""
    path = Path(source)
    cache = str(cache_dir) if cache_dir else None
    if path.exists():
        if not path.is_dir():
            raise TrajectoryError(f"{path}: expected a rollout folder, got a file")
        files, schema = _folder_files(path, split)
        if files and not (path / MANIFEST).is_file() and _holds_tasks(files[0]):
            raise TrajectoryError(task_set_message(path))
        for file in files:
            check_shard(file, schema)
        digest = hashlib.sha256()
        for file in files:
            digest.update(f"{file.relative_to(path)}:{file.stat().st_size}\n".encode())
        return TrajectorySet(str(path), digest.hexdigest()[:16], schema, files=files, cache_dir=cache)
    repo_id, _, revision = str(source).partition("@")
    revision = revision or "main"
    if looks_like_path(source):
        raise TrajectoryError(f"{source}: no such folder (a local path, so not looked up on the Hub)")
    if repo_id.count("/") != 1:
        raise TrajectoryError(f"{source}: no such folder, and not a Hub dataset id (org/name[@revision])")
    import datasets  # optional: datasets
    from huggingface_hub import HfApi  # optional: huggingface_hub

    try:
        loaded = datasets.load_dataset(repo_id, revision=revision, cache_dir=cache)
    except Exception as exc:  # the Hub raises many kinds; the user needs the id
        parent, name = Path(repo_id).parent, Path(repo_id).name
        local = f"; {parent} is a folder here, but it holds no {name}" if parent.is_dir() else ""
        raise TrajectoryError(f"cannot load trajectory dataset '{repo_id}' at revision '{revision}' "
                              f"(not a local folder either{local}): {exc}") from exc
    if isinstance(loaded, datasets.DatasetDict):
        parts = [loaded[name] for name in loaded if split is None or name == split]
        dataset = datasets.concatenate_datasets(parts) if len(parts) > 1 else (parts[0] if parts else None)
    else:
        dataset = loaded
    if dataset is None:
        raise TrajectoryError(f"Hub dataset {repo_id}@{revision} has no split {split!r}")
    try:
        version = HfApi().dataset_info(repo_id, revision=revision).sha or revision
    except Exception:  # the version is informative only; the data did load
        version = revision
    schema = schema_version_of(dataset.features.arrow_schema)
    problem = shard_schema_problem(dataset.features.arrow_schema, schema)
    if problem:
        raise ShardSchemaError(f"Hub dataset {repo_id}@{revision}: not a trajectory schema {schema} "
                               f"dataset: {problem}", version=schema)
    return TrajectorySet(repo_id, version, schema, dataset=dataset)
