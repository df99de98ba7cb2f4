"""webgym_rollout.trajectory.reader: what `read_episodes` says of a source that is no trajectory set.
A task set (with or without its manifest) is named as one, with the command that makes trajectories
from it, by the reader and by the commands that read runs (view, report); a missing folder that can
only be a path is never looked up on the Hub."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import huggingface_hub
import pytest
from click.testing import CliRunner

from webgym_data.build import BuildSettings, build
from webgym_data.split import SplitSettings
from webgym_rollout.report.html import report_command
from webgym_rollout.report.viewer import view_command
from webgym_rollout.trajectory.contract import TrajectoryError
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.recordings import ReplayLibrary


@pytest.fixture(scope="module")
def task_set(tmp_path_factory) -> Path:
    """A folder written by ``webgym-data build`` (two tasks, offline)."""
    root = tmp_path_factory.mktemp("tasks")
    seed = root / "seed.jsonl"
    seed.write_text("".join(json.dumps({"task_name": f"Report the opening hours of place {i}",
                                        "website": f"https://www.place{i}.com"}) + "\n" for i in range(2)))
    build(BuildSettings(out=root / "tasks", importers=(("generic", str(seed)),),
                        split=SplitSettings(test_size=0), progress=False))
    return root / "tasks"


def _names_the_task_set(message: str, folder: Path) -> None:
    assert f"{folder} is a task set" in message and "not a trajectory set" in message, message
    assert f"webgym-rollout run --tasks {folder}" in message, message
    assert "'shards'" not in message


def test_a_task_set_is_named_as_one_with_the_command_that_makes_trajectories(task_set):
    with pytest.raises(TrajectoryError) as caught:
        read_episodes(task_set)
    _names_the_task_set(str(caught.value), task_set)


def test_a_task_set_without_its_manifest_is_recognised_by_its_rows(task_set, tmp_path):
    copy = tmp_path / "copied"
    shutil.copytree(task_set, copy)
    (copy / "manifest.json").unlink()  # a copy of the Hub dataset: shards and card only
    with pytest.raises(TrajectoryError) as caught:
        read_episodes(copy)
    _names_the_task_set(str(caught.value), copy)


@pytest.mark.parametrize("command", ["view", "report"])
def test_view_and_report_of_a_task_set_say_what_it_is_and_exit_non_zero(task_set, tmp_path, command):
    if command == "view":
        result = CliRunner().invoke(view_command, [str(task_set)])
    else:
        result = CliRunner().invoke(report_command, [str(task_set), "--out", str(tmp_path / "report")])
    assert result.exit_code == 1, result.output
    _names_the_task_set(result.output, task_set)
    assert "Traceback" not in result.output


@pytest.fixture
def no_hub(monkeypatch):
    """Fail the test on any Hub client call: the calls a Hub id would make."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"a Hub call was made: {args}")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", refuse)
    return calls


@pytest.mark.parametrize("name", ["./nope", "../nope/run", "/nonexistent/run", "~/nope",
                                  "out/trajectories/nope", ".cache/run", "runs\\nope"])
def test_a_missing_path_is_no_such_folder_and_never_a_hub_call(no_hub, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrajectoryError, match="no such folder") as caught:
        read_episodes(name)
    assert name in str(caught.value) and "not looked up on the Hub" in str(caught.value)
    with pytest.raises(TrajectoryError, match="no such folder"):
        ReplayLibrary.open(name)
    assert no_hub == []


def test_report_of_a_mistyped_path_names_it_without_asking_the_hub(no_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(report_command, ["./nope", "--out", str(tmp_path / "report")])
    assert result.exit_code == 1 and "./nope: no such folder" in result.output, result.output
    assert no_hub == []


def test_a_hub_id_that_fails_to_load_says_when_a_local_folder_of_its_first_part_exists(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TrajectoryError) as caught:
        read_episodes("out/iter-0000")
    assert "out is a folder here, but it holds no iter-0000" in str(caught.value)
    assert "offline" in str(caught.value)
