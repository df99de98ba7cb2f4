"""Online-Mind2Web (OSU-NLP-Group): 300 live-website tasks on 139 sites, with a difficulty `level`.

Rows: ``number, task_id, confirmed_task, website, reference_length, level``. The seed's `level`
(easy / medium / hard) is the task's `seed_difficulty_level`: the task has no rubric of its own, so
the label sets its difficulty level until an LLM writes one (then the fact count does). `level` and
`reference_length` are also kept in ``source.metadata``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webgym_data.importers._base import SeedImporter, optional_text, require_text
from webgym_data.schema import Task, seed_difficulty_label

__all__ = ["OnlineMind2WebImporter"]


class OnlineMind2WebImporter(SeedImporter):
    name = "online_mind2web"
    benchmark_name = "online-mind2web"
    hub_id = "osunlp/Online-Mind2Web"  # gated: accept the terms on the Hub first
    license_id = "cc-by-4.0"
    license_note = "gated on the Hub: accept its terms (contact details) first"
    default_paths = ("online_mind2web", "Online-Mind2Web")
    upstream_files = ("Online_Mind2Web.json",)
    folder_files = ("Online_Mind2Web*.json",)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "confirmed_task", file=file, row=row),
            task_name_field="confirmed_task",
            seed_difficulty_level=seed_difficulty_label(record.get("level")),
            website=require_text(record, "website", file=file, row=row),
            source_id=require_text(record, "task_id", file=file, row=row),
            metadata={"seed_task_id": optional_text(record, "task_id")}
            | {key: record[key] for key in ("level", "reference_length", "number")
               if record.get(key) not in (None, "")},
        )
