"""InSTA-v3 (data-for-agents): 146k tasks, one per website, each with success criteria.

Parquet rows: ``website, instruction, steps (list[str]), criteria (list[str])``. The criteria are
the task's `seed_criteria` and, until an LLM writes the rubric (``webgym-data build --rubrics all``),
its one fact group (``rubric_source = "seed"``); the suggested steps are kept in ``source.metadata``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webgym_data.importers._base import SeedImporter, require_text
from webgym_data.schema import FactGroup, Task, TaskValidationError

__all__ = ["InstaV3Importer"]

GROUP_DESCRIPTION = "Success criteria"


def _strings(record: Mapping[str, Any], name: str, *, file: str, row: int) -> list[str]:
    value = record.get(name)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TaskValidationError(f"must be a list of strings, got {type(value).__name__}",
                                  file=file, row=row, field=name)
    return [" ".join(v.split()) for v in value if v.strip()]


class InstaV3Importer(SeedImporter):
    name = "insta_v3"
    benchmark_name = "insta-v3"
    hub_id = "data-for-agents/insta-150k-v3"
    license_id = "mit"
    default_paths = ("insta_v3", "insta-150k-v3")
    folder_files = ("*.parquet", "data/*.parquet")

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        criteria = list(dict.fromkeys(_strings(record, "criteria", file=file, row=row)))
        groups = (FactGroup("criteria", GROUP_DESCRIPTION, tuple(criteria)),) if criteria else ()
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "instruction", file=file, row=row), task_name_field="instruction",
            website=require_text(record, "website", file=file, row=row),
            evaluator_reference=groups, seed_criteria=criteria, rubric_source="seed",
            metadata={"steps": _strings(record, "steps", file=file, row=row)},
        )
