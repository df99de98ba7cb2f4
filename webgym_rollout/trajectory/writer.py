"""Trajectory datasets on disk: parquet shards written atomically, a manifest, a card.

Layout of an output folder::

    OUT/
      manifest.json                     the finished shards and the episodes each holds
      README.md                         dataset card (cards/trajectories_card.md), ``configs:`` block
      data/train-<run>-00000.parquet    episodes, one row each (`webgym_rollout.trajectory.contract`)
      data/test-<run>-00000.parquet     (one file family per task split present)

``<run>`` is an id the writer draws when it creates the folder (kept in the manifest, reused on
resume): shard names unique to the run mean that ``datasets.load_dataset(OUT)`` of a second run in a
folder of the same name never returns the first run's cached rows.

`TrajectoryWriter` buffers `Episode`s and writes a shard when the buffer is full: first to a hidden
temporary file, flushed to disk, then renamed into place, then the manifest is rewritten (also tmp +
fsync + rename). An episode counts as done only once its shard is listed in the manifest. Reopening
the folder with ``resume=True`` removes temporary files, adopts a complete shard that a crash left
unlisted (or removes it when it repeats listed episodes), and reports the done
``(task_id, attempt)`` pairs so the runner skips them: every episode ends up in the folder exactly
once. A crash never costs a listed shard: a shard that can no longer be read (a disk that lost its
last writes), listed or not, is set aside as ``<name>.corrupt`` (kept, read by nothing) and only its
episodes are redone, and a manifest that can no longer be read is set aside as
``manifest.json.corrupt`` and rebuilt from the shards.

Each episode is converted to its Arrow row when it is added, so an episode that cannot be stored
(a value out of its column's range) is refused on its own (`EpisodeUnstorable`) and never takes
the episodes buffered with it down; a shard whose write fails (a full disk) keeps its episodes
buffered for the next flush.

Read a folder with `webgym_rollout.trajectory.reader.read_episodes` (exactly the shards of the manifest)
or ``datasets.load_dataset(OUT)`` (through the card). ``webgym-rollout push OUT REPO_ID`` uploads it.

Exceptions (defined in `webgym_rollout.errors`)::

    RolloutError
     └── TrajectoryError            a broken manifest, shard or row
          ├── DatasetExists         the folder already holds a run and resume was not asked for
          ├── EpisodeRepeated       an episode that is already in the dataset
          └── EpisodeUnstorable     an episode whose row does not fit the trajectory columns
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webgym_core.files import TMP_PREFIX, sha256_file, write_json_atomic
from webgym_rollout.errors import DatasetExists, EpisodeRepeated, EpisodeUnstorable
from webgym_rollout.trajectory.contract import (
    MANIFEST,
    TRAJECTORY_SCHEMA_VERSION,
    Episode,
    shard_schema_problem,
    trajectory_features,
)
from webgym_rollout.trajectory.hub import write_card
from webgym_rollout.trajectory.reader import read_manifest

__all__ = [
    "DatasetExists",
    "EpisodeRepeated",
    "EpisodeUnstorable",
    "TrajectoryWriter",
]

logger = logging.getLogger(__name__)

# Shards: ``<split>-<run>-<index>.parquet``; schema 1.1 folders have ``<split>-<index>.parquet``.
_SHARD_NAME = re.compile(r"^(?P<split>[a-z][a-z0-9_]*)-(?:(?P<run>[0-9a-f]{8})-)?(?P<index>\d{5})\.parquet$")


# ------------------------------------------------------------------------------------------ manifest

def _shard_keys(path: Path) -> list[list[Any]]:
    import pyarrow.parquet as pq  # optional: pyarrow

    table = pq.read_table(path, columns=["task_id", "attempt", "episode_id"])
    return [[r["task_id"], int(r["attempt"]), r["episode_id"]] for r in table.to_pylist()]


def _shard_problem(path: Path) -> str:
    """Why `path` is not a complete shard of the schema this version writes ("" when it is one)."""
    import pyarrow.parquet as pq  # optional: pyarrow

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        return f"unreadable ({exc})"
    problem = shard_schema_problem(schema, TRAJECTORY_SCHEMA_VERSION)
    return f"not a schema {TRAJECTORY_SCHEMA_VERSION} shard ({problem})" if problem else ""


def _set_aside(path: Path) -> Path:
    """Rename `path` to ``<name>.corrupt`` (``.corrupt-1``, ... when taken): kept for a person to look
    at, seen by no reader (not ``*.parquet``, not ``manifest.json``)."""
    target = path.with_name(f"{path.name}.corrupt")
    number = 0
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.corrupt-{number}")
    path.replace(target)
    return target


def _fsync(path: Path) -> None:
    """Flush `path` (a file, or a folder's entries) to disk, so a rename after it never exposes a
    file whose data a power cut lost."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    try:
        descriptor = os.open(path, flags)
    except OSError:  # a folder that cannot be opened (some platforms): the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


# -------------------------------------------------------------------------------------------- writer

class TrajectoryWriter:
    """Writes `Episode`s to parquet shards with a manifest; resumable. Thread-safe.

    ``with TrajectoryWriter(out, resume=True) as writer:`` skip ``writer.is_done(task_id, attempt)``
    pairs, ``writer.add(episode)`` each finished episode; leaving the block flushes the last shard and
    writes the card.
    """

    def __init__(self, out_dir: str | Path, *, resume: bool = False, max_shard_episodes: int = 64,
                 max_shard_bytes: int = 256 << 20, run_info: Mapping[str, Any] | None = None) -> None:
        if max_shard_episodes < 1:
            raise ValueError(f"max_shard_episodes must be >= 1, got {max_shard_episodes}")
        self.out_dir = Path(out_dir)
        self.max_shard_episodes, self.max_shard_bytes = max_shard_episodes, max_shard_bytes
        self._features = trajectory_features()
        self._lock = threading.Lock()
        # Per split: ``([task_id, attempt, episode_id], one-row Arrow table)`` of each buffered episode.
        self._buffer: dict[str, list[tuple[list[Any], Any]]] = defaultdict(list)
        self._buffered_bytes: dict[str, int] = defaultdict(int)
        self._buffered_keys: set[tuple[str, int]] = set()
        data = self.out_dir / "data"
        if resume and (self.out_dir / MANIFEST).exists() and not _readable_json(self.out_dir / MANIFEST):
            aside = _set_aside(self.out_dir / MANIFEST)
            logger.warning("resume: %s cannot be read; set aside as %s, rebuilding it from the shards",
                           self.out_dir / MANIFEST, aside.name)
        if (self.out_dir / MANIFEST).exists():
            if not resume:
                raise DatasetExists(f"{self.out_dir} already holds a trajectory run; pass --resume to "
                                    "continue it or choose another --out folder")
            self._manifest = read_manifest(self.out_dir)
            written_by = str(self._manifest.get("schema_version", "1.1"))
            if written_by != TRAJECTORY_SCHEMA_VERSION:
                raise DatasetExists(f"{self.out_dir} holds schema {written_by} trajectories; this version "
                                    f"writes {TRAJECTORY_SCHEMA_VERSION}: resume it with the version that "
                                    "started it, or choose another --out folder")
            self._recover()
        else:
            if data.is_dir() and any(data.glob("*.parquet")) and not resume:
                raise DatasetExists(f"{data} holds parquet files but no manifest; pass --resume to "
                                    "recover them or choose another --out folder")
            data.mkdir(parents=True, exist_ok=True)
            now = time.time()
            self._manifest = {"format": "webgym-trajectories", "schema_version": TRAJECTORY_SCHEMA_VERSION,
                              "run_id": secrets.token_hex(4), "created_at": now, "updated_at": now,
                              "run": dict(run_info or {}), "shards": []}
            if resume:
                self._recover()
            self._save_manifest()
        if run_info:
            self._manifest.setdefault("run", {}).update(run_info)

    # -- state
    @property
    def done(self) -> set[tuple[str, int]]:
        """``(task_id, attempt)`` of every episode in a listed shard."""
        return {(key[0], int(key[1])) for shard in self._manifest["shards"] for key in shard["episodes"]}

    def is_done(self, task_id: str, attempt: int) -> bool:
        with self._lock:
            key = (task_id, int(attempt))
            return key in self._buffered_keys or key in self._done_cache()

    def _done_cache(self) -> set[tuple[str, int]]:
        cached = getattr(self, "_done_set", None)
        if cached is None or cached[0] != len(self._manifest["shards"]):
            cached = (len(self._manifest["shards"]), self.done)
            self._done_set = cached
        return cached[1]

    # -- writing
    def add(self, episode: Episode) -> None:
        """Buffer one finished episode; writes a shard when the buffer is full. Raises
        `EpisodeRepeated` for an episode the dataset holds and `EpisodeUnstorable` for one whose row
        does not fit the columns (the buffered episodes are kept either way)."""
        key = (episode.task.task_id, int(episode.attempt))
        with self._lock:
            if key in self._buffered_keys or key in self._done_cache():
                raise EpisodeRepeated(f"episode {episode.episode_id}: task {key[0]} attempt {key[1]} "
                                      "is already in the dataset")
            split = _split_name(episode.split)
            self._buffer[split].append(([key[0], key[1], episode.episode_id], self._encode(episode)))
            self._buffered_keys.add(key)
            self._buffered_bytes[split] += sum(len(step.screenshot) for step in episode.steps)
            if (len(self._buffer[split]) >= self.max_shard_episodes
                    or self._buffered_bytes[split] >= self.max_shard_bytes):
                self._flush_split(split)

    def flush(self) -> list[Path]:
        """Write every buffered episode now (one shard per split); returns the shard paths."""
        with self._lock:
            return [path for split in list(self._buffer) if (path := self._flush_split(split))]

    def close(self, *, card: bool = True) -> None:
        """Flush, then write the dataset card."""
        self.flush()
        if card:
            write_card(self.out_dir)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, exc_type, *exc_info: Any) -> None:
        # On an error the buffered episodes are still complete; keep them (they are not redone).
        self.close(card=exc_type is None)

    def _next_index(self, split: str) -> int:
        # Names of shards set aside (``.corrupt``) stay taken: a cache keyed by name never mixes them up.
        used = [int(m["index"]) for p in (self.out_dir / "data").iterdir()
                if (m := _SHARD_NAME.match(re.sub(r"\.corrupt(-\d+)?$", "", p.name)))
                and m["split"] == split and m["run"] == self.run_id]
        return max(used, default=-1) + 1

    @property
    def run_id(self) -> str:
        """The id in this run's shard names."""
        return str(self._manifest["run_id"])

    def _encode(self, episode: Episode) -> Any:
        """`episode` as a one-row Arrow table of the trajectory columns, or `EpisodeUnstorable`."""
        import pyarrow as pa  # optional: pyarrow

        try:
            row = self._features.encode_example(episode.to_row())
            return pa.Table.from_pylist([row], schema=self._features.arrow_schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise EpisodeUnstorable(f"episode {episode.episode_id} (task {episode.task.task_id}) cannot be "
                                    f"stored: {type(exc).__name__}: {exc}") from exc

    def _flush_split(self, split: str) -> Path | None:
        import pyarrow as pa  # optional: pyarrow
        import pyarrow.parquet as pq  # optional: pyarrow

        buffered = self._buffer.get(split, [])
        if not buffered:
            return None
        table = pa.concat_tables([rows for _, rows in buffered])
        path = self.out_dir / "data" / f"{split}-{self.run_id}-{self._next_index(split):05d}.parquet"
        tmp = path.with_name(f"{TMP_PREFIX}{path.name}")
        # A failure here (a full disk) leaves the episodes buffered and at most a temporary file,
        # which the next flush overwrites and a resume removes.
        pq.write_table(table, tmp)
        _fsync(tmp)
        tmp.replace(path)
        _fsync(path.parent)
        keys = [key for key, _ in buffered]
        self._manifest["shards"].append({"path": f"data/{path.name}", "split": split,
                                         "num_rows": len(keys), "sha256": sha256_file(path),
                                         "episodes": keys})
        self._save_manifest()
        del self._buffer[split]
        self._buffered_bytes.pop(split, None)
        for key in keys:
            self._buffered_keys.discard((key[0], key[1]))
        logger.info("wrote %s (%d episodes)", path, len(keys))
        return path

    def _save_manifest(self) -> None:
        self._manifest["updated_at"] = time.time()
        write_json_atomic(self.out_dir / MANIFEST, self._manifest)

    def _recover(self) -> None:
        """Clean up after a crash: drop temporary files, set aside listed shards that can no longer
        be read (their episodes are redone), adopt or drop unlisted shards."""
        data = self.out_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        for leftover in [*data.glob(f"{TMP_PREFIX}*"), *self.out_dir.glob(f"{TMP_PREFIX}*")]:
            logger.warning("resume: removing the unfinished file %s", leftover)
            leftover.unlink()
        kept = []
        for shard in self._manifest["shards"]:
            path = self.out_dir / shard["path"]
            problem = _shard_problem(path)
            if problem:
                aside = _set_aside(path)
                logger.warning("resume: the listed shard %s is %s; set aside as %s, its %d episodes will "
                               "be redone", path, problem, aside.name, len(shard["episodes"]))
                continue
            kept.append(shard)
        self._manifest["shards"] = kept
        listed = {shard["path"] for shard in self._manifest["shards"]}
        done = self.done
        for path in sorted(data.glob("*.parquet")):
            relative = f"data/{path.name}"
            match = _SHARD_NAME.match(path.name)
            if relative in listed or match is None:
                continue
            problem = _shard_problem(path)
            try:
                keys = [] if problem else _shard_keys(path)
            except Exception as exc:  # pyarrow raises several unrelated types for a bad file
                problem = f"unreadable ({exc})"
            if problem:  # a crash's debris (or a foreign file): set aside, its episodes are redone
                aside = _set_aside(path)
                logger.warning("resume: the unlisted shard %s is %s; set aside as %s", path, problem,
                               aside.name)
                continue
            pairs = {(k[0], k[1]) for k in keys}
            if pairs & done or len(pairs) != len(keys):
                logger.warning("resume: removing %s: it repeats finished episodes", path)
                path.unlink()
                continue
            # The rename happened, so the shard is complete; only the manifest update was lost.
            logger.warning("resume: adopting the unlisted complete shard %s (%d episodes)", path, len(keys))
            self._manifest["shards"].append({"path": relative, "split": match["split"], "num_rows": len(keys),
                                             "sha256": sha256_file(path), "episodes": keys})
            done |= pairs
        self._save_manifest()


def _readable_json(path: Path) -> bool:
    """`path` holds a JSON object (a manifest a crash or a full disk did not cut short)."""
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError, RecursionError):
        return False


def _split_name(split: Any) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", str(split or "train").lower())
    return name if name[:1].isalpha() else f"s_{name}"


# --------------------------------------------------------------------------------------------- card
