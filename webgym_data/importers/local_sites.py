"""The toolkit's own local sites' generated tasks (shop, travel, reference) as a seed of their own.

``webgym-rollout site-tasks --out seeds/local_sites/tasks.jsonl`` writes them: rows already in the
task schema, each with its machine checks and its expert's truth in ``source.metadata`` (``site``,
``params``, ``checks``). This importer reads such rows back, so that ``webgym-data build --seeds
seeds`` (or ``--importer local_sites=tasks.jsonl``) puts them through dedupe, taxonomy,
decomposition and the site split like every other seed. It checks what the rollout side relies on:
a ``site:<name>`` environment and metadata naming the site, with one check per rubric fact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webgym_data.importers._base import SeedImporter
from webgym_data.schema import Task, TaskValidationError

__all__ = ["LocalSitesImporter"]


class LocalSitesImporter(SeedImporter):
    """Rows of `webgym-rollout site-tasks` (JSONL of task rows)."""

    name = "local_sites"
    license_id = "apache-2.0"
    benchmark_name = "webgym-sites"
    default_paths = ("local_sites",)
    folder_files = ("*.jsonl",)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        task = Task.from_row(record, file=file, row_index=row)
        kind, _, site = task.environment.partition(":")
        if kind != "site" or not site:
            raise TaskValidationError(f"expected 'site:<name>' (a local site's task), got "
                                      f"{task.environment!r}", file=file, row=row, field="environment")
        try:
            metadata = json.loads(task.source.metadata or "{}")
        except ValueError as exc:
            raise TaskValidationError(f"is not JSON: {exc}", file=file, row=row,
                                      field="source.metadata") from None
        checks = metadata.get("checks") if isinstance(metadata, dict) else None
        if not isinstance(metadata, dict) or metadata.get("site") != site:
            raise TaskValidationError(f"must name the site {site!r} of the environment", file=file, row=row,
                                      field="source.metadata.site")
        if not isinstance(checks, list) or len(checks) != task.num_facts:
            raise TaskValidationError(f"expected one check per rubric fact ({task.num_facts})", file=file,
                                      row=row, field="source.metadata.checks")
        return task
