"""The trainer's view of growing trajectory datasets: newly committed episodes, each handed out once.

The asynchronous schedule's rollouts write one trajectory folder per task batch (``OUT/rollouts/
chunk-XXXX``), each growing shard by shard while episodes finish (`webgym_rollout.trajectory.writer.
TrajectoryWriter`: a shard is listed in the manifest only once it is complete, and listed shards
never change). `TrajectoryStream` reads the shards the manifests list (through `webgym_rollout.
trajectory.read_episodes`) past a `StreamPosition`. `take(n)` returns the next `n` committed
episodes, in folder order then manifest order, and the position after them; the caller records that
position (in ``loop_state.json``, `webgym_rl.loop.state`) together with what it did with the
episodes, so after a crash every committed episode is handed out exactly once.

**Groups.** `take(n, group=G)` hands out whole groups only: the G attempts at one task in one folder
(GRPO's group; reinforce's per-task baseline), a group being ready once all G are committed. Taken
in commit order, a group's attempts would otherwise be split across two batches whenever a batch
boundary falls between them (attempts finish at different times), and each half would get the
wrong baseline. Ready groups go out in the stream order of their last attempt, so the trainer waits
for a group's slowest attempt, never for the rest of the folder; the episodes of groups not yet
ready stay in the stream (the position records which rows past its prefix are already taken).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webgym_rollout.trajectory.contract import Episode, EpisodeColumn
from webgym_rollout.trajectory.reader import TrajectorySet, read_episodes

__all__ = ["StreamPosition", "TrajectoryStream"]


@dataclass
class StreamPosition:
    """Per folder name: ``[listed shards used up, rows used of the next shard, *taken]``, where the
    optional ``taken`` are offsets (0 = the first row past the prefix) of rows already handed out
    beyond the prefix (only `TrajectoryStream.take` with groups leaves such gaps)."""

    folders: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, list[int]]:
        return {name: list(value) for name, value in self.folders.items()}

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> StreamPosition:
        return cls({str(name): [int(x) for x in v] for name, v in (value or {}).items()})

    def of(self, folder: str) -> tuple[int, int, set[int]]:
        """(shards used up, rows used of the next shard, offsets taken past them) of `folder`."""
        value = self.folders.get(folder, [0, 0])
        return value[0], value[1], set(value[2:])


@dataclass
class _Row:
    folder: str
    shard: Path
    row: int  # in its shard
    offset: int  # past the folder's prefix
    task_id: str = ""


class TrajectoryStream:
    """Committed episodes of the folders `folders()` returns (re-asked on every call: the rollout
    adds folders as it goes), past a position."""

    def __init__(self, folders: Callable[[], Sequence[Path]]):
        self._folders = folders

    def _shards(self, folder: Path) -> list[Path]:
        if not (folder / "manifest.json").is_file():
            return []  # the rollout has not written its manifest yet
        return read_episodes(folder).files

    def _rows(self, position: StreamPosition, *, task_ids: bool = False) -> dict[str, list[_Row]]:
        """Per folder, the committed rows past `position` not taken yet (reads shard footers, and
        the task_id column of the shards holding such rows when `task_ids`)."""
        import pyarrow.parquet as pq  # optional: pyarrow

        rows: dict[str, list[_Row]] = {}
        for folder in self._folders():
            shards_done, rows_done, taken = position.of(folder.name)
            mine = rows[folder.name] = []
            offset = 0
            for i, shard in enumerate(self._shards(folder)[shards_done:]):
                first = rows_done if i == 0 else 0
                count = pq.read_metadata(shard).num_rows
                here = [_Row(folder.name, shard, r, offset + r - first) for r in range(first, count)
                        if offset + r - first not in taken]
                offset += count - first
                if here and task_ids:
                    table = pq.read_table(shard, columns=[EpisodeColumn.TASK_ID])
                    column = table.column(EpisodeColumn.TASK_ID).to_pylist()
                    for row in here:
                        row.task_id = column[row.row]
                mine.extend(here)
        return rows

    def available(self, position: StreamPosition) -> int:
        """How many committed episodes lie past `position` (reads shard footers only)."""
        return sum(len(rows) for rows in self._rows(position).values())

    def take(self, n: int, position: StreamPosition, *, group: int = 1
             ) -> tuple[list[Episode], StreamPosition] | None:
        """The next `n` committed episodes past `position` and the position after them; None while
        fewer than `n` are committed (with ``group`` > 1: while the ready groups of `group` attempts
        hold fewer than `n` episodes; whole groups are taken, so a batch may hold a few more).
        `position` itself is not changed."""
        taken = self.take_from(n, position, group=group)
        return None if taken is None else ([episode for _, episode in taken[0]], taken[1])

    def take_from(self, n: int, position: StreamPosition, *, group: int = 1
                  ) -> tuple[list[tuple[Path, Episode]], StreamPosition] | None:
        """`take`, each episode with the folder that holds it."""
        rows = self._rows(position, task_ids=group > 1)
        chosen: list[_Row] = []
        if group <= 1:
            chosen = [row for folder in rows.values() for row in folder][:n]
        else:
            ready: list[tuple[int, int, list[_Row]]] = []  # (folder index, last offset, members)
            for index, folder_rows in enumerate(rows.values()):
                groups: dict[str, list[_Row]] = defaultdict(list)
                for row in folder_rows:
                    groups[row.task_id].append(row)
                ready.extend((index, members[-1].offset, members)
                             for members in groups.values() if len(members) >= group)
            for *_, members in sorted(ready, key=lambda g: g[:2]):
                if len(chosen) >= n:
                    break
                chosen.extend(members)
        if len(chosen) < n:
            return None
        folders = {folder.name: folder for folder in self._folders()}
        episodes = self._read(chosen)
        return ([(folders[row.folder], episode) for row, episode in zip(chosen, episodes, strict=True)],
                self._advance(position, chosen))

    @staticmethod
    def _read(chosen: list[_Row]) -> list[Episode]:
        """The episodes of `chosen`, in that order (each shard read once)."""
        by_shard: dict[Path, set[int]] = defaultdict(set)
        for row in chosen:
            by_shard[row.shard].add(row.row)
        episodes: dict[tuple[Path, int], Episode] = {}
        for shard, wanted in by_shard.items():
            start = 0
            for batch in TrajectorySet(str(shard.parent), "", "", files=[shard]).batches():
                for i in range(start, start + batch.num_rows):
                    if i in wanted:  # only the wanted rows are decoded
                        episodes[(shard, i)] = Episode.from_row(batch.slice(i - start, 1).to_pylist()[0])
                start += batch.num_rows
                if start > max(wanted):
                    break
        return [episodes[(row.shard, row.row)] for row in chosen]

    def _advance(self, position: StreamPosition, chosen: list[_Row]) -> StreamPosition:
        """`position` with `chosen` taken: each folder's prefix moves past every row taken in a run
        from its start; the rows taken beyond a gap are recorded as offsets past the new prefix."""
        import pyarrow.parquet as pq  # optional: pyarrow

        after = StreamPosition(position.to_json())
        newly: dict[str, set[int]] = defaultdict(set)
        for row in chosen:
            newly[row.folder].add(row.offset)
        for folder in self._folders():
            if folder.name not in newly:
                continue
            shards_done, rows_done, taken = position.of(folder.name)
            taken |= newly[folder.name]
            moved = 0
            for shard in self._shards(folder)[shards_done:]:
                count = pq.read_metadata(shard).num_rows
                while rows_done < count and moved in taken:
                    taken.discard(moved)
                    rows_done, moved = rows_done + 1, moved + 1
                if rows_done < count:
                    break
                shards_done, rows_done = shards_done + 1, 0
            after.folders[folder.name] = [shards_done, rows_done, *sorted(o - moved for o in taken)]
        return after
