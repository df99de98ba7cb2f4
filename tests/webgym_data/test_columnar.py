"""The build's steps after the import run on columns (issue 42) and write the rows the row-at-a-time
steps write: the same task ids in the same order, every field the same.

The reference is the pipeline as it was before, task by task: `dedupe`, `rule_taxonomy` of each
task, `decompose_task` of each task, `split_tasks`. It runs on the imported tasks of the seed sets
(skipped where ../shared/seeds is absent) and of a generated 20k set (the benchmark's generator,
benchmarks/data_build.py); the build's folder is read back and compared row for row. The 20k set's
rows are also pinned by a digest taken with the row-at-a-time build, so that a change to the
reference functions themselves cannot hide a change of the output.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, SEEDS_DIR
from webgym_data.build import BuildSettings, build
from webgym_data.decompose import decompose_task
from webgym_data.importers import discover_seeds, import_seed
from webgym_data.loading import read_task_set
from webgym_data.schema import Task
from webgym_data.split import SplitSettings, dedupe, split_tasks
from webgym_data.taxonomy import is_valid_taxonomy, rule_taxonomy

SYNTHETIC_TASKS = 20_000
SYNTHETIC_DIGEST = "sha256:41ef93a1ee72d39e149d6d4356003ddde7b319dfaa54ccb032c1ea9c4da1a7af"
"""The 20k set's built rows (`_digest`) as the row-at-a-time build wrote them."""


def _benchmark_generator():
    spec = importlib.util.spec_from_file_location("data_build", REPO_ROOT / "benchmarks" / "data_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rowwise_build(sources: list[tuple[str, str]], settings: BuildSettings) -> tuple[list[Task], list[Task]]:
    """Train and test as the row-at-a-time steps give them (offline, no extended build)."""
    imported = [task for name, source in sources for task in import_seed(name, source).tasks]
    seen: set[str] = set()
    tasks = [t for t in imported if t.task_id not in seen and not seen.add(t.task_id)]
    tasks = dedupe(tasks, settings.dedupe).tasks
    tasks = [t if is_valid_taxonomy(t.domain, t.subdomain)
             else replace(t, domain=(pair := rule_taxonomy(t))[0], subdomain=pair[1]) for t in tasks]
    subtasks = [s for t in tasks for s in decompose_task(t, settings.decompose)]
    split = split_tasks([*tasks, *subtasks], settings.split)
    return split.train, split.test


def _rows(tasks: list[Task]) -> list[dict]:
    return [task.to_row() for task in tasks]


def _assert_same_rows(built: list[Task], expected: list[Task], split: str) -> None:
    assert [t.task_id for t in built] == [t.task_id for t in expected], f"{split}: task ids or order differ"
    for got, want in zip(_rows(built), _rows(expected), strict=True):
        differ = sorted(name for name in want if got.get(name) != want[name])
        assert not differ, f"{split} task {want['task_id']}: {differ} differ: " + ", ".join(
            f"{name}: {got.get(name)!r} != {want[name]!r}" for name in differ)


def _digest(train: list[Task], test: list[Task]) -> str:
    """A hash of the rows, the source file reduced to its name (the folder is a temporary one)."""
    hasher = hashlib.sha256()
    for split, tasks in (("train", train), ("test", test)):
        for row in _rows(tasks):
            row["source"]["file"] = Path(row["source"]["file"]).name
            hasher.update(json.dumps([split, row], sort_keys=True, ensure_ascii=False).encode())
    return "sha256:" + hasher.hexdigest()


def _build_and_compare(settings: BuildSettings, sources: list[tuple[str, str]]) -> tuple[list, list]:
    build(settings)
    train, test, _ = read_task_set(settings.out)
    want_train, want_test = rowwise_build(sources, settings)
    _assert_same_rows(train, want_train, "train")
    _assert_same_rows(test, want_test, "test")
    return train, test


@pytest.fixture(scope="module")
def synthetic_seed(tmp_path_factory) -> Path:
    generator = _benchmark_generator()
    path = tmp_path_factory.mktemp("synthetic") / "synthetic.jsonl"
    websites = round(SYNTHETIC_TASKS * generator.PUBLISHED_WEBSITES / generator.PUBLISHED_TASKS)
    # Uniform group counts: about 3 subtasks per task, so decompose has real work.
    rows = generator.synthetic_rows(SYNTHETIC_TASKS, websites, [1, 1, 1, 1], seed=7)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_the_generated_20k_set_builds_the_rows_of_the_row_at_a_time_steps(synthetic_seed, tmp_path):
    sources = [("generic", str(synthetic_seed))]
    settings = BuildSettings(out=tmp_path / "tasks", importers=tuple(sources),
                             split=SplitSettings(test_size=1000), progress=False)
    train, test = _build_and_compare(settings, sources)
    assert len(train) + len(test) > SYNTHETIC_TASKS  # subtasks were made
    assert {t.domain for t in train} >= {"Shopping", "Travel"}
    assert _digest(train, test) == SYNTHETIC_DIGEST


def test_the_seed_sets_build_the_rows_of_the_row_at_a_time_steps(tmp_path):
    if not SEEDS_DIR.is_dir():
        pytest.skip(f"seed folder {SEEDS_DIR} is absent (set WEBGYM_SEEDS)")
    sources = [(name, str(path)) for name, path in discover_seeds(SEEDS_DIR)]
    settings = BuildSettings(out=tmp_path / "tasks", seeds=SEEDS_DIR, split=SplitSettings(test_size=150),
                             progress=False)
    train, test = _build_and_compare(settings, sources)
    assert any(t.parent_task_id for t in train)


def test_the_importers_tasks_are_what_their_constructors_make(synthetic_seed):
    """The generic importer makes its tasks without running the dataclasses' constructors (a fifth
    of the import's time at 300k rows): running them again on every task changes nothing."""
    sources = [("generic", str(synthetic_seed))]
    if SEEDS_DIR.is_dir():
        sources += [(name, str(path)) for name, path in discover_seeds(SEEDS_DIR)]
    for name, source in sources:
        for task in import_seed(name, source).tasks:
            where = f"{name}: {task.task_id}"
            assert replace(task) == task, where
            assert replace(task.source) == task.source, where
            assert all(replace(group) == group for group in task.evaluator_reference), where
