"""WebVoyager (MinorJerry/WebVoyager): 643 tasks on 15 sites, with reference answers.

Rows: ``web_name, id, ques, web``; ``reference_answer.json`` next to the task file maps
``{web_name: {notice, answers: [{id, type, ans}]}}`` where ``id`` is the number after ``--`` in the
task id. A ``golden`` answer is fixed and becomes `definite_answer`; a ``possible`` answer is one
real-time example (prices, ratings, news change), so it is kept in ``source.metadata`` only: using it
as a definite answer would fail agents that report today's correct value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from webgym_data.importers._base import SeedImporter, optional_text, read_json_file, require_text
from webgym_data.schema import Task, TaskValidationError

__all__ = ["WebVoyagerImporter"]

REFERENCE_FILE = "reference_answer.json"


def _load_reference_answers(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    data = read_json_file(path)
    answers: dict[tuple[str, str], dict[str, str]] = {}
    if not isinstance(data, Mapping):
        raise TaskValidationError("expected an object {web_name: {answers: [...]}}", file=str(path))
    for web_name, site in data.items():
        items = site.get("answers") if isinstance(site, Mapping) else None
        if not isinstance(items, list):
            raise TaskValidationError("must be a list", file=str(path), field=f"{web_name}.answers")
        for position, item in enumerate(items):
            if not isinstance(item, Mapping) or "id" not in item:
                raise TaskValidationError("must be an object with id, type, ans", file=str(path),
                                          row=position, field=f"{web_name}.answers")
            answers[(str(web_name), str(item["id"]))] = {
                "type": str(item.get("type") or ""), "ans": str(item.get("ans") or "").strip(),
                "notice": str(site.get("notice") or "").strip()}
    return answers


class WebVoyagerImporter(SeedImporter):
    name = "webvoyager"
    benchmark_name = "webvoyager"
    hub_id = None  # only on GitHub (MinorJerry/WebVoyager, data/)
    license_id = "apache-2.0"
    home_url = "https://github.com/MinorJerry/WebVoyager/tree/main/data"
    # Not one of the ten WebGym seeds (PAE-WebVoyager is): `discover_seeds` leaves it out.
    default_paths = ()
    folder_files = ("WebVoyager_data.jsonl",)

    def prepare(self, records: Iterable[Any], *, file: str) -> Iterator[Any]:
        reference = Path(file).with_name(REFERENCE_FILE)
        answers = _load_reference_answers(reference) if "://" not in file and reference.is_file() else {}
        for record in records:
            if answers and isinstance(record, Mapping):
                web_name, _, number = optional_text(record, "id").rpartition("--")
                found = answers.get((optional_text(record, "web_name") or web_name, number))
                if found:
                    record = {**record, "_reference": found}
            yield record

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        reference = record.get("_reference") or {}
        metadata = {"web_name": optional_text(record, "web_name"), "seed_id": optional_text(record, "id")}
        if reference:
            metadata |= {"reference_answer": reference["ans"], "reference_answer_type": reference["type"]}
            if reference["notice"]:
                metadata["reference_notice"] = reference["notice"]
        extra = self.extra_fields(record)
        metadata |= extra.pop("metadata", {})
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "ques", file=file, row=row), task_name_field="ques",
            website=require_text(record, "web", file=file, row=row), website_field="web",
            source_id=optional_text(record, "id"),
            definite_answer=reference["ans"] if reference.get("type") == "golden" else "",
            metadata=metadata, **extra,
        )

    def extra_fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """What the WebVoyager-like seeds read beyond the WebVoyager four: keyword arguments of
        `make_task` (``metadata`` is merged into the row's metadata)."""
        return {}
