"""Versions: ``diff`` between builds, ``push`` at the HfApi boundary, and the published layout served
through a real local Hub-protocol server (olah, offline mode)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from webgym_data.build import BuildSettings, build
from webgym_data.loading import read_task_set
from webgym_data.split import SplitSettings
from webgym_data.versions import diff_command, diff_task_sets, push_command, push_task_set

# ------------------------------------------------------------------------------- helpers

def write_seed(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def rows(n_sites: int, *, facts: int = 3) -> list[dict]:
    rubric = [{"id": "1", "description": "Deal", "facts": [f"f{k}" for k in range(facts)]},
              {"id": "2", "description": "Cart", "facts": ["added"]}]
    return [{"task_name": f"find deal {s}-{i} and report its price", "website": f"https://www.shop{s}.com",
             "benchmark_name": "synthetic", "evaluator_reference": rubric}
            for s in range(n_sites) for i in range(2)]


def build_folder(tmp_path: Path, name: str, seed_rows: list[dict], *, test_size: int) -> Path:
    seed = write_seed(tmp_path / f"{name}.jsonl", seed_rows)
    out = tmp_path / name
    build(BuildSettings(out=out, importers=(("generic", str(seed)),),
                        split=SplitSettings(test_size=test_size), progress=False))
    return out


# ------------------------------------------------------------------------------- diff

def test_diff_reports_added_removed_and_changed_tasks(tmp_path):
    base = rows(12)
    old = build_folder(tmp_path, "old", base, test_size=4)
    changed = [dict(r) for r in base]
    changed[0]["evaluator_reference"] = [{"id": "1", "description": "Deal", "facts": ["only one fact"]}]
    new_rows = [*changed[:-2], {"task_name": "a brand new task", "website": "https://www.shop3.com",
                                "benchmark_name": "synthetic"}]
    new = build_folder(tmp_path, "new", new_rows, test_size=4)

    result = diff_task_sets(old, new)
    old_train, old_test, _ = read_task_set(old)
    new_train, new_test, _ = read_task_set(new)
    before = {t.task_id: (t, s) for s, ts in (("train", old_train), ("test", old_test)) for t in ts}
    after = {t.task_id: (t, s) for s, ts in (("train", new_train), ("test", new_test)) for t in ts}
    assert result.added == sorted(set(after) - set(before)) and len(result.added) == 1
    assert result.removed == sorted(set(before) - set(after)) and len(result.removed) >= 2
    # Changed = same id, different row or split (provenance aside); the rubric change is one of them.
    expected = sorted(i for i in set(before) & set(after)
                      if before[i][1] != after[i][1]
                      or replace(before[i][0], source=after[i][0].source) != after[i][0])
    assert result.changed == expected
    rubric_changed = [i for i in expected
                      if before[i][0].evaluator_reference != after[i][0].evaluator_reference]
    assert len(rubric_changed) == 1 and after[rubric_changed[0]][0].task_name == base[0]["task_name"]
    assert result.changed_fields["evaluator_reference"] == 1 and result.changed_fields["difficulty"] == 1
    assert result.changed_fields.get("split", 0) == sum(before[i][1] != after[i][1] for i in expected)
    assert "source" not in result.changed_fields
    assert diff_task_sets(old, old).summary() == {"added": 0, "removed": 0, "changed": 0,
                                                   "unchanged": result.unchanged + len(result.changed)
                                                   + len(result.removed), "changed_fields": {}}

    cli = CliRunner().invoke(diff_command, [str(old), str(new), "--json"])
    assert cli.exit_code == 0, cli.output
    data = json.loads(cli.output)
    assert data["added_ids"] == result.added and data["changed_ids"] == result.changed
    table = CliRunner().invoke(diff_command, [str(old), str(new)])
    assert table.exit_code == 0 and "added" in table.output and result.added[0] in table.output


def test_diff_of_a_folder_that_is_not_a_build_is_one_error_line(tmp_path):
    old = build_folder(tmp_path, "old", rows(3), test_size=1)
    result = CliRunner().invoke(diff_command, [str(old), str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"Error: {tmp_path / 'missing'}: no such folder"]


# ------------------------------------------------------------------------------- push (HfApi boundary)

class RecordingHub:
    """Replaces the HfApi methods push uses; records the calls and what upload_folder would send."""

    def __init__(self, monkeypatch, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.uploaded: dict[str, bytes] = {}
        hub = self

        def record(name: str) -> Callable:
            def method(api, *args, **kwargs):
                hub.calls.append((name, {"args": args, **kwargs}))
                if name == fail_on:
                    import httpx

                    request = httpx.Request("POST", "https://huggingface.co/api/repos/create")
                    response = httpx.Response(403, request=request)
                    raise HfHubHTTPError("403 Forbidden: you have no write access", response=response)
                if name == "upload_folder":
                    folder = Path(kwargs["folder_path"])
                    for path in sorted(folder.rglob("*")):
                        relative = path.relative_to(folder).as_posix()
                        if path.is_file() and any(Path(relative).match(p) for p in kwargs["allow_patterns"]):
                            hub.uploaded[relative] = path.read_bytes()
                    return type("Commit", (), {"commit_url": "https://hub.local/commit/abc"})()
                return None
            return method

        for name in ("create_repo", "create_branch", "upload_folder", "create_tag"):
            monkeypatch.setattr(HfApi, name, record(name))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def test_push_uploads_the_build_and_tags_it(tmp_path, monkeypatch):
    folder = build_folder(tmp_path, "tasks", rows(6), test_size=2)
    (folder / "scratch.tmp").write_text("not part of the dataset")
    hub = RecordingHub(monkeypatch)
    result = CliRunner().invoke(push_command, [str(folder), "me/webgym-tasks", "--tag", "v1.0", "--revision",
                                               "dev", "--private"])
    assert result.exit_code == 0, result.output
    assert "https://hub.local/commit/abc" in result.output
    assert hub.names() == ["create_repo", "create_branch", "upload_folder", "create_tag"]
    create = hub.calls[0][1]
    assert create["args"] == ("me/webgym-tasks",) and create["repo_type"] == "dataset" and create["private"]
    upload = hub.calls[2][1]
    assert upload["repo_id"] == "me/webgym-tasks" and upload["revision"] == "dev"
    # An earlier build's shards (other names) are removed in the same commit.
    assert upload["delete_patterns"] == ["data/*.parquet"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["content_hash"][:19] in upload["commit_message"]
    expected = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
                if p.is_file() and p.name != "scratch.tmp"}
    assert set(hub.uploaded) == expected
    assert hub.uploaded["README.md"] == (folder / "README.md").read_bytes()
    assert b"configs:" in hub.uploaded["README.md"]
    tag = hub.calls[3][1]
    assert tag["tag"] == "v1.0" and tag["revision"] == "dev" and tag["repo_type"] == "dataset"


def test_push_takes_the_shared_options_and_its_old_token_env(tmp_path, monkeypatch):
    folder = build_folder(tmp_path, "tasks", rows(4), test_size=1)
    hub = RecordingHub(monkeypatch)
    tokens = []
    monkeypatch.setattr(HfApi, "__init__", lambda api, token=None, **kw: tokens.append(token))
    result = CliRunner().invoke(push_command, [str(folder), "me/tasks", "--revision", "dev",
                                               "--commit-message", "paper tasks", "--token", "hf_new"])
    assert result.exit_code == 0, result.output
    upload = hub.calls[2][1]
    assert upload["revision"] == "dev" and upload["commit_message"] == "paper tasks"
    monkeypatch.setenv("MY_HUB_TOKEN", "hf_old")
    with pytest.warns(DeprecationWarning):
        result = CliRunner().invoke(push_command, [str(folder), "me/tasks", "--token-env", "MY_HUB_TOKEN"])
    assert result.exit_code == 0, result.output
    assert "--token-env is deprecated and goes in 0.4; use --token" in result.stderr
    assert tokens == ["hf_new", "hf_old"]


def test_push_to_main_without_tag_makes_no_branch_or_tag(tmp_path, monkeypatch):
    folder = build_folder(tmp_path, "tasks", rows(4), test_size=1)
    hub = RecordingHub(monkeypatch)
    push_task_set(folder, "me/tasks")
    assert hub.names() == ["create_repo", "upload_folder"]


def test_push_errors_are_one_line_naming_repo_and_step(tmp_path, monkeypatch):
    folder = build_folder(tmp_path, "tasks", rows(4), test_size=1)
    RecordingHub(monkeypatch, fail_on="create_repo")
    result = CliRunner().invoke(push_command, [str(folder), "me/tasks"])
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert "me/tasks" in line and "create_repo" in line and "403" in line
    not_a_build = tmp_path / "empty"
    not_a_build.mkdir()
    result = CliRunner().invoke(push_command, [str(not_a_build), "me/tasks"])
    assert result.exit_code == 1 and "not a built task set" in result.output


# ------------------------------------------------------------------------------- through the Hub protocol

def test_published_layout_loads_through_a_local_hub(tmp_path, local_hub):
    folder = build_folder(tmp_path, "tasks", rows(15), test_size=6)
    local_hub.publish("dataset", "webgym/tasks", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    code = (
        "import json, datasets\n"
        "d = datasets.load_dataset('webgym/tasks', revision='main')\n"
        "s = datasets.load_dataset('webgym/tasks', 'seeds', revision='main')\n"
        "print(json.dumps({'default': {k: v.num_rows for k, v in d.items()},\n"
        "                  'seeds': {k: v.num_rows for k, v in s.items()},\n"
        "                  'ids': sorted(list(d['train']['task_id']) + list(d['test']['task_id']))}))\n")
    result = subprocess.run([sys.executable, "-c", code], env=local_hub.env(tmp_path / "hf-home"),
                            capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    stats = manifest["stats"]
    assert loaded["default"] == stats["splits"] and stats["splits"]["test"] > 0
    assert loaded["seeds"] == {s: stats["splits"][s] - stats["subtasks"][s] for s in ("train", "test")}
    import pyarrow.parquet as pq

    local_ids = sorted(i for p in (folder / "data").glob("*.parquet")
                       for i in pq.read_table(p)["task_id"].to_pylist())
    assert loaded["ids"] == local_ids


def test_push_of_restricted_seeds_needs_a_private_repo(tmp_path, monkeypatch):
    gaia_rows = [dict(r, benchmark_name="gaia-web") for r in rows(4)]
    folder = build_folder(tmp_path, "tasks", gaia_rows, test_size=1)
    hub = RecordingHub(monkeypatch)
    result = CliRunner().invoke(push_command, [str(folder), "me/tasks"])
    assert result.exit_code == 1 and "gaia-web" in result.output and "--private" in result.output
    assert hub.calls == []  # refused before any Hub call
    result = CliRunner().invoke(push_command, [str(folder), "me/tasks", "--private"])
    assert result.exit_code == 0, result.output
    assert hub.calls[0][1]["private"] is True
