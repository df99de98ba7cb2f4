"""The trajectory contract: types <-> rows <-> features, statuses, the reader, schema 1.1, and that two
runs in same-named folders each load their own rows with plain `datasets.load_dataset`."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.schema_1_1 import write_1_1
from tests.support.schema_1_4 import write_1_4
from tests.webgym_rollout.agent.test_protocol import png
from webgym_data.schema import Task, task_features
from webgym_rollout.errors import BrowserError, JudgeError, PolicyError
from webgym_rollout.trajectory.contract import (
    SUCCESS_REWARD,
    TASK_COLUMNS,
    TRAJECTORY_SCHEMA_VERSION,
    Episode,
    EpisodeColumn,
    EpisodeStatus,
    Latency,
    Step,
    StepField,
    TaskOutcome,
    TokenUsage,
    TrajectoryError,
    Untrainable,
    Verdict,
    policy_version_number,
    shard_schema_problem,
    succeeded,
    trajectory_features,
    untrainable,
)
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.writer import TrajectoryWriter

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
                    latency=Latency(0.5, 0.25, 0.125), policy_version=3, logprobs=(-0.5, -1.0),
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

    def subclasses(cls: type) -> list[type]:
        found = [cls]
        for sub in cls.__subclasses__():
            found += subclasses(sub)
        return found

    modules = {"webgym_rollout.errors", "webgym_rollout.agent.policies", "webgym_rollout.judge.judges"}
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


@pytest.mark.parametrize("status", list(EpisodeStatus))
def test_success_and_trainability_of_hand_made_episodes_of_every_status(status):
    judged = not status.is_error  # ok and timeout: the judge's verdict stands for the agent
    for reward in (1.0, 0.0):
        episode = dataclasses.replace(_episode(), status=status, reward=reward)
        assert episode.success is (reward == SUCCESS_REWARD)
        assert episode.trainable is judged
        assert untrainable(episode.split, episode.status, episode.reward) == (
            None if judged else Untrainable.INFRASTRUCTURE)
        held_out = dataclasses.replace(episode, split="test")
        assert not held_out.trainable and held_out.success is episode.success
        assert untrainable("test", status, reward) is Untrainable.TEST_SPLIT  # before anything else
        # the rules read plain column values too: a status as stored, a reward that may be missing
        assert untrainable(episode.split, status.value, None) == (
            Untrainable.NO_REWARD if judged else Untrainable.INFRASTRUCTURE)


def test_what_counts_as_a_success():
    assert [succeeded(r) for r in (1.0, 1, 1.5, 0.999, 0.0, -1.0, None)] == [True] * 3 + [False] * 4
    assert untrainable("train", "", 0.0) is None and untrainable(None, None, 0.0) is None
    assert Untrainable.NO_REWARD == "episodes without reward"  # the trainer's count of skipped episodes
    with pytest.raises(ValueError):
        untrainable("train", "finished", 1.0)


def test_column_names_are_derived_from_the_contract():
    features = trajectory_features()
    assert [str(c) for c in EpisodeColumn] == list(features)
    assert {str(f) for f in StepField} == set(features["steps"].feature)
    assert EpisodeColumn.REWARD == "reward" and f"{EpisodeColumn.TASK_ID}" == "task_id"
    assert StepField.SAME_AS_NEXT == "same_as_next"
    row = _episode().to_row()
    assert list(row) == [str(c) for c in EpisodeColumn]
    assert list(row["steps"][0]) == [str(f) for f in StepField]
    with pytest.raises(AttributeError):
        EpisodeColumn.SUCCESS  # noqa: B018  (not a column: success is a rule over the reward)


def test_read_episodes_reads_a_run_folder_and_counts_without_screenshots(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=2) as writer:
        for i in range(3):
            writer.add(_episode(f"t{i}", steps=i + 1))
        failed = _episode("t9")
        failed.status, failed.reward, failed.steps = EpisodeStatus.BROWSER_CRASHED, 0.0, []
        writer.add(failed)
    episodes = read_episodes(out)
    assert len(episodes) == 4 and len(episodes.files) == 2
    assert episodes.schema_version == TRAJECTORY_SCHEMA_VERSION
    assert sorted(e.episode_id for e in episodes) == ["t0-0", "t1-0", "t2-0", "t9-0"]
    stats = episodes.stats()
    counts = (stats.episodes, stats.successes, stats.errors, stats.steps, stats.valid_actions)
    assert counts == (4, 3, 1, 6, 6)
    assert stats.success_rate == 0.75
    assert len(read_episodes(out).dataset) == 4
    with pytest.raises(TrajectoryError, match="missing: no such folder"):
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
    assert first.steps[0].policy_version is None and first.steps[0].logprobs == ()
    assert first.steps[0].popups == ()
    assert first.steps[1].response == "reply 1" and first.steps[0].screenshot == png("blue")
    assert episodes.stats().steps == 3


def test_a_schema_1_4_folder_reads_its_version_names_as_numbers(tmp_path):
    # 1.2 to 1.4 stored the endpoint's name for the weights; 1.5 the number. The old names migrate on
    # reading, through the contract (`Episode`) and at the Arrow level (`policy_version_number`).
    names = [["v0", "webgym-policy-v3"], ["", "random"]]
    out = write_1_4(tmp_path / "old", [_episode("a"), _episode("b")], names)
    episodes = read_episodes(out)
    assert episodes.schema_version == "1.4"
    assert [[step.policy_version for step in e.steps] for e in episodes] == [[0, 3], [None, None]]
    stored = episodes.dataset.with_format("arrow")["steps"].to_pylist()
    assert [[policy_version_number(step["policy_version"]) for step in row] for row in stored] == [
        [0, 3], [None, None]]
    # Without its manifest the shard is still known as 1.4 (a string policy_version), and read.
    (out / "manifest.json").unlink()
    again = read_episodes(out)
    assert again.schema_version == "1.4" and [s.policy_version for s in next(iter(again)).steps] == [0, 3]


def test_schema_1_5_and_later_store_the_policy_version_as_an_integer(tmp_path):
    episode = _episode("a")
    episode.steps[1].policy_version = None
    with TrajectoryWriter(tmp_path / "new") as writer:
        writer.add(episode)
    found = read_episodes(tmp_path / "new")
    assert found.schema_version == TRAJECTORY_SCHEMA_VERSION == "1.6"
    (shard,) = found.files
    steps = pq.read_schema(shard).field("steps").type.value_type
    assert pa.types.is_integer(steps.field("policy_version").type)
    assert [s.policy_version for s in next(iter(found)).steps] == [3, None]
    (tmp_path / "new" / "manifest.json").unlink()
    assert read_episodes(tmp_path / "new").schema_version == "1.6"
    # A 1.6 shard whose versions are names is not a 1.6 shard.
    assert "policy_version" in (shard_schema_problem(_string_versions(shard), "1.6") or "")
    assert policy_version_number("webgym-policy-v12") == 12 and policy_version_number(4) == 4
    with pytest.raises(ValueError, match="policy_version"):
        policy_version_number(1.5)


def test_schema_1_6_stores_the_text_observation_and_a_1_5_folder_reads_it_as_empty(tmp_path):
    episode = _episode("a")
    episode.steps[0].observation_text = 'Interactive elements:\n[1] button "Submit" (id=subbtn)'
    with TrajectoryWriter(tmp_path / "new") as writer:
        writer.add(episode)
    found = read_episodes(tmp_path / "new")
    assert [s.observation_text for s in next(iter(found)).steps] == [episode.steps[0].observation_text, ""]
    # As the 1.5 writer wrote it: the same row without the column, and its manifest says 1.5.
    (shard,) = found.files
    table = pq.read_table(shard)
    steps = table.schema.field("steps").type.value_type
    kept = [f for f in steps if f.name != "observation_text"]
    rows = [[{k: v for k, v in step.items() if k != "observation_text"} for step in row]
            for row in table.column("steps").to_pylist()]
    kept_type = pa.list_(pa.struct(kept))
    old = table.set_column(table.schema.get_field_index("steps"), pa.field("steps", kept_type),
                           pa.array(rows, type=kept_type))
    pq.write_table(old, shard)
    manifest = json.loads((tmp_path / "new" / "manifest.json").read_text())
    (tmp_path / "new" / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.5"}))
    again = read_episodes(tmp_path / "new")
    assert again.schema_version == "1.5"
    assert [s.observation_text for s in next(iter(again)).steps] == ["", ""]
    assert "observation_text" in (shard_schema_problem(old.schema, "1.6") or "")
    (tmp_path / "new" / "manifest.json").unlink()
    assert read_episodes(tmp_path / "new").schema_version == "1.5"  # known without its manifest too


def _string_versions(shard: Path) -> pa.Schema:
    schema = pq.read_schema(shard)
    steps = schema.field("steps").type.value_type
    retyped = pa.struct([f.with_type(pa.string()) if f.name == "policy_version" else f for f in steps])
    return schema.set(schema.get_field_index("steps"), pa.field("steps", pa.list_(retyped)))


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


# ---------------------------------------------------------------------- untrusted shards and rows
# Reading a folder checks every shard first: a truncated, empty or foreign shard, a missing, extra
# or mistyped column, a manifest that lies: each is a `TrajectoryError` naming the file (and the
# column or version), raised by `read_episodes` itself, so no reader (len, iteration, stats, the
# datasets view) ever meets a bare pyarrow or KeyError, and no missing column reads as defaults.

FUZZ = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def _run(folder: Path, n: int = 3) -> tuple[Path, dict]:
    with TrajectoryWriter(folder, max_shard_episodes=2) as writer:
        for i in range(n):
            writer.add(_episode(f"t{i}", steps=1 + i % 2))
    return folder, json.loads((folder / "manifest.json").read_text())


def _rewrite(path: Path, change) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _map_steps(table: pa.Table, change) -> pa.Table:
    """`table` with each step dict replaced by ``change(step)`` (types inferred again)."""
    rows = table.to_pylist()
    for row in rows:
        row["steps"] = [change(dict(step)) for step in row["steps"]]
    return pa.Table.from_pylist(rows)


def _without(names):
    return lambda step: {k: v for k, v in step.items() if k not in names}


def _every_reader(source: Path) -> None:
    """Use `source` the way every consumer does."""
    episodes = read_episodes(source)
    len(episodes)
    list(episodes)
    episodes.stats()
    len(episodes.dataset)


SHARD_FAULTS = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
                  r"not a readable parquet shard, truncated or not parquet"),
    "zero bytes": (lambda p: p.write_bytes(b""), r"not a readable parquet shard, it is empty \(0 bytes\)"),
    "not parquet": (lambda p: p.write_text("PAR1 hello"), r"not a readable parquet shard"),
    "missing column": (lambda p: _rewrite(p, lambda t: t.drop_columns(["reward"])),
                       r"not a trajectory schema 1\.6 shard: missing column 'reward'"),
    "wrong type": (lambda p: _rewrite(p, lambda t: _set(t, "reward", pa.array(["1"] * t.num_rows))),
                   r"not a trajectory schema 1\.6 shard: column 'reward' is string, expected a number"),
    "wrong nested type": (lambda p: _rewrite(p, lambda t: _map_steps(t, lambda s: {**s, "latency": "slow"})),
                          r"not a .* shard: column 'steps.latency' is string, expected a struct of policy_s"),
    "missing step field": (lambda p: _rewrite(p, lambda t: _map_steps(t, _without({"memory"}))),
                           r"not a trajectory schema 1\.6 shard: column 'steps' has no field 'memory'"),
}


def test_a_column_of_the_users_own_is_kept_beside_the_schema(tmp_path):
    out, manifest = _run(tmp_path / "run")
    for entry in manifest["shards"]:
        _rewrite(out / entry["path"], lambda t: t.append_column("label", pa.array([1] * t.num_rows)))
    episodes = read_episodes(out)
    assert len(list(episodes)) == len(episodes) > 0 and set(episodes.dataset["label"]) == {1}


@pytest.mark.parametrize("fault", sorted(SHARD_FAULTS))
def test_a_bad_shard_is_refused_naming_the_file_and_column(tmp_path, fault):
    damage, message = SHARD_FAULTS[fault]
    out, manifest = _run(tmp_path / "run")
    shard = out / manifest["shards"][-1]["path"]
    damage(shard)
    with pytest.raises(TrajectoryError, match=re.escape(str(shard)) + ": " + message):
        read_episodes(out)


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: {**m, "schema_version": "9.9"}, r"manifest\.json: trajectory schema 9\.9 is not one this"),
    (lambda m: {**m, "schema_version": 1.3}, r"manifest\.json: 'schema_version' must be a string"),
    (lambda m: {**m, "shards": [{**m["shards"][0], "path": "data/gone.parquet"}]},
     r"manifest\.json lists data/gone\.parquet, which is missing"),
    (lambda m: {**m, "shards": [{**m["shards"][0], "episodes": [["t0", "zero", "x"]]}]},
     r"shard entry 0: 'episodes' must be a list of \[task_id, attempt, episode_id\]"),
    (lambda m: {**m, "shards": [{**m["shards"][0], "path": "../elsewhere.parquet"}]},
     r"shard entry 0: path '\.\./elsewhere\.parquet' is not inside the folder"),
    (lambda m: {**m, "shards": "all of them"}, r"manifest\.json has no 'shards' list"),
    (lambda m: [m], r"manifest\.json has no 'shards' list"),
])
def test_a_manifest_that_does_not_fit_is_refused_naming_it(tmp_path, change, message):
    out, manifest = _run(tmp_path / "run")
    (out / "manifest.json").write_text(json.dumps(change(manifest)))
    with pytest.raises(TrajectoryError, match=message):
        read_episodes(out)


def test_an_older_schema_reads_without_its_later_columns_but_not_without_its_own(tmp_path):
    out, manifest = _run(tmp_path / "run")
    # What 1.6 added: the text observation, a field of each step.
    for shard in manifest["shards"]:
        _rewrite(out / shard["path"], lambda t: _map_steps(t, _without({"observation_text"})))
    with pytest.raises(TrajectoryError, match=r"1\.6 shard: column 'steps' has no field 'observation_text'"):
        read_episodes(out)
    (out / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.5"}))
    assert {s.observation_text for e in read_episodes(out) for s in e.steps} == {""}
    # What 1.5 changed: the policy version was the endpoint's name for it.
    for shard in manifest["shards"]:
        _rewrite(out / shard["path"], lambda t: _map_steps(t, lambda s: {**s, "policy_version": "v3"}))
    with pytest.raises(TrajectoryError, match=r"schema 1\.5 shard: column 'steps.policy_version' is string"):
        read_episodes(out)
    (out / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.4"}))
    assert {s.policy_version for e in read_episodes(out) for s in e.steps} == {3}
    tokens = {"token_ids", "prompt_token_hash", "sampling"}  # what 1.4 added, all in the steps
    for shard in manifest["shards"]:
        _rewrite(out / shard["path"], lambda t: _map_steps(t, _without(tokens)))
    with pytest.raises(TrajectoryError, match=r"schema 1\.4 shard: column 'steps' has no field 'token_ids'"):
        read_episodes(out)
    (out / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.3"}))
    episodes = read_episodes(out)
    assert episodes.schema_version == "1.3" and len(list(episodes)) == 3
    assert all(step.token_ids == () and step.sampling is None and step.prompt_token_hash == ""
               for episode in episodes for step in episode.steps)
    later = ["seed_difficulty_level", "rubric_source", "recording"]  # what 1.3 added (and steps.popups)
    for shard in manifest["shards"]:
        _rewrite(out / shard["path"], lambda t: _map_steps(t.drop_columns(later), _without({"popups"})))
    with pytest.raises(TrajectoryError, match=r"schema 1\.3 shard: missing columns 'seed_difficulty_level'"):
        read_episodes(out)
    (out / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.2"}))
    episodes = read_episodes(out)
    assert episodes.schema_version == "1.2" and len(list(episodes)) == 3
    assert all(step.popups == () for episode in episodes for step in episode.steps)
    _rewrite(out / manifest["shards"][0]["path"], lambda t: t.drop_columns(["outcome"]))
    with pytest.raises(TrajectoryError, match=r"not a trajectory schema 1\.2 shard: missing column 'outcom"):
        read_episodes(out)


def test_a_folder_without_manifest_is_checked_as_the_version_its_columns_say(tmp_path):
    out, manifest = _run(tmp_path / "run")
    (out / "manifest.json").unlink()
    assert len(list(read_episodes(out))) == 3
    _rewrite(out / manifest["shards"][0]["path"], lambda t: t.drop_columns(["reward"]))
    with pytest.raises(TrajectoryError, match=r"missing column 'reward'"):
        read_episodes(out)


@FUZZ
@given(cut=st.floats(min_value=0.0, max_value=0.999))
def test_a_shard_cut_anywhere_is_refused_by_read_episodes_never_by_a_reader(cut, tmp_path_factory):
    out, manifest = _run(tmp_path_factory.mktemp("cut") / "run")
    shard = out / manifest["shards"][0]["path"]
    data = shard.read_bytes()
    shard.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(TrajectoryError, match=re.escape(str(shard))):
        _every_reader(out)


def test_a_shard_damaged_after_it_was_checked_is_still_named(tmp_path):
    out, manifest = _run(tmp_path / "run")
    episodes = read_episodes(out)
    shard = out / manifest["shards"][0]["path"]
    shard.write_bytes(shard.read_bytes()[:100])
    for use in (len, list, lambda e: e.stats()):
        with pytest.raises(TrajectoryError, match=re.escape(str(shard))):
            use(episodes)


row_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.binary(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4)
EPISODE_FIELDS = ["reward", "status", "iteration", "attempt", "verdicts", "outcome", "started_at", "steps",
                  "answer", "task_name", "evaluator_reference", "difficulty"]
STEP_FIELDS = ["index", "screenshot", "messages", "usage", "latency", "logprobs", "popups", "same_as_next"]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(top=st.dictionaries(st.sampled_from(EPISODE_FIELDS), row_values, max_size=2),
       step=st.dictionaries(st.sampled_from(STEP_FIELDS), row_values, max_size=2))
def test_a_row_with_junk_is_an_episode_or_an_error_naming_the_episode(top, step):
    row = _arrow_row(_episode())
    row["steps"][0].update(step)
    row.update(top)
    try:
        episode = Episode.from_row(row)
    except TrajectoryError as error:
        assert str(error).startswith(f"episode {row['episode_id']}: "), str(error)
        return
    assert isinstance(episode.reward, float) and isinstance(episode.status, EpisodeStatus)
    assert all(isinstance(s.screenshot, bytes) and isinstance(s.logprobs, tuple) for s in episode.steps)


@pytest.mark.parametrize(("change", "message"), [
    ({"reward": "1.0"}, r"reward: expected a number, got str '1\.0'"),
    ({"attempt": True}, r"attempt: expected an integer, got bool True"),
    ({"outcome": [1]}, r"outcome: expected an object, got list"),
    ({"steps": "none"}, r"steps: expected a list of steps"),
    ({"steps": [{"index": 0, "latency": {"policy_s": "slow"}}]},
     r"steps\[0\]\.latency\.policy_s: expected a number"),
    ({"steps": [{"index": 0, "logprobs": [0.5, None]}]}, r"steps\[0\]\.logprobs\[1\]: expected a number"),
    ({"steps": [{"index": 0, "screenshot": {"bytes": 7}}]}, r"steps\[0\]\.screenshot: 'bytes' must be bytes"),
    ({"steps": [{"index": 0, "screenshot": {"path": "/nonexistent/x.png"}}]}, r"No such file"),
    ({"steps": ["step"]}, r"steps\[0\]: expected an object, got str"),
])
def test_a_row_value_of_the_wrong_type_names_its_field(change, message):
    row = {**_arrow_row(_episode()), **change}
    with pytest.raises(TrajectoryError, match=r"episode t0-0: .*" + message):
        Episode.from_row(row)


def test_text_utf8_cannot_encode_is_stored_with_a_replacement_character(tmp_path):
    episode = _episode("s", steps=1)
    episode.steps[0].title = "Shop \ud83d"  # half of an emoji, as a page's JS string can hold
    episode.answer = "\udc00 done"
    with TrajectoryWriter(tmp_path / "run") as writer:
        writer.add(episode)
    (back,) = read_episodes(tmp_path / "run")
    assert back.steps[0].title == "Shop \ufffd" and back.answer == "\ufffd done"


def test_a_value_that_fits_the_column_but_not_the_contract_is_named(tmp_path):
    out, manifest = _run(tmp_path / "run")
    shard = out / manifest["shards"][0]["path"]
    _rewrite(shard, lambda t: _set(t, "status", pa.array(["finished"] * t.num_rows)))
    episodes = read_episodes(out)  # the layout is right: only the values are wrong
    with pytest.raises(TrajectoryError, match=r"episode t0-0: .*'finished' is not a valid EpisodeStatus"):
        list(episodes)
    with pytest.raises(TrajectoryError, match=re.escape(str(out)) + r": 'finished' is not a valid Episode"):
        episodes.stats()
