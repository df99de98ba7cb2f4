"""webgym_data.loading: the one task reader (files, task-set folders, builds old and new) and the
promise that a plain ``datasets.load_dataset(folder)`` of a build returns that build's rows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml

from webgym_data.build import BuildSettings, build
from webgym_data.loading import (
    MAX_LISTED_ERRORS,
    InvalidTasksError,
    NotATaskSetError,
    TaskList,
    TaskSourceError,
    load_tasks,
    read_task_set,
    task_shards,
    write_tasks,
)
from webgym_data.schema import MAX_INSTRUCTION_CHARS, Task, TaskValidationError, task_features
from webgym_data.split import SplitSettings
from webgym_data.stats import compute_stats, read_columns
from webgym_data.versions import diff_task_sets


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def miniwob_rows(path: Path, seeds, task: str = "click-button") -> Path:
    return write_jsonl(path, [{"task_id": f"{task}-{seed}", "task_name": f"MiniWoB {task}",
                               "website": f"miniwob:{task}", "benchmark_name": "miniwob",
                               "environment": f"miniwob:{task}", "env_seed": seed} for seed in seeds])


def seed_rows(prefix: str, n: int = 6) -> list[dict]:
    return [{"task_name": f"{prefix} task {i}: report the opening hours of place {i}",
             "website": f"https://www.{prefix}-place{i}.com", "benchmark_name": prefix,
             "evaluator_reference": [{"id": "1", "description": "Hours", "facts": ["opening", "closing"]}]}
            for i in range(n)]


def build_from(tmp_path: Path, out: Path, prefix: str, *, n: int = 6, test_size: int = 0) -> list[Task]:
    seed = write_jsonl(tmp_path / f"{prefix}.jsonl", seed_rows(prefix, n))
    report = build(BuildSettings(out=out, importers=(("generic", str(seed)),),
                                 split=SplitSettings(test_size=test_size), progress=False))
    return [*report.train, *report.test]


# ---------------------------------------------------------------- plain load_dataset of a build

_LOAD_IN_A_NEW_PROCESS = (
    "import datasets, json, sys\n"
    "d = datasets.load_dataset(sys.argv[1])\n"
    "print(json.dumps(sorted(i for split in d.values() for i in split['task_id'])))\n")


@pytest.mark.parametrize("layout", ["sibling folders", "same folder rebuilt"])
def test_two_builds_in_same_named_folders_each_load_their_own_rows(tmp_path, monkeypatch, layout):
    # An isolated `datasets` cache, in this process (datasets read HF_DATASETS_CACHE at import) and
    # in the new ones; nothing else is overridden: the loads below are the plain call users make.
    cache = tmp_path / "hf-home" / "datasets"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    folders = ([tmp_path / "a" / "tasks", tmp_path / "b" / "tasks"] if layout == "sibling folders"
               else [tmp_path / "tasks", tmp_path / "tasks"])
    for prefix, folder in zip(("alpha", "beta"), folders, strict=True):
        expected = sorted(t.task_id for t in build_from(tmp_path, folder, prefix))
        # Same folder name, same shard count and kinds as the other build: only the rows differ.
        in_process = datasets.load_dataset(str(folder))
        assert sorted(in_process["train"]["task_id"]) == expected, f"{prefix}: another build's rows"
        new_process = subprocess.run([sys.executable, "-c", _LOAD_IN_A_NEW_PROCESS, str(folder)],
                                     env={**os.environ}, capture_output=True, text=True, timeout=240,
                                     check=False)
        assert new_process.returncode == 0, new_process.stderr[-3000:]
        assert json.loads(new_process.stdout.strip().splitlines()[-1]) == expected, prefix
    assert cache.is_dir() and any(cache.iterdir())   # the loads did go through the cache


def test_shard_names_carry_the_build_id_and_the_card_lists_them(tmp_path):
    build_from(tmp_path, tmp_path / "tasks", "alpha", n=20, test_size=4)
    manifest = json.loads((tmp_path / "tasks" / "manifest.json").read_text())
    build_id = manifest["build_id"]
    assert len(build_id) == 12 and manifest["content_hash"].startswith(f"sha256:{build_id}")
    names = sorted(p.name for p in (tmp_path / "tasks" / "data").iterdir())
    assert names and all(f"-{build_id}-" in name for name in names)
    assert sorted(manifest["files"]) == [f"data/{name}" for name in names]
    front = yaml.safe_load((tmp_path / "tasks" / "README.md").read_text().split("---")[1])
    listed = {config["config_name"]: {entry["split"]: entry["path"] for entry in config["data_files"]}
              for config in front["configs"]}
    assert sorted(p for paths in listed["default"].values() for p in paths) == sorted(manifest["files"])
    assert all("-seeds-" in p for paths in listed["seeds"].values() for p in paths)
    assert not any("*" in p for config in listed.values() for paths in config.values() for p in paths)


# ---------------------------------------------------------------- load_tasks (moved from the runner)

def test_load_tasks_from_jsonl_and_task_folder(tmp_path):
    miniwob_rows(tmp_path / "tasks.jsonl", range(3))
    tasks = load_tasks(tmp_path / "tasks.jsonl")
    assert [t.task_id for t in tasks] == ["click-button-0", "click-button-1", "click-button-2"]
    assert tasks[2].env_seed == 2 and tasks[0].environment == "miniwob:click-button"
    assert len(load_tasks(tmp_path / "tasks.jsonl", limit=2)) == 2

    # a folder of task shards without a manifest: data/<split>-*.parquet
    folder = tmp_path / "taskset"
    (folder / "data").mkdir(parents=True)
    for split, names in (("train", ["Find a red shoe", "Buy milk"]), ("test", ["Book a flight"])):
        rows = [Task.from_row({"task_name": n, "website": "shop.example", "benchmark_name": "demo"}).to_row()
                for n in names]
        datasets.Dataset.from_list(rows, features=task_features()).to_parquet(
            str(folder / "data" / f"{split}-00000.parquet"))
    assert [t.task_name for t in load_tasks(folder)] == ["Find a red shoe", "Buy milk"]
    assert [t.task_name for t in load_tasks(folder, split="test")] == ["Book a flight"]
    assert len(load_tasks(folder, split=None)) == 3
    # a parquet file is read whole, whatever the split
    assert [t.task_name for t in load_tasks(folder / "data" / "test-00000.parquet")] == ["Book a flight"]


def test_bad_task_input_names_file_row_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_name": "a", "website": "x.org"}\n{not json\n', encoding="utf-8")
    with pytest.raises(TaskValidationError, match=r"bad\.jsonl, row 1: invalid JSON.*\(line 2\)$"):
        load_tasks(bad)
    bad.write_text('{"task_name": "a", "website": "x.org"}\n{"task_name": "", "website": "x.org"}\n')
    with pytest.raises(TaskValidationError, match=r"bad\.jsonl, row 1, field 'task_name'.*\(line 2\)$"):
        load_tasks(bad)
    dup = miniwob_rows(tmp_path / "dup.jsonl", [1, 1])
    with pytest.raises(TaskValidationError, match=r"row 1, field 'task_id': duplicate task_id.*\(line 2\)$"):
        load_tasks(dup)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskSourceError, match="empty: holds no 'train' task shards"):
        load_tasks(tmp_path / "empty")
    with pytest.raises(TaskSourceError, match="missing.jsonl: no such file or folder"):
        load_tasks(tmp_path / "missing.jsonl")
    (tmp_path / "broken.parquet").write_text("not parquet")
    with pytest.raises(TaskSourceError, match=r"broken\.parquet: not a readable parquet file"):
        load_tasks(tmp_path / "broken.parquet")
    (tmp_path / "tasks.csv").write_text("task_name,website\n")
    with pytest.raises(TaskSourceError, match=r"tasks\.csv: expected a \.jsonl"):
        load_tasks(tmp_path / "tasks.csv")
    assert issubclass(TaskSourceError, TaskValidationError)   # callers that catch the row error see it


def test_a_folder_reads_only_the_asked_split(tmp_path):
    # Files that name no split are the train split ...
    plain = tmp_path / "plain"
    plain.mkdir()
    miniwob_rows(plain / "tasks.jsonl", range(2))
    (plain / ".tmp-half.jsonl").write_text("{broken")       # a writer's temporary file is skipped
    assert len(load_tasks(plain)) == 2
    with pytest.raises(TaskSourceError, match="holds no 'test' task shards"):
        load_tasks(plain, split="test")
    # ... but a folder that names its splits never answers one split with another's rows.
    named = tmp_path / "named"
    named.mkdir()
    miniwob_rows(named / "train.jsonl", range(2))
    with pytest.raises(TaskSourceError, match="holds no 'test' task shards"):
        load_tasks(named, split="test")
    # A JSON file holding a list of rows.
    listed = tmp_path / "tasks.json"
    listed.write_text(json.dumps([{"task_name": "Find a hat", "website": "hats.example"}]))
    assert [t.task_name for t in load_tasks(listed)] == ["Find a hat"]


def test_a_build_is_read_through_its_manifest(tmp_path):
    tasks = build_from(tmp_path, tmp_path / "tasks", "alpha", n=4, test_size=0)
    folder = tmp_path / "tasks"
    # A stray shard copied into data/ is not part of the build.
    stray = folder / "data" / "train-seeds-00000-of-00001.parquet"
    datasets.Dataset.from_list([Task.from_row({"task_name": "stray", "website": "x.example"}).to_row()],
                               features=task_features()).to_parquet(str(stray))
    assert sorted(t.task_id for t in load_tasks(folder)) == sorted(t.task_id for t in tasks)
    assert load_tasks(folder, split="test") == []         # the build's test split is empty
    with pytest.raises(TaskSourceError, match="has no 'validation' split"):
        load_tasks(folder, split="validation")
    train, test, manifest = read_task_set(folder)
    assert (sorted(t.task_id for t in train), test) == (sorted(t.task_id for t in tasks), [])
    assert stray not in task_shards(folder)["train"]
    stray.unlink()
    next(iter(task_shards(folder)["train"])).unlink()
    with pytest.raises(NotATaskSetError, match="listed in manifest.json but missing"):
        load_tasks(folder)
    with pytest.raises(NotATaskSetError, match="not a webgym-data build"):
        read_task_set(tmp_path / "nowhere")


def _as_old_layout(folder: Path) -> None:
    """Turn a build into the layout builds had before the build id: the same rows, shards named
    ``<split>-<kind>-NNNNN-of-NNNNN.parquet``, a manifest without build_id listing those names and
    a card whose `configs:` uses patterns."""
    manifest = json.loads((folder / "manifest.json").read_text())
    build_id = manifest.pop("build_id")
    files = {}
    for relative, digest in manifest["files"].items():
        path = folder / relative
        old = path.with_name(path.name.replace(f"-{build_id}-", "-"))
        path.rename(old)
        files[f"data/{old.name}"] = digest
    manifest["files"] = files
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    card = (folder / "README.md").read_text()
    head, front, body = card.split("---", 2)
    data = yaml.safe_load(front)
    data["configs"] = [{"config_name": name, "data_files": [
        {"split": split, "path": f"data/{split}-{kind}*.parquet"} for split in ("train", "test")
        if any(Path(p).name.startswith(f"{split}-") for p in files)]}
        for name, kind in (("default", ""), ("seeds", "seeds-"))]
    (folder / "README.md").write_text(f"{head}---\n{yaml.safe_dump(data, sort_keys=False)}---{body}")


def test_builds_with_the_old_shard_names_still_read_everywhere(tmp_path):
    new = tmp_path / "new"
    old = tmp_path / "old"
    build_from(tmp_path, new, "alpha", n=30, test_size=4)
    build_from(tmp_path, old, "alpha", n=30, test_size=4)
    _as_old_layout(old)
    assert all(re.fullmatch(r"(train|test)-(seeds|subtasks)-\d{5}-of-\d{5}\.parquet", p.name)
               for p in (old / "data").iterdir())

    new_train, new_test, _ = read_task_set(new)
    old_train, old_test, old_manifest = read_task_set(old)
    assert (old_train, old_test) == (new_train, new_test) and old_test
    assert load_tasks(old, split="test") == new_test
    assert compute_stats(read_columns(old)) == compute_stats(read_columns(new)) == old_manifest["stats"]
    assert diff_task_sets(old, new).summary()["changed"] == 0
    cache = tmp_path / "cache"
    loaded = datasets.load_dataset(str(old), cache_dir=str(cache))
    assert sorted(loaded["train"]["task_id"]) == sorted(t.task_id for t in old_train)

    # --extend an old-layout build: the result has the new names.
    extra = write_jsonl(tmp_path / "extra.jsonl", seed_rows("beta", 3))
    report = build(BuildSettings(out=tmp_path / "v2", importers=(("generic", str(extra)),), extend=old,
                                 split=SplitSettings(test_size=4), progress=False))
    assert report.manifest["build_id"] and report.manifest["extends"]["path"] == str(old)
    assert len(report.train) + len(report.test) == len(old_train) + len(old_test) + 3
    assert all(report.manifest["build_id"] in p.name for p in (tmp_path / "v2" / "data").iterdir())


def test_write_tasks_round_trips_and_leaves_no_temp_file(tmp_path):
    tasks = load_tasks(miniwob_rows(tmp_path / "in.jsonl", range(3)))
    out = write_tasks(tasks, tmp_path / "sub" / "out.jsonl")
    assert load_tasks(out) == tasks
    assert [p.name for p in out.parent.iterdir()] == ["out.jsonl"]
    parquet = tmp_path / "tasks.parquet"
    pq.write_table(datasets.Dataset.from_list([t.to_row() for t in tasks], features=task_features())
                   .data.table, parquet)
    assert load_tasks(parquet) == tasks


# ---------------------------------------------------------------- invalid rows: all at once, or skipped

def mixed_rows(path: Path) -> Path:
    """Three good rows and four bad ones of four kinds, in one JSONL file."""
    good = [{"task_id": f"ok-{i}", "task_name": f"Find item {i}", "website": "shop.example"}
            for i in range(3)]
    lines = [json.dumps(good[0]),
             json.dumps({"task_id": "no-name", "task_name": "", "website": "shop.example"}),      # row 1
             "{not json",                                                                        # row 2
             json.dumps(good[1]),
             json.dumps({"task_id": "too-long", "task_name": "x" * (MAX_INSTRUCTION_CHARS + 1),  # row 4
                         "website": "shop.example"}),
             json.dumps(good[0]),                                                     # row 5: a repeat
             json.dumps(good[2])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_every_invalid_row_is_reported_at_once_with_file_row_and_field(tmp_path):
    path = mixed_rows(tmp_path / "tasks.jsonl")
    with pytest.raises(InvalidTasksError) as caught:
        load_tasks(path)
    error = caught.value
    assert isinstance(error, TaskValidationError)          # callers catching the row error still do
    assert [(e.file, e.row, e.field) for e in error.errors] == [
        (str(path), 1, "task_name"), (str(path), 2, None), (str(path), 4, "task_name"),
        (str(path), 5, "task_id")]
    lines = str(error).splitlines()
    assert lines[0] == f"4 invalid task rows in {path}:"
    assert lines[1:] == [f"  {e}" for e in error.errors]
    assert "invalid JSON" in lines[2] and "limited to 4,000" in lines[3]
    assert "duplicate task_id 'ok-0'" in lines[4]
    assert (error.file, error.row, error.field) == (str(path), 1, "task_name")   # the first one


def test_skip_invalid_returns_the_valid_tasks_and_the_skipped_rows(tmp_path):
    path = mixed_rows(tmp_path / "tasks.jsonl")
    tasks = load_tasks(path, skip_invalid=True)
    assert isinstance(tasks, TaskList) and isinstance(tasks, list)
    assert [t.task_id for t in tasks] == ["ok-0", "ok-1", "ok-2"]          # the first of a repeated id wins
    assert [e.to_dict()["row"] for e in tasks.invalid] == [1, 2, 4, 5]
    assert tasks.invalid[0].to_dict() == {"file": str(path), "row": 1, "line": 2, "field": "task_name",
                                          "reason": "is required and must be a non-empty string (got '')"}
    json.dumps([e.to_dict() for e in tasks.invalid])                        # report-ready
    # A limit counts valid tasks, and rows after the last one taken are not read.
    limited = load_tasks(path, skip_invalid=True, limit=2)
    assert [t.task_id for t in limited] == ["ok-0", "ok-1"] and len(limited.invalid) == 2
    assert [t.task_id for t in load_tasks(path, limit=1)] == ["ok-0"]      # no bad row before it
    with pytest.raises(InvalidTasksError, match="2 invalid task rows"):
        load_tasks(path, limit=2)                                           # two bad rows before ok-1
    assert load_tasks(path, skip_invalid=True, split=None) == tasks        # a file is read whole either way


def test_a_long_list_of_invalid_rows_is_capped_in_the_message_not_in_errors(tmp_path):
    rows = [{"task_name": "", "website": "shop.example"}] * (MAX_LISTED_ERRORS + 7)
    path = write_jsonl(tmp_path / "bad.jsonl",
                       [{"task_name": "Find a shoe", "website": "shop.example"}, *rows])
    with pytest.raises(InvalidTasksError) as caught:
        load_tasks(path)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"{MAX_LISTED_ERRORS + 7} invalid task rows in {path}:"
    assert len(lines) == 1 + MAX_LISTED_ERRORS + 1 and lines[-1] == "  ... and 7 more invalid rows"
    assert [e.row for e in caught.value.errors] == list(range(1, MAX_LISTED_ERRORS + 8))


def test_a_task_folder_reports_the_invalid_rows_of_all_its_files(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    write_jsonl(folder / "train-a.jsonl", [{"task_name": "Find a shoe", "website": "shop.example"},
                                           {"task_name": "Find a hat", "website": ""}])
    write_jsonl(folder / "train-b.jsonl", [{"task_name": "Find a sock", "website": "shop.example",
                                            "difficulty": "hard"}])
    with pytest.raises(InvalidTasksError) as caught:
        load_tasks(folder)
    assert [(Path(e.file).name, e.row, e.field) for e in caught.value.errors] == [
        ("train-a.jsonl", 1, "website"), ("train-b.jsonl", 0, "difficulty")]
    assert f"in {folder}:" in str(caught.value)
    assert [t.task_name for t in load_tasks(folder, skip_invalid=True)] == ["Find a shoe"]
