"""Where a built task set's tasks come from: the seed sets a build used and skipped, and their licences.

`seed_set_records` turns a build's inputs into the manifest's ``seed_sets`` entries (importer, tasks
imported, licence, where the seed lives); an extended build keeps the entries of the build it extends
for the seed sets it does not import again. The task card shows them: `license_metadata` is its
``license:`` metadata, a YAML list of Hub licence ids (the Hub takes a list for a dataset, so each
seed keeps its own licence instead of one ``other``), and `seed_sets_section` its table of the seed
sets with their licences and the seed sets the build skipped (and why). `summary_lines` is what
``webgym-data build`` prints about them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webgym_data.importers import get_importer

__all__ = ["license_metadata", "seed_set_records", "seed_sets_section", "summary_lines"]

_NO_ID = "unknown"


def seed_set_records(inputs: Sequence[Mapping[str, Any]],
                     previous: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """One record per importer of `inputs` (tasks summed over its sources), then those of `previous`
    (an extended build's records) whose importer is not among them."""
    records: dict[str, dict[str, Any]] = {}
    for entry in inputs:
        name = entry["importer"]
        if name in records:
            records[name]["tasks"] += entry["tasks"]
            continue
        importer = get_importer(name)
        records[name] = {"importer": name, "benchmark_name": importer.benchmark_name,
                         "tasks": entry["tasks"], "license": importer.license_id or _NO_ID,
                         "license_note": importer.license_note,
                         "location": importer.location or str(entry.get("source", ""))}
    for record in previous:
        records.setdefault(record["importer"], dict(record))
    return list(records.values())


def license_metadata(records: Iterable[Mapping[str, Any]]) -> str:
    """The card's ``license:`` YAML: the seed sets' Hub licence ids, sorted, one list item each."""
    ids = sorted({record.get("license") or _NO_ID for record in records}) or [_NO_ID]
    return "license:\n" + "\n".join(f"- {license_id}" for license_id in ids)


def _location(location: str) -> str:
    return f"<{location}>" if location.startswith(("https://", "http://")) else f"`{location}`"


def seed_sets_section(records: Sequence[Mapping[str, Any]],
                      skipped: Sequence[Mapping[str, str]]) -> str:
    """Markdown: the table of the seed sets used with their licences, then the seed sets skipped."""
    lines = ["| seed set | importer | tasks imported | licence | where it lives |", "|---|---|---:|---|---|"]
    for record in records:
        note = f" ({record['license_note']})" if record.get("license_note") else ""
        location = _location(record["location"]) if record.get("location") else "-"
        lines.append(f"| {record['benchmark_name']} | `{record['importer']}` | {record['tasks']:,} | "
                     f"`{record['license']}`{note} | {location} |")
    if not records:
        lines.append("| (none) | | | | |")
    if skipped:
        lines += ["", "Seed sets the build looked for in its seeds folder and skipped:", ""]
        # A reason names glob patterns (*.parquet): escaped, they are not read as emphasis.
        lines += [f"- `{entry['importer']}`: " + entry["reason"].replace("*", "\\*") for entry in skipped]
    return "\n".join(lines)


def summary_lines(manifest: Mapping[str, Any]) -> list[str]:
    """What ``webgym-data build`` prints about the seed sets: those used, and those skipped and why."""
    used = [f"{entry['importer']} ({entry['tasks']:,} tasks)" for entry in manifest.get("inputs", [])]
    lines = [f"seed sets used: {', '.join(used) if used else 'none (all tasks from the extended build)'}"]
    skipped = manifest.get("seeds_skipped", [])
    if skipped:
        lines.append(f"seed sets skipped ({len(skipped)}): "
                     + "; ".join(f"{entry['importer']} ({entry['reason']})" for entry in skipped))
    return lines
