"""DeepShop: 150 shopping tasks (one site), WebVoyager-like JSONL with shopping attributes.

Rows: ``web_name, id, ques, web, attribute, filter, sort, category, difficulty``. The seed's
`difficulty` and its attribute/filter/sort/category labels are kept in ``source.metadata``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webgym_data.importers.webvoyager import WebVoyagerImporter

__all__ = ["DeepShopImporter"]

_EXTRA_FIELDS = ("attribute", "filter", "sort", "category", "difficulty")


class DeepShopImporter(WebVoyagerImporter):
    name = "deepshop"
    benchmark_name = "deepshop"
    hub_id = "DeepShop/DeepShop"
    default_paths = ("deepshop/deepshop.jsonl",)
    folder_files = ("deepshop*.jsonl", "*.jsonl")

    def extra_metadata(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return {name: record[name] for name in _EXTRA_FIELDS if record.get(name) not in (None, "")}
