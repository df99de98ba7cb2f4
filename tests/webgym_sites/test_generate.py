"""Every site's generated tasks: `site-tasks` writes them, `webgym-data build` takes them in (dedupe,
decomposition, the site split), `load_dataset` reads the build, and a decomposition's subtask is
still planned and checked."""

from __future__ import annotations

from collections import Counter

import datasets
from click.testing import CliRunner

from webgym_data.build import build_command
from webgym_data.schema import Task
from webgym_sites.facts import SessionFacts
from webgym_sites.generate import SITES, expert_plan, site_tasks, site_tasks_command
from webgym_sites.goals import check_fact, task_checks
from webgym_sites.plans import Answer


def test_site_tasks_go_through_the_build_and_load_dataset_reads_them(tmp_path):
    rows = tmp_path / "seeds" / "local_sites" / "tasks.jsonl"
    result = CliRunner().invoke(site_tasks_command, ["--out", str(rows), "--per-site", "9"])
    assert result.exit_code == 0, result.output
    assert f"{9 * len(SITES)} tasks of" in result.output and rows.exists()
    assert not list(rows.parent.glob("*.partial"))
    out = tmp_path / "tasks"
    result = CliRunner().invoke(build_command, ["--seeds", str(tmp_path / "seeds"), "--out", str(out),
                                                "--no-progress"])
    assert result.exit_code == 0, result.output
    loaded = datasets.load_dataset(str(out))
    tasks = [Task.from_row(row) for split in loaded.values() for row in split]
    parents = [t for t in tasks if not t.parent_task_id]
    assert len(parents) == 9 * len(SITES)  # none lost to dedupe
    assert Counter(t.difficulty_level for t in parents) == dict.fromkeys(("easy", "medium", "hard"),
                                                                         3 * len(SITES))
    assert {t.environment for t in parents} == {f"site:{name}" for name in SITES}
    by_id = {t.task_id: t for t in tasks}
    subtasks = [t for t in tasks if t.parent_task_id]
    assert subtasks, "decomposition made no subtask of the hard tasks"
    for subtask in subtasks:
        parent = by_id[subtask.parent_task_id]
        checks = task_checks(subtask, parent)
        assert len(checks) == subtask.num_facts < parent.num_facts
        final = expert_plan(subtask)[-1]
        assert isinstance(final, Answer)
        for check in checks:  # the answer facts it kept hold for the expert's answer
            if check["type"] == "answer_value":
                assert check_fact(check, SessionFacts(session_id="s" * 10), final.text, checks), final.text


def test_unknown_sites_are_refused_by_name(tmp_path):
    result = CliRunner().invoke(site_tasks_command, ["--out", str(tmp_path / "t.jsonl"), "--sites",
                                                     "shop,mall"])
    assert result.exit_code == 2 and "unknown mall" in result.output
    assert not (tmp_path / "t.jsonl").exists()
    assert [t.environment for t in site_tasks(2, sites=("shop",))] == ["site:shop"] * 2
