"""examples/my_tasks/tasks.csv through docs/guides/extending.md: every command line of the page's
shell block runs as written (in process, in a fresh folder holding the example), and the extended
build holds the earlier build's tasks unchanged plus one row per line of the CSV, each field read
from the column the page's ``--mapping`` names."""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import webgym_data.cli
import webgym_rollout.cli
from tests.conftest import REPO_ROOT
from webgym_data import load_tasks

PAGE = REPO_ROOT / "docs" / "guides" / "extending.md"
EXAMPLE = REPO_ROOT / "examples" / "my_tasks"
PROGRAMS = {"webgym-data": webgym_data.cli.main, "webgym-rollout": webgym_rollout.cli.main}


def _page_commands() -> list[list[str]]:
    """The page's shell lines (continuations joined, comments dropped), each as its arguments."""
    (block,) = re.findall(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    commands = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    return [command for command in commands if command]


def _mappings(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, token in enumerate(command) if token == "--mapping")


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, list[list[str]], list[str]]:
    """The folder the page's commands ran in, the commands and what each printed."""
    folder = tmp_path_factory.mktemp("extending")
    shutil.copytree(EXAMPLE, folder / "examples" / "my_tasks")
    commands, outputs = _page_commands(), []
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        for program, *args in commands:
            assert program in PROGRAMS, f"{PAGE.name}: {program} is not a command this test can run"
            result = CliRunner().invoke(PROGRAMS[program], args, prog_name=program)
            assert result.exit_code == 0, f"{program} {shlex.join(args)}:\n{result.output}"
            outputs.append(result.output)
    return folder, commands, outputs


def test_the_page_imports_the_example_and_extends_a_build(ran):
    folder, commands, outputs = ran
    verbs = [(program, args[0]) for program, *args in commands]
    assert ("webgym-data", "import") in verbs and ("webgym-data", "build") in verbs
    assert any("--extend" in command for command in commands)
    rows = list(csv.DictReader((EXAMPLE / "tasks.csv").open(encoding="utf-8")))
    (imported,) = [out for (_, verb), out in zip(verbs, outputs, strict=True) if verb == "import"]
    assert f"generic: {len(rows)} tasks, 0 skipped" in imported  # what the page says it prints
    (diffed,) = [out for (_, verb), out in zip(verbs, outputs, strict=True) if verb == "diff"]
    assert re.search(rf"added\s*│\s*{len(rows)}\b", diffed)


def test_the_extended_build_keeps_every_earlier_task_and_adds_the_mapped_rows(ran):
    folder, commands, _ = ran
    (extend,) = [command for command in commands if "--extend" in command]
    earlier = folder / extend[extend.index("--extend") + 1]
    extended = folder / extend[extend.index("--out") + 1]
    (imported,) = [command for command in commands if command[1] == "import"]
    mapping = _mappings(imported)
    benchmark = imported[imported.index("--benchmark-name") + 1]

    before = {t.task_id: t for t in load_tasks(earlier, split=None)}
    after = {t.task_id: t for t in load_tasks(extended, split=None)}
    assert before and all(after[task_id] == task for task_id, task in before.items())
    new = sorted((t for task_id, t in after.items() if task_id not in before), key=lambda t: t.task_name)
    rows = sorted(csv.DictReader((EXAMPLE / "tasks.csv").open(encoding="utf-8")),
                  key=lambda row: row[mapping["task_name"]])
    assert len(new) == len(rows) and {t.benchmark_name for t in new} == {benchmark}
    for task, row in zip(new, rows, strict=True):
        assert task.task_name == row[mapping["task_name"]]
        assert task.website == row[mapping["website"]]
        assert task.start_url == row[mapping["start_url"]]
        assert task.definite_answer == row[mapping["definite_answer"]]
        assert task.seed_difficulty_level == task.difficulty_level == row[mapping["difficulty"]]
        assert task.seed_criteria == (row[mapping["seed_criteria"]],)
    manifest = json.loads((extended / "manifest.json").read_text(encoding="utf-8"))
    earlier_manifest = json.loads((earlier / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["dataset_version"] == earlier_manifest["dataset_version"] + 1
    assert manifest["extends"]["content_hash"] == earlier_manifest["content_hash"]
    # The unmapped column stays with the imported rows (the page says where).
    (out,) = [command[command.index("--out") + 1] for command in commands if command[1] == "import"]
    imported_rows = [json.loads(line) for line in (folder / out).read_text(encoding="utf-8").splitlines()]
    unmapped = set(rows[0]) - set(mapping.values())
    assert unmapped and all(unmapped <= set(json.loads(r["source"]["metadata"])) for r in imported_rows)
