"""TravelPlanner (OSU-NLP-Group): travel-planning queries (45 train, 180 validation, 1,000 test).

Local rows are ``{idx, query}`` (``train_queries.jsonl``, ``validation_queries.jsonl``,
``validation_queries_with_example_plans.jsonl`` also carries ``plan``); Hub rows (configs
``train``/``validation``/``test``) add ``org, dest, days, level, ...``, which are kept in
``source.metadata`` with the split; their ``level`` (easy / medium / hard) is also the task's
`seed_difficulty_level`. The benchmark is a sandbox, not one site, so tasks start from a
search engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webgym_data.importers._base import SEARCH_START_URL, SeedImporter, require_text
from webgym_data.schema import Task, seed_difficulty_label

__all__ = ["TravelPlannerImporter"]

# Large reference material (sandbox databases, example plans) stays out of the task rows.
_NOT_METADATA = {"query", "plan", "reference_information", "annotated_plan", "messages"}


class TravelPlannerImporter(SeedImporter):
    name = "travelplanner"
    benchmark_name = "travelplanner"
    hub_id = "osunlp/TravelPlanner"
    license_id = "cc-by-4.0"
    hub_configs = ("train", "validation", "test")
    default_paths = ("travelplanner", "TravelPlanner")
    folder_files = ("train_queries.jsonl", "validation_queries.jsonl", "test_queries.jsonl")

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        # A local file says its split in its name; a Hub label is hf://datasets/ORG/NAME/[CONFIG/]SPLIT
        # and TravelPlanner's configs are the splits.
        names = file.split("://", 1)[1].split("/")[3:] if "://" in file else [Path(file).name]
        split = next((s for name in names for s in ("train", "validation", "test") if s in name), "")
        metadata = {k: v for k, v in record.items() if k not in _NOT_METADATA and v not in (None, "")}
        if split:
            metadata["split"] = split
        return self.make_task(
            file=file, row=row, task_name=require_text(record, "query", file=file, row=row),
            task_name_field="query", website=SEARCH_START_URL, metadata=metadata,
            seed_difficulty_level=seed_difficulty_label(record.get("level")),
        )
