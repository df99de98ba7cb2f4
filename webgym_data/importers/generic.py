"""Any JSONL/JSON/CSV/parquet/Arrow file of tasks, or a ``datasets`` ``save_to_disk`` folder, with a
column mapping.

``GenericImporter({"task_name": "question", "website": "url"})`` reads the task fields from those
columns; a field without a mapping is read from the column of its own name when there is one, so
files already in the task format (for example a published WebGym split) need no mapping. A
`task_id` column is kept as is; other columns go to ``source.metadata``.

``difficulty`` may be a fact count (an integer, or digits) or a seed's label: ``easy``, ``medium``
or ``hard`` in any case. A label becomes the task's `seed_difficulty_level` (its difficulty level
while the rubric is not an LLM's) and the fact count stays unknown (0) until a rubric gives one;
the label is kept in ``source.metadata`` as ``difficulty``. Any other string is refused, naming the
accepted forms. A rubric column is ``rubric_source = "given"`` (kept as is by ``--rubrics all``)
unless a ``rubric_source`` column says otherwise; a ``seed_criteria`` column (a list of strings, or
one string) is read as the seed's criteria.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webgym_data.errors import MappingError
from webgym_data.importers._base import SeedImporter, require_text, text_field
from webgym_data.loading import saved_dataset_files
from webgym_data.schema import (
    DIFFICULTY_LEVELS,
    RUBRIC_SOURCES,
    Task,
    TaskValidationError,
    make_task_id,
    seed_difficulty_label,
)

__all__ = ["TARGET_FIELDS", "GenericImporter", "MappingError"]

TARGET_FIELDS = ("task_name", "website", "start_url", "task_id", "benchmark_name", "definite_answer",
                 "evaluator_reference", "domain", "subdomain", "difficulty", "seed_criteria")
"""Task fields a column can be mapped to."""

_OURS = {"difficulty_level", "fact_group_ids", "parent_task_id", "instruction_source", "environment",
         "env_seed", "source", "rubric_source", "seed_difficulty_level"}


class GenericImporter(SeedImporter):
    name = "generic"
    benchmark_name = "generic"
    hub_id = None
    default_paths = ()
    folder_files = ("*.jsonl", "*.json", "*.csv", "*.parquet")

    def __init__(self, mapping: Mapping[str, str] | None = None, *,
                 benchmark_name: str | None = None) -> None:
        mapping = dict(mapping or {})
        unknown = sorted(set(mapping) - set(TARGET_FIELDS))
        if unknown:
            raise MappingError(f"cannot map to {', '.join(unknown)}; "
                               f"task fields are: {', '.join(TARGET_FIELDS)}")
        self.mapping = mapping
        if benchmark_name:
            self.benchmark_name = benchmark_name  # type: ignore[misc]  # per instance on purpose

    def files_in(self, folder: Path) -> list[Path]:
        # A saved dataset's folder also holds JSON files (its state and info) that are not rows.
        saved = saved_dataset_files(folder)
        return saved if saved is not None else super().files_in(folder)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        columns = {target: self.mapping.get(target, target) for target in TARGET_FIELDS}
        for target, column in self.mapping.items():
            if column not in record and target in ("task_name", "website"):
                raise TaskValidationError(f"mapped to task field '{target}' but missing from the row",
                                          file=file, row=row, field=column)
        fields: dict[str, Any] = {}
        for target in ("start_url", "definite_answer", "domain", "subdomain"):
            fields[target] = text_field(record, columns[target], file=file, row=row)
        reference = record.get(columns["evaluator_reference"])
        if reference not in (None, ""):
            fields["evaluator_reference"] = reference
        difficulty = record.get(columns["difficulty"])
        label = seed_difficulty_label(difficulty)
        labelled = bool(label)
        own_label = text_field(record, "seed_difficulty_level", file=file, row=row)
        if own_label and not seed_difficulty_label(own_label):
            raise TaskValidationError(f"must be one of {', '.join(DIFFICULTY_LEVELS)} or empty, "
                                      f"got {own_label!r}", file=file, row=row, field="seed_difficulty_level")
        label = label or seed_difficulty_label(own_label)
        if labelled:
            difficulty = None  # a label, not a fact count
        if isinstance(difficulty, str) and difficulty.strip():
            # Decimal digits only ("²" is a digit int() refuses), ten at most (a 32-bit count), and
            # parsed without the blanks str.strip() removed (int() strips fewer: "0\x1f" fails).
            digits = difficulty.strip()
            if not digits.isdecimal() or len(digits) > 10:
                raise TaskValidationError(
                    f"must be a fact count (a non-negative integer) or a seed's label "
                    f"({', '.join(DIFFICULTY_LEVELS)}, any case), got {difficulty[:40]!r}",
                    file=file, row=row, field=columns["difficulty"])
            difficulty = int(digits)
        if isinstance(difficulty, float) and difficulty.is_integer():
            difficulty = int(difficulty)
        if difficulty not in (None, ""):
            fields["difficulty"] = difficulty
        if label:
            fields["seed_difficulty_level"] = label
        criteria = record.get(columns["seed_criteria"])
        if isinstance(criteria, str):
            criteria = [criteria]
        if criteria not in (None, []):
            if not isinstance(criteria, (list, tuple)) or not all(isinstance(c, str) for c in criteria):
                raise TaskValidationError("must be a list of strings", file=file, row=row,
                                          field=columns["seed_criteria"])
            fields["seed_criteria"] = criteria
        rubric_source = text_field(record, "rubric_source", file=file, row=row)
        if rubric_source not in RUBRIC_SOURCES:
            raise TaskValidationError(f"must be one of {', '.join(map(repr, RUBRIC_SOURCES))}, "
                                      f"got {rubric_source!r}", file=file, row=row, field="rubric_source")
        fields["rubric_source"] = rubric_source
        # A difficulty label stays in the metadata too (a fact count is the row's `difficulty`).
        used = {columns[t] for t in TARGET_FIELDS if not (t == "difficulty" and labelled)}
        metadata = {k: v for k, v in record.items()
                    if k not in used and k not in _OURS and not k.startswith("_")}
        benchmark = text_field(record, columns["benchmark_name"], file=file, row=row)
        try:
            task = self.make_task(
                file=file, row=row,
                task_name=require_text(record, columns["task_name"], file=file, row=row),
                website=require_text(record, columns["website"], file=file, row=row),
                website_field=columns["website"], task_name_field=columns["task_name"],
                metadata=metadata, **fields,
            )
        except TaskValidationError as exc:
            # Name the column the user knows, not the task field it was mapped to.
            if exc.field in columns and columns[exc.field] != exc.field:
                raise TaskValidationError(exc.reason, file=file, row=row, field=columns[exc.field]) from None
            raise
        changes = {}
        if benchmark:
            changes["benchmark_name"] = benchmark
            changes["task_id"] = make_task_id(benchmark, task.website, task.task_name)
        task_id = text_field(record, columns["task_id"], file=file, row=row)
        if task_id:
            changes["task_id"] = task_id  # a given id is kept as is
        return dataclasses.replace(task, **changes) if changes else task
