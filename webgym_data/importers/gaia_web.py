"""GAIA-Web (the web subset of GAIA shipped with WebVoyager): 90 questions, all from Google.

Rows: ``task_id, Level, Final answer, id, web, ques``. ``Final answer`` becomes `definite_answer`
and ``Level`` is kept in ``source.metadata``. GAIA asks that its answers are not re-shared in
crawlable form: keep built sets that carry them private or strip `definite_answer` before publishing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webgym_data.importers._base import SeedImporter, optional_text, require_text
from webgym_data.schema import Task

__all__ = ["GaiaWebImporter"]


class GaiaWebImporter(SeedImporter):
    name = "gaia_web"
    benchmark_name = "gaia-web"
    hub_id = None  # GitHub MinorJerry/WebVoyager data/GAIA_web.jsonl; the HF GAIA set is gated and differs
    license_id = "apache-2.0"
    license_note = "GAIA asks that its answers not be reshared in crawlable form"
    home_url = "https://github.com/MinorJerry/WebVoyager/blob/main/data/GAIA_web.jsonl"
    default_paths = ("gaia_web", "WebVoyager/data")
    upstream_files = ("GAIA_web.jsonl",)
    folder_files = ("GAIA_web*.jsonl",)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "ques", file=file, row=row), task_name_field="ques",
            website=require_text(record, "web", file=file, row=row), website_field="web",
            source_id=require_text(record, "task_id", file=file, row=row),
            definite_answer=require_text(record, "Final answer", file=file, row=row),
            metadata={"level": record.get("Level"), "seed_id": optional_text(record, "id"),
                      "seed_task_id": optional_text(record, "task_id")},
        )
