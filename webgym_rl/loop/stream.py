"""The trainer's view of growing trajectory datasets: newly committed episodes, each handed out once.

The asynchronous schedule's rollouts write one trajectory folder per task batch (``OUT/rollouts/
chunk-XXXX``), each growing shard by shard while episodes finish (`webgym_rollout.dataset.
TrajectoryWriter`: a shard is listed in the manifest only once it is complete, and listed shards
never change). `TrajectoryStream` reads the shards the manifests list (through `webgym_rollout.
trajectory.read_episodes`) past a `StreamPosition`: per folder, how many listed shards are used up
and how many rows of the next one. `take(n)` returns the next `n` committed episodes, in folder
order then manifest order, and the position after them; the caller records that position (in
``loop_state.json``, `webgym_rl.loop.state`) together with what it did with the episodes, so after
a crash every committed episode is handed out exactly once and no used shard is read again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webgym_rollout.trajectory import Episode, TrajectorySet, read_episodes

__all__ = ["StreamPosition", "TrajectoryStream"]


@dataclass
class StreamPosition:
    """Per folder name: ``[listed shards used up, rows used of the next shard]``."""

    folders: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, list[int]]:
        return {name: list(value) for name, value in self.folders.items()}

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> StreamPosition:
        return cls({str(name): [int(v[0]), int(v[1])] for name, v in (value or {}).items()})


class TrajectoryStream:
    """Committed episodes of the folders `folders()` returns (re-asked on every call: the rollout
    adds folders as it goes), past a position."""

    def __init__(self, folders: Callable[[], Sequence[Path]]):
        self._folders = folders

    def _shards(self, folder: Path) -> list[Path]:
        if not (folder / "manifest.json").is_file():
            return []  # the rollout has not written its manifest yet
        return read_episodes(folder).files

    def available(self, position: StreamPosition) -> int:
        """How many committed episodes lie past `position` (reads shard footers only)."""
        import pyarrow.parquet as pq

        total = 0
        for folder in self._folders():
            shards_done, rows_done = position.folders.get(folder.name, [0, 0])
            for i, shard in enumerate(self._shards(folder)[shards_done:]):
                total += pq.read_metadata(shard).num_rows - (rows_done if i == 0 else 0)
        return total

    def take(self, n: int, position: StreamPosition) -> tuple[list[Episode], StreamPosition] | None:
        """The next `n` committed episodes past `position` and the position after them; None while
        fewer than `n` are committed. `position` itself is not changed."""
        import pyarrow.parquet as pq

        if self.available(position) < n:
            return None
        after = StreamPosition(position.to_json())
        taken: list[Episode] = []
        for folder in self._folders():
            if len(taken) >= n:
                break
            shards_done, rows_done = after.folders.get(folder.name, [0, 0])
            for shard in self._shards(folder)[shards_done:]:
                rows = pq.read_metadata(shard).num_rows
                want = min(rows - rows_done, n - len(taken))
                one = TrajectorySet(str(folder), "", "", files=[shard])
                for i, episode in enumerate(one):
                    if i >= rows_done + want:
                        break
                    if i >= rows_done:
                        taken.append(episode)
                rows_done += want
                if rows_done >= rows:
                    shards_done, rows_done = shards_done + 1, 0
                after.folders[folder.name] = [shards_done, rows_done]
                if len(taken) >= n:
                    break
        return taken, after
