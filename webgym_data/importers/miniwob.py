"""MiniWoB++ tasks as WebGym task rows: one row per (MiniWoB task name, episode seed).

A MiniWoB++ page draws its instruction from a seed when an episode starts, and reports success
itself (``WOB_RAW_REWARD_GLOBAL``), so these rows need no LLM rubric: each has one fact, "the
environment reports success", and is judged by the programmatic judge of the rollout runner.

Input: a ``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` file (or a folder of them) whose rows have
``task`` (a MiniWoB task name such as ``click-button``) and either ``seed`` (an integer) or ``seeds``
(a list of integers, or in CSV a string like ``0 1 2``). `write_miniwob_spec` writes such a file.

Row written per (task, seed)::

    task_name    "MiniWoB++ click-button (seed 7)"  (the page shows the real instruction)
    website      "miniwob:click-button"        environment "miniwob:click-button"   env_seed 7
    benchmark_name "miniwob"                   evaluator_reference: one group, one fact (difficulty 1)

When the ``miniwob`` package is installed, task names are checked against the pages it ships, so a
typo stops the import with an error naming the file, row and field.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from webgym_data.importers._base import SeedImporter, metadata_json
from webgym_data.schema import FactGroup, Task, TaskSource, TaskValidationError, make_task_id

__all__ = ["MINIWOB_RUBRIC", "MiniWobImporter", "miniwob_task", "write_miniwob_spec"]

MINIWOB_RUBRIC = (FactGroup(id="1", description="Environment success",
                            facts=("The MiniWoB++ environment reports success for the episode.",)),)
"""The rubric of every MiniWoB row: the page's own success signal is the one fact to verify."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@lru_cache(maxsize=1)
def _shipped_tasks() -> frozenset[str] | None:
    """Task names of the pages in the installed ``miniwob`` package, or None when it is absent."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"
    if not folder.is_dir():
        return None
    return frozenset(p.stem for p in folder.glob("*.html"))


def miniwob_task(name: str, seed: int, *, file: str = "", row: int = -1) -> Task:
    """The task row of MiniWoB task `name` played with episode seed `seed`."""
    return Task(
        task_id=make_task_id("miniwob", name, str(seed)),
        # Short on purpose: names of two seeds differ in one token, and a long name would make them
        # near duplicates for `webgym_data.split.dedupe` (token-set Jaccard >= 0.9).
        task_name=f"MiniWoB++ {name} (seed {seed})",
        website=f"miniwob:{name}",
        benchmark_name=MiniWobImporter.benchmark_name,
        evaluator_reference=MINIWOB_RUBRIC,
        environment=f"miniwob:{name}",
        env_seed=seed,
        source=TaskSource(importer=MiniWobImporter.name, file=Path(file).name if file else "", row=row,
                          metadata=metadata_json({"task": name, "seed": seed})),
    )


def write_miniwob_spec(path: Path | str, tasks: Iterable[str], seeds: Iterable[int]) -> Path:
    """Write a JSONL input file for this importer: one row per task name, each with all `seeds`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in seeds]
    path.write_text("".join(json.dumps({"task": name, "seeds": seeds}) + "\n" for name in tasks),
                    encoding="utf-8")
    return path


def _seeds(record: Mapping[str, Any], *, file: str, row: int) -> list[int]:
    if record.get("seeds") not in (None, ""):
        value, name = record["seeds"], "seeds"
        if isinstance(value, str):  # CSV: "0 1 2" or "0,1,2"
            value = [v for v in re.split(r"[\s,;]+", value.strip()) if v]
        values: Sequence[Any] = value if isinstance(value, Sequence) and not isinstance(value, str) \
            else [value]
    elif record.get("seed") not in (None, ""):
        values, name = [record["seed"]], "seed"
    else:
        raise TaskValidationError("needs 'seed' (an integer) or 'seeds' (a list of integers)",
                                  file=file, row=row, field="seed")
    seeds = []
    for value in values:
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TaskValidationError(f"seeds must be non-negative integers, got {value!r}",
                                      file=file, row=row, field=name)
        seeds.append(value)
    if not seeds:
        raise TaskValidationError("is empty", file=file, row=row, field=name)
    return seeds


class MiniWobImporter(SeedImporter):
    """Registered as ``miniwob``: MiniWoB++ task names + seeds -> task rows."""

    name = "miniwob"
    benchmark_name = "miniwob"
    hub_id = None
    license_id = "mit"
    home_url = "https://github.com/Farama-Foundation/miniwob-plusplus"
    default_paths = ("miniwob/miniwob_tasks.jsonl",)
    folder_files = ("*.jsonl", "*.json", "*.csv", "*.parquet")

    def prepare(self, records: Iterable[Any], *, file: str):
        # One input row lists several seeds; expand it here so each task keeps its input row number
        # in `source.row` (`convert` sees the expanded record with "_row").
        for row, record in enumerate(records):
            if not isinstance(record, Mapping):
                raise TaskValidationError(f"expected an object, got {type(record).__name__}",
                                          file=file, row=row)
            task = record.get("task")
            if not isinstance(task, str) or not _NAME.match(task.strip()):
                raise TaskValidationError(f"must be a MiniWoB++ task name such as 'click-button', "
                                          f"got {task!r}", file=file, row=row, field="task")
            task = task.strip()
            shipped = _shipped_tasks()
            if shipped is not None and task not in shipped:
                close = sorted(n for n in shipped if n.split("-")[0] == task.split("-")[0])[:5]
                hint = f"; similar: {', '.join(close)}" if close else ""
                raise TaskValidationError(f"no MiniWoB++ task named {task!r} in the installed miniwob "
                                          f"package{hint}", file=file, row=row, field="task")
            for seed in _seeds(record, file=file, row=row):
                yield {"task": task, "seed": seed, "_row": row}

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        return miniwob_task(record["task"], record["seed"], file=file, row=int(record["_row"]))
