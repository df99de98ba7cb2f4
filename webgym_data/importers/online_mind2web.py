"""Online-Mind2Web (OSU-NLP-Group): 300 live-website tasks on 139 sites, with a difficulty `level`.

Rows: ``number, task_id, confirmed_task, website, reference_length, level``. The seed's `level` and
`reference_length` are kept in ``source.metadata`` (the task difficulty itself comes from the rubric).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webgym_data.importers._base import SeedImporter, optional_text, require_text
from webgym_data.schema import Task

__all__ = ["OnlineMind2WebImporter"]


class OnlineMind2WebImporter(SeedImporter):
    name = "online_mind2web"
    benchmark_name = "online-mind2web"
    hub_id = "osunlp/Online-Mind2Web"  # gated: accept the terms on the Hub first
    default_paths = ("online_mind2web/Online_Mind2Web.json",)
    folder_files = ("Online_Mind2Web*.json",)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "confirmed_task", file=file, row=row),
            website=require_text(record, "website", file=file, row=row),
            source_id=require_text(record, "task_id", file=file, row=row),
            metadata={"seed_task_id": optional_text(record, "task_id")}
            | {key: record[key] for key in ("level", "reference_length", "number")
               if record.get(key) not in (None, "")},
        )
