"""Trajectory shards: atomic writes, manifest, crash-safe resume, load_dataset, card, push."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webgym_rollout.agent.test_protocol import png
from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction
from webgym_rollout.trajectory import hub
from webgym_rollout.trajectory.contract import (
    Episode,
    Latency,
    Step,
    TrajectoryError,
    Verdict,
    trajectory_features,
)
from webgym_rollout.trajectory.hub import PushRefused, push_command
from webgym_rollout.trajectory.reader import read_episodes, read_manifest
from webgym_rollout.trajectory.writer import DatasetExists, EpisodeRepeated, TrajectoryWriter

TASK_ROW = {"task_id": "t0", "task_name": "Click the <b>OK</b> button", "website": "miniwob:click-button",
            "start_url": "http://127.0.0.1/miniwob/click-button.html", "benchmark_name": "miniwob",
            "difficulty": 1, "environment": "miniwob:click-button", "env_seed": 7,
            "evaluator_reference": [{"id": "1", "description": "d", "facts": ["OK clicked"]}],
            "source": {"importer": "x"}}
COLORS = ["red", "green", "blue", "yellow"]


def make_episode(task_id: str, attempt: int = 0, *, n_steps: int = 2, reward: float = 1.0,
                 split: str = "train", size=(160, 210)) -> Episode:
    steps = []
    for j in range(n_steps):
        action = AgentAction("left_click", coordinate=(250, 500)) if j % 2 == 0 else None
        steps.append(Step(
            index=j, screenshot=png(COLORS[j % len(COLORS)], size), messages=json.dumps([{"role": "user"}]),
            response="Memory: m\n" + (action.to_tool_call() if action else "???"),
            action=action.to_json() if action else "", action_error="" if action else "no <tool_call>",
            memory=f"memory {j}", url=f"http://127.0.0.1/{j}", title=f"Title {j}",
            same_as_next=j == 1, latency=Latency(policy_s=0.1, execute_s=0.02, screenshot_s=0.03)))
    return Episode(
        task=Task.from_row({**TASK_ROW, "task_id": task_id}), episode_id=f"{task_id}-a{attempt}",
        attempt=attempt, split=split, policy_model="random", judge_model="programmatic", reward=reward,
        answer="done", verdicts=[Verdict("environment", reward >= 1, "raw reward")], steps=steps)


def shard_files(out: Path) -> list[str]:
    return [shard["path"] for shard in read_manifest(out)["shards"]]


def keys_of(ds) -> list[tuple[str, int]]:
    return sorted(zip(ds["task_id"], ds["attempt"], strict=True))


def test_written_folder_loads_with_load_dataset_and_screenshots_decode(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=2) as writer:
        for i in range(3):
            writer.add(make_episode(f"t{i}", reward=float(i != 1)))
        writer.add(make_episode("q0", split="test", n_steps=1))
    manifest = read_manifest(out)
    run = manifest["run_id"]  # shard names are unique to the run (see test_trajectory)
    assert shard_files(out) == [f"data/train-{run}-00000.parquet", f"data/train-{run}-00001.parquet",
                                f"data/test-{run}-00000.parquet"]
    assert sum(s["num_rows"] for s in manifest["shards"]) == 4

    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert set(loaded) == {"train", "test"}
    train = loaded["train"]
    assert train.features == trajectory_features()
    assert sorted(train["episode_id"]) == ["t0-a0", "t1-a0", "t2-a0"]
    step = train[0]["steps"][0]
    assert step["screenshot"].size == (160, 210)
    assert step["screenshot"].getpixel((5, 5)) == (255, 0, 0)
    assert AgentAction.from_json(step["action"]).coordinate == (250, 500)
    # Task fields come through; fields trajectories do not store are dropped.
    assert train[0]["env_seed"] == 7 and train[0]["evaluator_reference"][0]["facts"] == ["OK clicked"]
    assert [e.episode_id for e in read_episodes(out, split="test")] == ["q0-a0"]

    card = (out / "README.md").read_text()
    assert "configs:" in card
    shards = f"    - data/train-{run}-00000.parquet\n    - data/train-{run}-00001.parquet\n"
    assert "- split: train\n    path:\n" + shards in card
    assert f"- split: test\n    path:\n    - data/test-{run}-00000.parquet\n" in card
    assert "| episodes | 4 (test: 1, train: 3) |" in card
    assert "| success rate (reward 1) | 75.0% |" in card
    assert "| steps | 7 (mean 1.8 per episode) |" in card
    assert "`random`" in card and "$" not in card.split("---", 2)[1]


def test_a_crashed_run_resumes_with_every_episode_exactly_once(tmp_path):
    out = tmp_path / "run"
    wanted = [(f"t{i}", attempt) for i in range(6) for attempt in range(2)]  # 12 episodes
    writer = TrajectoryWriter(out, max_shard_episodes=3)
    for task_id, attempt in wanted[:6]:
        writer.add(make_episode(task_id, attempt))  # two shards written
    for task_id, attempt in wanted[6:8]:
        writer.add(make_episode(task_id, attempt))  # buffered only: lost in the crash, must be redone
    # The crash: a shard was renamed into place but its manifest update never happened, and a
    # half-written temporary file is left behind. The writer object is simply abandoned.
    listed_before = (out / "manifest.json").read_text()
    writer.add(make_episode(*wanted[8]))  # completes shard 3 (episodes 6, 7, 8)
    (out / "manifest.json").write_text(listed_before)
    (out / "data" / f".tmp-train-{writer.run_id}-00003.parquet").write_bytes(b"PAR1 half written")
    del writer

    with pytest.raises(DatasetExists, match="--resume"):
        TrajectoryWriter(out)
    with TrajectoryWriter(out, resume=True, max_shard_episodes=3) as resumed:
        # The unlisted but complete shard is adopted, the temporary file removed.
        assert not list((out / "data").glob(".tmp-*"))
        assert resumed.done == set(wanted[:9])
        todo = [key for key in wanted if not resumed.is_done(*key)]
        assert todo == wanted[9:]
        for task_id, attempt in todo:
            resumed.add(make_episode(task_id, attempt))
        with pytest.raises(EpisodeRepeated, match="already in the dataset"):
            resumed.add(make_episode(*wanted[0]))
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert keys_of(ds) == sorted(wanted)
    assert sorted((e.task.task_id, e.attempt) for e in read_episodes(out)) == sorted(wanted)


def test_an_unlisted_shard_that_repeats_listed_episodes_is_dropped(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=2) as writer:
        writer.add(make_episode("a"))
        writer.add(make_episode("b"))
    # A stray copy of a listed shard (same episodes) must not duplicate them.
    (first,) = shard_files(out)
    stray = out / first.replace("-00000.", "-00007.")
    shutil.copy(out / first, stray)
    with TrajectoryWriter(out, resume=True) as resumed:
        assert not stray.exists()
        resumed.add(make_episode("c"))
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert keys_of(ds) == [("a", 0), ("b", 0), ("c", 0)]


def test_rows_that_do_not_fit_the_contract_are_refused_by_episode(tmp_path):
    row = make_episode("t1").to_row()
    assert Episode.from_row(row).task.task_id == "t1"
    with pytest.raises(TrajectoryError, match=r"episode t1-a0: .*task_name"):
        Episode.from_row({**row, "task_name": ""})
    with pytest.raises(TrajectoryError, match=r"episode t1-a0: .*'finished'"):
        Episode.from_row({**row, "status": "finished"})


def test_a_folder_of_another_schema_is_not_resumed(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out) as writer:
        writer.add(make_episode("a"))
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.1"}))
    with pytest.raises(DatasetExists, match="schema 1.1.*writes 1.6"):
        TrajectoryWriter(out, resume=True)


def test_a_broken_manifest_is_reported_by_name(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out) as writer:
        writer.add(make_episode("a"))
    (first,) = shard_files(out)
    (out / first).unlink()
    with pytest.raises(TrajectoryError, match=f"lists {first}, which is missing"):
        read_manifest(out)
    (out / "manifest.json").write_text("{")
    with pytest.raises(TrajectoryError, match="manifest.json cannot be read"):
        read_episodes(out)
    # resuming sets the broken manifest aside and rebuilds one from the shards (tested below)


class FakeHfApi:
    """Records the calls at the HfApi boundary (uploads cannot be tested against a local Hub)."""

    calls: list = []

    def __init__(self, token=None):
        FakeHfApi.calls.append(("init", token))

    def create_repo(self, repo_id, **kwargs):
        FakeHfApi.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        folder = Path(kwargs["folder_path"])
        # What would be uploaded: files matched by allow_patterns (exact paths here).
        kwargs["files"] = sorted(p for p in kwargs["allow_patterns"] if (folder / p).is_file())
        kwargs["card"] = (folder / "README.md").read_text()
        FakeHfApi.calls.append(("upload_folder", kwargs))
        return "https://hub.example/commit/1"


def test_push_uploads_only_what_the_manifest_lists(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    FakeHfApi.calls = []
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=1) as writer:
        writer.add(make_episode("a"))
        writer.add(make_episode("b"))
    (out / "data" / ".tmp-train-00009.parquet").write_bytes(b"junk")
    listed = shard_files(out)
    result = CliRunner().invoke(push_command, [str(out), "org/trajs", "--private", "--token", "hf_x"])
    assert result.exit_code == 0, result.output
    assert "https://hub.example/commit/1" in result.output
    names = [c[0] for c in FakeHfApi.calls]
    assert names == ["init", "create_repo", "upload_folder"]
    assert FakeHfApi.calls[0] == ("init", "hf_x")
    assert FakeHfApi.calls[1][1] == "org/trajs"
    assert FakeHfApi.calls[1][2] == {"repo_type": "dataset", "private": True, "exist_ok": True}
    upload = FakeHfApi.calls[2][1]
    assert upload["repo_type"] == "dataset" and upload["repo_id"] == "org/trajs"
    assert upload["files"] == sorted(["README.md", *listed, "manifest.json"]) and len(listed) == 2
    assert 'load_dataset("org/trajs"' in upload["card"]


def test_push_takes_the_old_message_flag_with_a_warning_and_makes_the_branch(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(FakeHfApi, "create_branch", lambda api, repo_id, **kw: FakeHfApi.calls.append(
        ("create_branch", repo_id, kw)), raising=False)
    FakeHfApi.calls = []
    out = tmp_path / "run"
    with TrajectoryWriter(out) as writer:
        writer.add(make_episode("a"))
    with pytest.warns(DeprecationWarning):
        result = CliRunner().invoke(push_command, [str(out), "org/trajs", "--message", "run 1",
                                                   "--revision", "dev"])
    assert result.exit_code == 0, result.output
    assert "--message is deprecated and goes in 0.4; use --commit-message" in result.stderr
    assert [c[0] for c in FakeHfApi.calls] == ["init", "create_repo", "create_branch", "upload_folder"]
    assert FakeHfApi.calls[2][2] == {"repo_type": "dataset", "branch": "dev", "exist_ok": True}
    upload = FakeHfApi.calls[3][1]
    assert upload["commit_message"] == "run 1" and upload["revision"] == "dev"


def test_push_refuses_a_folder_that_is_not_a_finished_dataset(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    FakeHfApi.calls = []
    result = CliRunner().invoke(push_command, [str(tmp_path), "org/x"])
    assert result.exit_code != 0 and "manifest.json does not exist" in result.output
    TrajectoryWriter(tmp_path / "empty").close()
    with pytest.raises(PushRefused, match="no finished shards"):
        hub.push_trajectories(tmp_path / "empty", "org/x")
    out = tmp_path / "run"
    with TrajectoryWriter(out) as writer:
        writer.add(make_episode("a"))
    with open(out / shard_files(out)[0], "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(PushRefused, match="sha256"):
        hub.push_trajectories(out, "org/x")
    assert FakeHfApi.calls == []


def test_load_dataset_sees_episodes_added_by_a_resumed_run(tmp_path):
    # datasets caches a folder under a hash of its `configs:` patterns; with a glob the second load
    # would return the cached first version. The card lists the exact shards instead.
    out, cache = tmp_path / "run", str(tmp_path / "cache")
    with TrajectoryWriter(out) as writer:
        writer.add(make_episode("a"))
    assert datasets.load_dataset(str(out), split="train", cache_dir=cache)["task_id"] == ["a"]
    with TrajectoryWriter(out, resume=True) as writer:
        writer.add(make_episode("b"))
    assert sorted(datasets.load_dataset(str(out), split="train", cache_dir=cache)["task_id"]) == ["a", "b"]


# ------------------------------------------------------------------------- crashes and bad episodes
# A crash mid-write never costs a committed (listed) episode: whatever the crash left (a cut
# temporary file, a renamed shard the disk did not finish, a cut listed shard, a cut manifest), a
# resumed writer keeps every readable listed shard, sets the damaged file aside, reports exactly the
# lost episodes as not done, and the finished folder holds every episode once.

CRASHES = ["tmp file cut", "unlisted shard cut", "listed shard cut", "manifest cut", "manifest empty"]


def _write_then_crash(out: Path, crash: str, cut: float, wanted: list) -> tuple[set, set]:
    """Write `wanted` (shards of 3) with the last shard's write interrupted as `crash` says;
    returns (the episodes that must survive, those the crash may cost)."""
    writer = TrajectoryWriter(out, max_shard_episodes=3)
    for key in wanted[:6]:
        writer.add(make_episode(*key, n_steps=1))  # two listed shards
    committed, last = set(wanted[:6]), set(wanted[6:9])
    before = (out / "manifest.json").read_bytes()
    for key in wanted[6:9]:
        writer.add(make_episode(*key, n_steps=1))  # the third shard: written, renamed, listed
    shard = out / read_manifest(out)["shards"][-1]["path"]

    def cut_file(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[:int(len(data) * cut)])

    if crash == "tmp file cut":  # died while writing the temporary file: nothing was renamed
        shard.replace(shard.with_name(f".tmp-{shard.name}"))
        cut_file(shard.with_name(f".tmp-{shard.name}"))
        (out / "manifest.json").write_bytes(before)
    elif crash == "unlisted shard cut":  # renamed, the disk kept the name but not all the data
        cut_file(shard)
        (out / "manifest.json").write_bytes(before)
    elif crash == "listed shard cut":  # listed too, then the power went before the data was on disk
        cut_file(shard)
    elif crash == "manifest cut":
        cut_file(out / "manifest.json")
        committed |= last
        last = set()
    else:
        (out / "manifest.json").write_bytes(b"")
        committed |= last
        last = set()
    return committed, last


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(crash=st.sampled_from(CRASHES), cut=st.floats(min_value=0.0, max_value=0.95))
def test_a_crash_mid_write_never_loses_a_committed_episode(crash, cut, tmp_path_factory):
    out = tmp_path_factory.mktemp("crash") / "run"
    wanted = [(f"t{i}", 0) for i in range(10)]
    committed, may_be_lost = _write_then_crash(out, crash, cut, wanted)
    with TrajectoryWriter(out, resume=True, max_shard_episodes=3) as resumed:
        assert committed <= resumed.done <= committed | may_be_lost
        assert {e.task.task_id for e in read_episodes(out)} == {key[0] for key in resumed.done}
        for key in wanted:
            if not resumed.is_done(*key):
                resumed.add(make_episode(*key, n_steps=1))
    episodes = sorted((e.task.task_id, e.attempt) for e in read_episodes(out))
    assert episodes == sorted(wanted)  # every episode, once
    assert not list((out / "data").glob(".tmp-*"))
    if crash in ("unlisted shard cut", "listed shard cut"):
        assert len(list((out / "data").glob("*.parquet.corrupt*"))) == 1  # kept for a person, read by none
    if crash.startswith("manifest"):
        assert (out / "manifest.json.corrupt").is_file()


def test_an_episode_that_cannot_be_stored_is_refused_alone(tmp_path):
    from webgym_rollout.trajectory.writer import EpisodeUnstorable

    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=3) as writer:
        writer.add(make_episode("a"))
        bad = make_episode("b")
        bad.iteration = 2**40  # the column is int32
        with pytest.raises(EpisodeUnstorable, match=r"episode b-a0 \(task b\) cannot be stored"):
            writer.add(bad)
        assert not writer.is_done("b", 0)
        writer.add(make_episode("c"))
    assert sorted(e.task.task_id for e in read_episodes(out)) == ["a", "c"]


def test_a_failed_shard_write_keeps_its_episodes_for_the_next_flush(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    out = tmp_path / "run"
    writer = TrajectoryWriter(out, max_shard_episodes=10)
    writer.add(make_episode("a"))
    writer.add(make_episode("b"))
    real = pq.write_table

    def disk_full(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 partly")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    with pytest.raises(OSError, match="No space left"):
        writer.flush()
    assert read_manifest(out)["shards"] == [] and writer.is_done("a", 0)  # still buffered
    monkeypatch.setattr(pq, "write_table", real)
    writer.close()
    assert sorted(e.task.task_id for e in read_episodes(out)) == ["a", "b"]
    assert not list((out / "data").glob(".tmp-*"))


def test_a_resume_refuses_nothing_it_can_keep_and_keeps_what_it_sets_aside(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=1) as writer:
        for task_id in ("a", "b"):
            writer.add(make_episode(task_id))
    first, second = shard_files(out)
    (out / second).write_bytes(b"")  # a zero-byte listed shard
    with TrajectoryWriter(out, resume=True, max_shard_episodes=1) as resumed:
        assert resumed.done == {("a", 0)}
        resumed.add(make_episode("b"))
    assert (out / f"{second}.corrupt").is_file()
    assert shard_files(out)[0] == first and second not in shard_files(out)  # no name is reused
    assert sorted(e.task.task_id for e in read_episodes(out)) == ["a", "b"]
