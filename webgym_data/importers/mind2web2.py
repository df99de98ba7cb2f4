"""Mind2Web-2 (OSU-NLP-Group): agentic-search tasks judged by rubric trees.

Rows: ``task_id, task_description`` (``dev_set_tasks.jsonl``; ``task_examples.json`` maps
``{task_id: {task_description, rubric_path}}``). A rubric tree
(``eval_breakdown[0].verification_tree``: ``{id, desc, critical, strategy, children}``) is read from
``rubric_trees_from_gh_page/<task_id>_rubric.json`` next to the task file when present: each
depth-1 node becomes a fact group and the leaves below it its facts (a depth-1 leaf is a group of
one fact), with ``rubric_source = "seed"`` (``webgym-data build --rubrics all`` has an LLM write
the rubric instead); every leaf, prefixed by its depth-1 node's description, is one of the task's
`seed_criteria`. The tasks have no site, so they start from a search engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from webgym_data.importers._base import (
    SEARCH_START_URL,
    SeedImporter,
    optional_text,
    read_json_file,
    require_text,
)
from webgym_data.schema import FactGroup, Task, TaskValidationError

__all__ = ["Mind2Web2Importer", "groups_as_criteria", "rubric_tree_to_groups"]

RUBRIC_FOLDER = "rubric_trees_from_gh_page"


def _label(node: Mapping[str, Any]) -> str:
    """The node's description, or its id made readable when the tree has none."""
    desc = node.get("desc")
    if isinstance(desc, str) and desc.strip():
        return " ".join(desc.split())
    return str(node.get("id", "")).replace("_", " ").strip()


def _leaves(node: Mapping[str, Any], *, file: str, path: str) -> list[str]:
    children = node.get("children") or []
    if not isinstance(children, list):
        raise TaskValidationError("must be a list of nodes", file=file, field=f"{path}.children")
    if not children:
        return [_label(node)]
    leaves: list[str] = []
    for position, child in enumerate(children):
        if not isinstance(child, Mapping):
            raise TaskValidationError("must be a node object", file=file,
                                      field=f"{path}.children[{position}]")
        leaves.extend(_leaves(child, file=file, path=f"{path}.children[{position}]"))
    return leaves


def rubric_tree_to_groups(tree: Mapping[str, Any], *, file: str = "") -> tuple[FactGroup, ...]:
    """Fact groups from a Mind2Web-2 verification tree: depth-1 nodes -> groups, leaves -> facts."""
    root = "verification_tree"
    if not isinstance(tree, Mapping):
        raise TaskValidationError("must be a node object", file=file, field=root)
    children = tree.get("children") or []
    if not isinstance(children, list):
        raise TaskValidationError("must be a list of nodes", file=file, field=f"{root}.children")
    groups = []
    for position, child in enumerate(children or [tree]):
        path = f"{root}.children[{position}]"
        if not isinstance(child, Mapping):
            raise TaskValidationError("must be a node object", file=file, field=path)
        facts = [fact for fact in _leaves(child, file=file, path=path) if fact]
        if not facts:
            raise TaskValidationError("has no leaf with a description or id", file=file, field=path)
        groups.append(FactGroup(id=str(child.get("id") or position + 1), description=_label(child),
                                facts=tuple(facts)))
    ids = [g.id for g in groups]
    if len(set(ids)) != len(ids):
        raise TaskValidationError(f"depth-1 node ids are not unique: {ids}", file=file, field=root)
    return tuple(groups)


def groups_as_criteria(groups: tuple[FactGroup, ...]) -> list[str]:
    """One line per fact, prefixed by its group's description when that says something more."""
    return [f"{group.description}: {fact}" if group.description and group.description != fact else fact
            for group in groups for fact in group.facts]


def _read_tree(path: Path) -> Mapping[str, Any]:
    data = read_json_file(path)
    try:
        return data["eval_breakdown"][0]["verification_tree"]
    except (KeyError, IndexError, TypeError):
        raise TaskValidationError("is missing", file=str(path),
                                  field="eval_breakdown[0].verification_tree") from None


class Mind2Web2Importer(SeedImporter):
    name = "mind2web2"
    benchmark_name = "mind2web-2"
    hub_id = "osunlp/Mind2Web-2"  # all 130 tasks
    license_id = "mit"
    default_paths = ("mind2web2", "Mind2Web-2")
    upstream_files = ("dev_set_tasks.jsonl",)
    folder_files = ("dev_set_tasks.jsonl",)

    def prepare(self, records: Iterable[Any], *, file: str) -> Iterator[Any]:
        folder = Path(file).parent / RUBRIC_FOLDER if "://" not in file else None
        if folder is not None and not folder.is_dir():
            folder = Path(file).parent if Path(file).parent.name == RUBRIC_FOLDER else None
        for record in records:
            if folder is not None and isinstance(record, Mapping):
                task_id = optional_text(record, "task_id") or optional_text(record, "_key")
                rubric = folder / f"{task_id}_rubric.json"
                if task_id and rubric.is_file():
                    record = {**record, "_rubric_file": str(rubric)}
            yield record

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        task_id = optional_text(record, "task_id") or optional_text(record, "_key")
        if not task_id:
            raise TaskValidationError("is required", file=file, row=row, field="task_id")
        groups: tuple[FactGroup, ...] = ()
        metadata: dict[str, Any] = {"seed_task_id": task_id}
        rubric_file = record.get("_rubric_file")
        if rubric_file:
            groups = rubric_tree_to_groups(_read_tree(Path(rubric_file)), file=rubric_file)
            metadata["rubric_file"] = Path(rubric_file).name
        for key in ("eval_script", "script_stats"):
            if record.get(key):
                metadata[key] = record[key]
        return self.make_task(
            file=file, row=row,
            task_name=require_text(record, "task_description", file=file, row=row),
            task_name_field="task_description", website=SEARCH_START_URL, source_id=task_id,
            evaluator_reference=groups, metadata=metadata,
            seed_criteria=groups_as_criteria(groups), rubric_source="seed",
        )
