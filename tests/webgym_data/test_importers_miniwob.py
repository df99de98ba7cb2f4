"""webgym_data.importers.miniwob: MiniWoB++ task names + seeds become WebGym task rows."""

from __future__ import annotations

import json

import pytest

from webgym_data.importers import import_seed
from webgym_data.importers.miniwob import write_miniwob_spec
from webgym_data.schema import TaskValidationError


def test_spec_rows_become_one_task_per_seed(tmp_path):
    spec = write_miniwob_spec(tmp_path / "spec.jsonl", ["click-button", "click-link"], [0, 7])
    result = import_seed("miniwob", spec)
    assert len(result.tasks) == 4
    by_key = {(t.environment, t.env_seed): t for t in result.tasks}
    task = by_key[("miniwob:click-button", 7)]
    assert task.website == "miniwob:click-button" and task.benchmark_name == "miniwob"
    assert task.num_facts == 1 and task.difficulty_level == "easy"
    # ids are stable and distinct per (task, seed)
    again = import_seed("miniwob", spec)
    assert [t.task_id for t in again.tasks] == [t.task_id for t in result.tasks]
    assert len({t.task_id for t in result.tasks}) == 4


def test_unknown_task_name_names_file_row_and_field(tmp_path):
    spec = tmp_path / "spec.jsonl"
    spec.write_text(json.dumps({"task": "click-button", "seed": 1}) + "\n"
                    + json.dumps({"task": "no-such-task", "seed": 1}) + "\n")
    with pytest.raises(TaskValidationError) as info:
        import_seed("miniwob", spec)
    assert info.value.row == 1 and info.value.field == "task"
    assert "spec.jsonl" in str(info.value)


def test_bad_seed_is_refused(tmp_path):
    spec = tmp_path / "spec.jsonl"
    spec.write_text(json.dumps({"task": "click-button", "seed": "seven"}) + "\n")
    with pytest.raises(TaskValidationError, match="seed"):
        import_seed("miniwob", spec)
