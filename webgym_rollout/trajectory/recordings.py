"""Recordings of episodes' network traffic beside a trajectory dataset, and replays from them.

``webgym-rollout run --record`` records each episode's traffic on the browser server (every
response of the page: main documents, subresources, redirects, POST answers; see
`webgym_rollout.browser.traffic` for how) and stores it with the dataset::

    OUT/manifest.json, OUT/data/*.parquet           the episodes (Episode.recording -> the index)
    OUT/recordings/episodes/<episode_id>.json       one index per episode (`RecordingIndex`)
    OUT/recordings/bodies/<sha256[:2]>/<sha256>     response bodies, content-addressed: a body
                                                    shared by episodes (a logo, a script) is
                                                    stored and fetched from the server once

Consistency with the shards: an episode's bodies are written before its index, and its index
before the shard that lists the episode (`RecordingStore.write_index` runs before
`TrajectoryWriter.add`), each file atomically (a temporary name, then a rename). An episode listed
in the manifest therefore always has its whole recording; an interrupted run leaves at worst an
index or bodies no shard references, which a resumed run overwrites or ignores. ``push`` uploads
``recordings/`` with the shards.

``webgym-rollout run --replay RUN`` (a recorded run folder or a Hub dataset id) plays each task's
episode on pages served from the recording of the same (task, attempt) in RUN (`ReplayLibrary`):
nothing reaches the network unless ``--replay-live-fallback`` lets the requests the recording lacks
through (the URL guard and the egress proxy still apply). A task RUN did not record is played on a
session with an empty recording: every request fails.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from webgym_core.files import TMP_PREFIX
from webgym_core.sources import looks_like_path
from webgym_rollout.browser.protocol import RecordingIndex, ReplayOptions
from webgym_rollout.trajectory.contract import TrajectoryError
from webgym_rollout.trajectory.reader import read_episodes

__all__ = ["RECORDINGS", "RecordSettings", "RecordingStore", "ReplayLibrary", "ReplaySource", "StoreStats"]

log = logging.getLogger(__name__)

RECORDINGS = "recordings"
"""The folder of a dataset that holds its recordings."""


@dataclass(frozen=True)
class RecordSettings:
    """Recording episodes' network traffic, or replaying a recorded run (``run`` flags)."""

    record: bool = False
    """Record every episode's network traffic into OUT/recordings (bodies deduplicated by SHA-256)."""
    replay: str | None = None
    """Serve every episode from the recording of this run (a run folder or a Hub dataset id)
    instead of the live web."""
    replay_live_fallback: bool = False
    """With --replay: let the requests the recording lacks go to the live network (default: they
    fail, so a replay never silently mixes in today's web)."""

    def __post_init__(self) -> None:
        if self.record and self.replay:
            raise ValueError("record: --record and --replay cannot be combined (a replay is already "
                             "recorded)")
        if self.replay_live_fallback and not self.replay:
            raise ValueError("replay_live_fallback: only meaningful with --replay RUN")


@dataclass(frozen=True)
class StoreStats:
    """What a dataset's recordings take on disk."""

    episodes: int
    """Episode indexes."""
    bodies: int
    """Distinct bodies stored."""
    stored_bytes: int
    """Bytes of the bodies on disk (each distinct body once)."""
    recorded_bytes: int
    """Bytes of the bodies as the episodes received them (before deduplication)."""
    index_bytes: int
    """Bytes of the episode indexes."""


class RecordingStore:
    """The ``recordings/`` folder of a trajectory dataset."""

    def __init__(self, dataset_dir: str | Path):
        self.dataset_dir = Path(dataset_dir)
        self.root = self.dataset_dir / RECORDINGS

    def body_path(self, sha: str) -> Path:
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise TrajectoryError(f"{self.root}: {sha!r} is not a SHA-256 body name")
        return self.root / "bodies" / sha[:2] / sha

    def has_body(self, sha: str) -> bool:
        return self.body_path(sha).is_file()

    def put_body(self, sha: str, data: bytes) -> None:
        """Store a body (atomically; a body already stored is left alone)."""
        if hashlib.sha256(data).hexdigest() != sha:
            raise TrajectoryError(f"body {sha}: the bytes received hash to another SHA-256")
        path = self.body_path(sha)
        if path.is_file():
            return
        _write_atomic(path, data)

    def get_body(self, sha: str) -> bytes:
        try:
            return self.body_path(sha).read_bytes()
        except FileNotFoundError:
            raise TrajectoryError(f"{self.root}: the recorded body {sha} is missing") from None

    def write_index(self, episode_id: str, index: RecordingIndex) -> str:
        """Write an episode's index (its bodies must be stored already); returns its path relative to
        the dataset folder, for `Episode.recording`."""
        relative = f"{RECORDINGS}/episodes/{episode_id}.json"
        _write_atomic(self.dataset_dir / relative, index.model_dump_json().encode())
        return relative

    def read_index(self, relative: str) -> RecordingIndex:
        path = self.dataset_dir / relative
        try:
            return RecordingIndex.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise TrajectoryError(f"{path}: the episode's recording index is missing") from None
        except ValueError as exc:
            raise TrajectoryError(f"{path}: not a recording index: {exc}") from None

    def copy_episode(self, source: RecordingStore, relative: str, episode_id: str) -> str:
        """Copy one episode's recording (index and bodies) from another dataset's store."""
        index = source.read_index(relative)
        for sha in index.body_hashes:
            if not self.has_body(sha):
                self.body_path(sha).parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(source.body_path(sha), self.body_path(sha))
                except OSError:  # another file system, or no hard links: copy
                    self.put_body(sha, source.get_body(sha))
        return self.write_index(episode_id, index)

    def stats(self) -> StoreStats:
        bodies = list((self.root / "bodies").glob("*/*"))
        indexes = list((self.root / "episodes").glob("*.json"))
        recorded = 0
        for path in indexes:
            index = RecordingIndex.model_validate_json(path.read_bytes())
            recorded += sum(e.body_size for e in index.exchanges)
        return StoreStats(episodes=len(indexes), bodies=len(bodies),
                          stored_bytes=sum(p.stat().st_size for p in bodies), recorded_bytes=recorded,
                          index_bytes=sum(p.stat().st_size for p in indexes))


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{TMP_PREFIX}{secrets.token_hex(4)}-{path.name}")
    tmp.write_bytes(data)
    tmp.replace(path)


@dataclass(frozen=True)
class ReplaySource:
    """What a session needs to replay one episode: the recorded exchanges and where the bodies are."""

    options: ReplayOptions
    store: RecordingStore

    def body(self, sha: str) -> bytes:
        return self.store.get_body(sha)


class ReplayLibrary:
    """The recordings of a recorded run, by (task_id, attempt)."""

    def __init__(self, folder: Path, recordings: dict[tuple[str, int], str], *, live_fallback: bool = False,
                 source: str = ""):
        self.store = RecordingStore(folder)
        self.recordings = recordings
        self.live_fallback = live_fallback
        self.source = source or str(folder)

    @classmethod
    def open(cls, source: str | Path, *, live_fallback: bool = False,
             cache_dir: str | Path | None = None) -> ReplayLibrary:
        """The library of a run folder or a Hub dataset id (``org/name[@revision]``: its
        ``recordings/`` are downloaded). Raises `TrajectoryError` naming the source when it holds
        no recording."""
        folder = Path(source)
        if not folder.exists():
            folder = _download(str(source), cache_dir)
        recordings: dict[tuple[str, int], str] = {}
        columns = ["task_id", "attempt", "recording"]
        for batch in read_episodes(folder).batches(columns=columns, batch_size=512):
            for row in batch.to_pylist():
                if row.get("recording"):
                    recordings[(str(row["task_id"]), int(row.get("attempt") or 0))] = row["recording"]
        if not recordings:
            raise TrajectoryError(f"{source}: no episode of this run has a recording (was it run with "
                                  "--record?)")
        log.info("replaying %d recorded episodes of %s", len(recordings), source)
        return cls(folder, recordings, live_fallback=live_fallback, source=str(source))

    def source_for(self, task_id: str, attempt: int) -> ReplaySource:
        """The replay of (task, attempt); attempt 0's when that attempt was not recorded; an empty
        recording (every request fails) when the task was not recorded at all."""
        relative = self.recordings.get((task_id, attempt)) or self.recordings.get((task_id, 0))
        if relative is None:
            log.warning("replay: %s holds no recording of task %s; its requests will fail", self.source,
                        task_id)
            exchanges = []
        else:
            exchanges = self.store.read_index(relative).exchanges
        return ReplaySource(ReplayOptions(exchanges=exchanges, live_fallback=self.live_fallback), self.store)


def _download(source: str, cache_dir: str | Path | None) -> Path:
    repo_id, _, revision = source.partition("@")
    if looks_like_path(source):
        raise TrajectoryError(f"{source}: no such folder (a local path, so not looked up on the Hub)")
    if repo_id.count("/") != 1:
        raise TrajectoryError(f"{source}: no such folder, and not a Hub dataset id (org/name[@revision])")
    from huggingface_hub import snapshot_download  # optional: huggingface_hub

    try:
        path = snapshot_download(repo_id, repo_type="dataset", revision=revision or "main",
                                 cache_dir=str(cache_dir) if cache_dir else None)
    except Exception as exc:  # the Hub raises many kinds; the user needs the id
        raise TrajectoryError(f"cannot download the recorded run '{source}': {exc}") from exc
    return Path(path)
