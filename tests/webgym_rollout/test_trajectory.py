"""The trajectory contract: types <-> rows <-> features, statuses, the reader, schema 1.1, and that two
runs in same-named folders each load their own rows with plain `datasets.load_dataset`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pyarrow as pa
import pytest

from tests.schema_1_1 import write_1_1
from tests.webgym_rollout.test_agent import png
from webgym_data.schema import Task, task_features
from webgym_rollout.dataset import TrajectoryWriter
from webgym_rollout.errors import BrowserError, JudgeError, PolicyError
from webgym_rollout.trajectory import (
    TASK_COLUMNS,
    Episode,
    EpisodeStatus,
    Latency,
    Step,
    TaskOutcome,
    TokenUsage,
    TrajectoryError,
    Verdict,
    read_episodes,
    trajectory_features,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _task(task_id: str = "t0", name: str = "Find the price") -> Task:
    return Task.from_row({"task_id": task_id, "task_name": name, "website": "shop.example",
                          "benchmark_name": "demo", "evaluator_reference": [
                              {"id": "1", "description": "price", "facts": ["a price is given"]}]})


def _episode(task_id: str = "t0", *, attempt: int = 0, name: str = "Find the price",
             steps: int = 2) -> Episode:
    return Episode(
        task=_task(task_id, name), episode_id=f"{task_id}-{attempt}", iteration=3, attempt=attempt,
        instruction=name, policy_model="m", judge_model="j", reward=1.0, status=EpisodeStatus.TIMEOUT,
        answer="$5", verdicts=[Verdict("fact:1:0", True, "seen")],
        outcome=TaskOutcome(done=True, raw_reward=1.0, reason="clicked"), started_at=1.7e9 + 0.25,
        duration_s=2.5, judge_s=0.5,
        steps=[Step(index=i, screenshot=png("red" if i else "blue"), messages="[]", response=f"reply {i}",
                    action='{"action":"wait"}', url=f"http://shop.example/{i}", title="Shop",
                    same_as_next=bool(i), finish_reason="stop", usage=TokenUsage(10, 2),
                    latency=Latency(0.5, 0.25, 0.125), policy_version="ckpt-3", logprobs=(-0.5, -1.0),
                    popups=("http://shop.example/ad",) if i else ())
               for i in range(steps)])


def _arrow_row(episode: Episode) -> dict:
    """The row as a parquet round trip gives it back (what every reader sees)."""
    features = trajectory_features()
    table = pa.Table.from_pylist([features.encode_example(episode.to_row())], schema=features.arrow_schema)
    return table.to_pylist()[0]


def test_the_features_are_derived_from_the_types_and_the_task_contract():
    features = trajectory_features()
    tasks = task_features()
    for name in TASK_COLUMNS:
        assert features[name] == tasks[name]
    episode_fields = {f.name for f in dataclasses.fields(Episode)} - {"task"}
    assert set(features) == set(TASK_COLUMNS) | episode_fields | {"num_steps"}
    assert set(features["steps"].feature) == {f.name for f in dataclasses.fields(Step)}
    assert type(features["steps"].feature["screenshot"]).__name__ == "Image"
    assert features["started_at"].dtype == "float64" and features["steps"].feature["index"].dtype == "int32"


def test_an_episode_round_trips_through_a_parquet_row():
    episode = _episode()
    back = Episode.from_row(_arrow_row(episode))
    assert back == episode  # every value chosen to be exact in float32
    assert back.steps[0].screenshot == episode.steps[0].screenshot
    shas = [step.screenshot_sha256 for step in back.steps]
    assert shas == [step.screenshot_sha256 for step in episode.steps] and shas[0] != shas[1]
    assert back.num_steps == 2 and back.status is EpisodeStatus.TIMEOUT and not back.status.is_error


def test_statuses_cover_every_failure_kind_and_classify_them():
    import webgym_rollout.judge
    import webgym_rollout.policy  # noqa: F401  (their error classes)

    def subclasses(cls: type) -> list[type]:
        found = [cls]
        for sub in cls.__subclasses__():
            found += subclasses(sub)
        return found

    modules = {"webgym_rollout.errors", "webgym_rollout.policy", "webgym_rollout.judge"}
    kinds = {cls.kind for root in (BrowserError, PolicyError, JudgeError) for cls in subclasses(root)
             if cls.__module__ in modules}
    assert len(kinds) > 15
    for kind in kinds:
        status = EpisodeStatus.for_error(kind)
        assert status.is_error and status is not EpisodeStatus.INTERNAL or kind == "internal", kind
        assert status.error_kind == ("blocked" if kind == "site_blocked" else kind)
    assert EpisodeStatus.for_error("something_new") is EpisodeStatus.INTERNAL
    assert [s for s in EpisodeStatus if not s.is_error] == [EpisodeStatus.OK, EpisodeStatus.TIMEOUT]
    assert EpisodeStatus("error:browser_crashed") is EpisodeStatus.BROWSER_CRASHED
    assert EpisodeStatus("error:from_a_newer_version") is EpisodeStatus.INTERNAL
    with pytest.raises(ValueError):
        EpisodeStatus("finished")


def test_read_episodes_reads_a_run_folder_and_counts_without_screenshots(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=2) as writer:
        for i in range(3):
            writer.add(_episode(f"t{i}", steps=i + 1))
        failed = _episode("t9")
        failed.status, failed.reward, failed.steps = EpisodeStatus.BROWSER_CRASHED, 0.0, []
        writer.add(failed)
    episodes = read_episodes(out)
    assert len(episodes) == 4 and episodes.schema_version == "1.3" and len(episodes.files) == 2
    assert sorted(e.episode_id for e in episodes) == ["t0-0", "t1-0", "t2-0", "t9-0"]
    stats = episodes.stats()
    counts = (stats.episodes, stats.successes, stats.errors, stats.steps, stats.valid_actions)
    assert counts == (4, 3, 1, 6, 6)
    assert stats.success_rate == 0.75
    assert len(read_episodes(out).dataset) == 4
    with pytest.raises(TrajectoryError, match="not a Hub dataset id"):
        read_episodes(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(TrajectoryError, match="expected a rollout folder"):
        read_episodes(tmp_path / "file.txt")


def test_a_schema_1_1_folder_is_read_with_defaults_for_the_new_fields(tmp_path):
    out = write_1_1(tmp_path / "old", [_episode("a"), _episode("b", steps=1)])
    episodes = read_episodes(out)
    assert episodes.schema_version == "1.1"
    first, second = list(episodes)
    assert (first.episode_id, second.episode_id) == ("a-0", "b-0")
    assert first.outcome == TaskOutcome()
    assert first.steps[0].policy_version == "" and first.steps[0].logprobs == ()
    assert first.steps[0].popups == ()
    assert first.steps[1].response == "reply 1" and first.steps[0].screenshot == png("blue")
    assert episodes.stats().steps == 3


# Plain `load_dataset(folder)`, as the README and the card tell users to call it, in a process with the
# given datasets cache; prints the task ids it got back.
_LOAD = """
import sys, datasets
for folder in sys.argv[1:]:
    print(sorted(datasets.load_dataset(folder, split="train")["task_id"]))
"""


def _load_in_new_process(cache: Path, *folders: Path) -> list[list[str]]:
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", _LOAD, *map(str, folders)], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    return [json.loads(line.replace("'", '"')) for line in done.stdout.splitlines()]


def test_two_runs_in_same_named_folders_each_load_their_own_rows(tmp_path):
    first, second = tmp_path / "a" / "iter-0000" / "eval", tmp_path / "b" / "iter-0000" / "eval"
    for folder, ids in ((first, ["x1", "x2"]), (second, ["y1"])):
        with TrajectoryWriter(folder) as writer:
            for task_id in ids:
                writer.add(_episode(task_id, steps=1))
    cache = tmp_path / "cache"
    # one process loading both, one after the other; then a new process, with the cache now warm
    assert _load_in_new_process(cache, first, second) == [["x1", "x2"], ["y1"]]
    assert _load_in_new_process(cache, second, first) == [["y1"], ["x1", "x2"]]
    # the same holds when a folder is replaced by a new run under the very same path
    replaced = tmp_path / "a" / "iter-0000" / "eval"
    for path in sorted(replaced.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    with TrajectoryWriter(replaced) as writer:
        writer.add(_episode("z1", steps=1))
    assert _load_in_new_process(cache, replaced) == [["z1"]]


def test_step_and_episode_docstrings_cover_every_field():
    from webgym_core.settings import field_docs

    for cls in (Step, Episode, TaskOutcome, Latency):
        hints = typing.get_type_hints(cls)
        documented = set(field_docs(cls))
        assert set(hints) - documented == set(), cls
