"""AgentSynth-Web (sunblaze-ucb/AgentSynth): synthesised tasks on InSTA websites.

Two row kinds: composite tasks (``summarized_task_sequences.jsonl``: ``task, website,
action_sequence, thoughts_sequence``) and the per-step subtasks they were chained from
(``task_sequences.jsonl``, which adds ``webpage_text``). Both are imported; ``source.metadata``
says which kind a task is and how many actions its reference run took. The recorded runs themselves
(actions, thoughts, page text) are not task material and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webgym_data.importers._base import SeedImporter, require_text
from webgym_data.schema import Task

__all__ = ["AgentSynthWebImporter"]


class AgentSynthWebImporter(SeedImporter):
    name = "agentsynth_web"
    benchmark_name = "agentsynth-web"
    hub_id = "sunblaze-ucb/AgentSynth"
    license_id = "apache-2.0"
    default_paths = ("agentsynth_web", "AgentSynth", "AgentSynth/insta_data")
    upstream_files = ("summarized_task_sequences.jsonl", "task_sequences.jsonl")
    folder_files = ("summarized_task_sequences.jsonl", "task_sequences.jsonl")

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        name = file.rsplit("/", 1)[-1] if "://" in file else Path(file).name
        actions = record.get("action_sequence")
        metadata: dict[str, Any] = {"kind": "composite" if name.startswith("summarized") else "step"}
        if isinstance(actions, list):
            metadata["num_actions"] = len(actions)
        for key in ("level", "difficulty"):
            if record.get(key) not in (None, ""):
                metadata[key] = record[key]
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "task", file=file, row=row), task_name_field="task",
            website=require_text(record, "website", file=file, row=row), metadata=metadata,
        )
