"""The trainer's view of growing trajectory folders (`webgym_rl.loop.stream`): each committed
episode handed out once, in commit order or in whole groups of attempts, across resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.webgym_rl.synthetic import episode
from webgym_rl.loop.stream import StreamPosition, TrajectoryStream
from webgym_rollout.trajectory.writer import TrajectoryWriter


class Rollout:
    """Chunk folders whose episodes are committed one shard each, in the order a test gives."""

    def __init__(self, root: Path):
        self.root = root
        self.writers: dict[str, TrajectoryWriter] = {}

    def commit(self, chunk: str, task_id: str, attempt: int) -> None:
        if chunk not in self.writers:
            self.writers[chunk] = TrajectoryWriter(self.root / chunk, max_shard_episodes=1)
        self.writers[chunk].add(episode(task_id=task_id, attempt=attempt, num_steps=1))

    def folders(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if p.is_dir())

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close(card=False)


@pytest.fixture
def rollout(tmp_path):
    made = Rollout(tmp_path)
    yield made
    made.close()


def ids(episodes) -> list[str]:
    return [e.episode_id for e in episodes]


def test_commit_order_splits_a_group_that_whole_group_taking_keeps_together(rollout):
    # Attempts finish out of order: a0 of task A, then both of B, then A's second attempt.
    for task_id, attempt in [("A", 0), ("B", 0), ("B", 1)]:
        rollout.commit("chunk-0000", task_id, attempt)
    stream = TrajectoryStream(rollout.folders)
    start = StreamPosition()

    in_order, _ = stream.take(2, start)
    assert ids(in_order) == ["A-it0-a0", "B-it0-a0"]  # one attempt of each task: two split groups

    grouped, after = stream.take(2, start, group=2)
    assert ids(grouped) == ["B-it0-a0", "B-it0-a1"]
    # A's first attempt is still in the stream; B's rows past it are recorded as taken.
    assert after.to_json() == {"chunk-0000": [0, 0, 1, 2]}
    assert stream.available(after) == 1
    assert stream.take(2, after, group=2) is None  # A is not ready until its second attempt commits

    rollout.commit("chunk-0000", "A", 1)
    resumed = StreamPosition.from_json(after.to_json())  # as a rerun reads it from the state
    grouped, end = stream.take(2, resumed, group=2)
    assert ids(grouped) == ["A-it0-a0", "A-it0-a1"]
    assert end.to_json() == {"chunk-0000": [4, 0]}  # every row taken: the prefix covers them all
    assert stream.available(end) == 0 and stream.take(1, end) is None


def test_ready_groups_go_out_in_the_order_their_last_attempt_committed(rollout):
    for chunk, task_id, attempt in [("chunk-0000", "A", 0), ("chunk-0000", "B", 0), ("chunk-0000", "B", 1),
                                    ("chunk-0000", "C", 0), ("chunk-0000", "C", 1), ("chunk-0001", "A", 0),
                                    ("chunk-0001", "A", 1), ("chunk-0000", "A", 1)]:
        rollout.commit(chunk, task_id, attempt)
    stream = TrajectoryStream(rollout.folders)
    taken, after = stream.take(4, StreamPosition(), group=2)
    # chunk 0's B and C (ready before its A), never chunk 1's A beside chunk 0's A.
    assert ids(taken) == ["B-it0-a0", "B-it0-a1", "C-it0-a0", "C-it0-a1"]
    taken, after = stream.take(4, after, group=2)
    assert [(e.episode_id, e.attempt) for e in taken] == [
        ("A-it0-a0", 0), ("A-it0-a1", 1), ("A-it0-a0", 0), ("A-it0-a1", 1)]
    assert after.to_json() == {"chunk-0000": [6, 0], "chunk-0001": [2, 0]}


def test_taking_whole_groups_then_one_by_one_hands_each_episode_out_once(rollout):
    order = [("A", 0), ("B", 0), ("B", 1), ("C", 0), ("A", 1), ("D", 0), ("D", 1), ("C", 1)]
    for task_id, attempt in order:
        rollout.commit("chunk-0000", task_id, attempt)
    stream = TrajectoryStream(rollout.folders)
    seen: list[str] = []
    position = StreamPosition()
    for group in (2, 1, 2, 1):
        taken, position = stream.take(2, position, group=group)
        seen += ids(taken)
    assert sorted(seen) == sorted(f"{t}-it0-a{a}" for t, a in order) and len(set(seen)) == len(seen)
    assert position.to_json() == {"chunk-0000": [8, 0]}


def test_take_from_names_the_folder_of_each_episode(rollout):
    # Two chunks drew the same task: the episodes keep their ids, and each its folder.
    rollout.commit("chunk-0000", "A", 0)
    rollout.commit("chunk-0001", "A", 0)
    rollout.commit("chunk-0001", "B", 0)
    stream = TrajectoryStream(rollout.folders)
    taken, after = stream.take_from(3, StreamPosition())
    assert [(folder.name, e.episode_id) for folder, e in taken] == [
        ("chunk-0000", "A-it0-a0"), ("chunk-0001", "A-it0-a0"), ("chunk-0001", "B-it0-a0")]
    assert all(folder.parent == rollout.root for folder, _ in taken)
    assert ids(stream.take(3, StreamPosition())[0]) == [e.episode_id for _, e in taken]
    assert stream.available(after) == 0
