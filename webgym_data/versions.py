"""Versions of a built task set: what changed between two builds, and publishing one to the Hub.

``webgym-data diff OLD NEW`` compares two built folders by task id: added, removed, and changed
tasks (any field differs, or the task moved between splits), with how many changed per field.
``webgym-data push FOLDER REPO_ID`` uploads a build with `huggingface_hub.HfApi` (create the
dataset repo, optionally a branch, upload the folder, optionally tag the commit).

A push writes REPO_ID into the build's card (README.md, re-rendered from its manifest), so that the
published card loads the set from where it is. A push replaces the dataset's files: shards of an
earlier build (other names, see `webgym_data.build`) are deleted in the same commit, so the repo
holds exactly this build.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     ├── NotATaskSetError   (from webgym_data.loading) a folder that is not a build
     └── PushError          the Hub refused or could not be reached (names the repo and the step)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym_core.cli import hub_push_options
from webgym_core.files import write_atomic
from webgym_data.errors import PushError, WebgymDataError
from webgym_data.loading import MANIFEST, NotATaskSetError, read_manifest, task_shards

__all__ = ["PushError", "TaskSetDiff", "diff_command", "diff_task_sets", "push_command", "push_task_set"]

logger = logging.getLogger(__name__)


@dataclass
class TaskSetDiff:
    """Differences between two builds, by task id."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    """Ids present in both whose row (any field but the `source` provenance) or split differs."""
    unchanged: int = 0
    changed_fields: dict[str, int] = field(default_factory=dict)
    """How many changed tasks differ in each field (``split`` for a move between splits)."""

    def summary(self) -> dict[str, Any]:
        return {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed),
                "unchanged": self.unchanged, "changed_fields": self.changed_fields}


def _read_all(folder: Path):
    import polars as pl  # optional: polars

    frames = []
    for split, files in task_shards(folder).items():
        for path in files:
            try:
                frame = pl.read_parquet(path)
            except Exception as exc:  # polars raises several kinds; name the file either way
                raise NotATaskSetError(f"cannot read as a task parquet file: {exc}", file=str(path)) from exc
            frames.append(frame.with_columns(pl.lit(split).alias("split")))
    frame = pl.concat(frames, how="vertical_relaxed")
    if "task_id" not in frame.columns:
        raise NotATaskSetError(f"{folder}: the data files have no task_id column")
    return frame


def diff_task_sets(old: Path, new: Path) -> TaskSetDiff:
    """Compare two built folders by task id."""
    import polars as pl  # optional: polars

    before, after = _read_all(old), _read_all(new)
    # `source` is provenance (which file and row a task was read from): moving a seed file is not
    # a change of the task.
    columns = [c for c in before.columns if c in after.columns and c not in ("task_id", "source")]
    # Row fingerprints, computed in one process so the hash function is the same for both sides.
    before = before.select("task_id", pl.struct(columns).hash(seed=0).alias("_hash"), *columns)
    after = after.select("task_id", pl.struct(columns).hash(seed=0).alias("_hash"), *columns)
    old_ids, new_ids = set(before["task_id"].to_list()), set(after["task_id"].to_list())
    result = TaskSetDiff(added=sorted(new_ids - old_ids), removed=sorted(old_ids - new_ids))
    joined = before.join(after, on="task_id", how="inner", suffix="_new")
    differs = joined.filter(pl.col("_hash") != pl.col("_hash_new"))
    result.changed = sorted(differs["task_id"].to_list())
    result.unchanged = joined.height - differs.height
    for column in columns:
        count = differs.filter(pl.col(column).ne_missing(pl.col(f"{column}_new"))).height
        if count:
            result.changed_fields[column] = count
    return result


@click.command("diff")
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--limit", type=click.IntRange(min=0), default=10, show_default=True,
              help="Task ids to list per kind of change.")
@click.option("--json", "as_json", is_flag=True, help="Print the full diff (every id) as JSON.")
def diff_command(old: Path, new: Path, limit: int, as_json: bool) -> None:
    """Report the tasks added, removed or changed between two builds OLD and NEW.

    \b
    Example:
      webgym-data diff out/tasks-v1 out/tasks-v2
      webgym-data diff out/tasks-v1 out/tasks-v2 --json > changes.json
    """
    from rich.console import Console  # lazy: import time
    from rich.table import Table  # lazy: import time

    try:
        result = diff_task_sets(old, new)
    except WebgymDataError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({**result.summary(), "added_ids": result.added, "removed_ids": result.removed,
                               "changed_ids": result.changed}, indent=2))
        return
    console = Console()
    table = Table(title=f"{old} -> {new}", title_justify="left")
    table.add_column("change")
    table.add_column("tasks", justify="right")
    table.add_column(f"ids (first {limit})")
    for name, ids in (("added", result.added), ("removed", result.removed), ("changed", result.changed)):
        table.add_row(name, f"{len(ids):,}", " ".join(ids[:limit]) + (" ..." if len(ids) > limit else ""))
    table.add_row("unchanged", f"{result.unchanged:,}", "")
    console.print(table)
    if result.changed_fields:
        console.print("changed fields: " + ", ".join(f"{k} {v:,}" for k, v in
                                                     sorted(result.changed_fields.items())))


# ------------------------------------------------------------------------------------- push

def _check_build(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """The manifest of a build and its shard files (relative paths); raises NotATaskSetError."""
    shards = task_shards(folder)
    manifest = read_manifest(folder)
    if manifest is None or not (folder / "README.md").is_file():
        raise NotATaskSetError(f"{folder}: not a webgym-data build (needs {MANIFEST} and README.md)")
    return manifest, [path.relative_to(folder).as_posix() for files in shards.values() for path in files]


def _name_repo_in_card(folder: Path, manifest: dict[str, Any], repo_id: str) -> None:
    """Re-render the build's card so that it loads the set from `repo_id` (it may name another id, or
    the local folder). A manifest too old for the card template keeps its card as it is."""
    from webgym_data.build import render_card  # lazy: the build pipeline's imports

    try:
        card = render_card(manifest, repo_id=repo_id)
    except (KeyError, TypeError, WebgymDataError) as exc:
        logger.warning("%s: card kept as built (cannot re-render it for %s: %s)", folder, repo_id, exc)
        return
    write_atomic(folder / "README.md", card)


# Seed sets whose owners ask that questions or answers never appear as plain text online: BrowseComp
# (its canary) and GAIA (answers not to be reshared in crawlable form). Such a build goes to a
# private repo only.
RESTRICTED_SEEDS = {"browsecomp": "BrowseComp's canary asks that its data never appear as plain text online",
                    "gaia-web": "GAIA asks that its answers not be reshared in crawlable form"}


def push_task_set(folder: Path, repo_id: str, *, revision: str | None = None, tag: str | None = None,
                  private: bool = False, token: str | None = None, commit_message: str | None = None,
                  api=None) -> str:
    """Upload a built folder to the dataset repo `repo_id`; returns the commit URL.

    `revision` names a branch (created from main when missing); `tag` tags the uploaded commit;
    `commit_message` defaults to one naming the task set's version and content hash.
    A build holding a seed set of `RESTRICTED_SEEDS` is pushed only with ``private=True``.
    """
    from huggingface_hub import HfApi  # optional: huggingface_hub

    folder = Path(folder)
    manifest, shard_files = _check_build(folder)
    restricted = sorted(set(manifest.get("stats", {}).get("seeds", {})) & set(RESTRICTED_SEEDS))
    if restricted and not private:
        reasons = "; ".join(f"{name}: {RESTRICTED_SEEDS[name]}" for name in restricted)
        raise PushError(f"{folder} holds {', '.join(restricted)} tasks ({reasons}): push it with --private, "
                        "or build without those seeds for a public repo")
    _name_repo_in_card(folder, manifest, repo_id)
    api = api or HfApi(token=token)
    version = manifest.get("dataset_version", "?")
    content = str(manifest.get("content_hash", ""))
    step = "create_repo"
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        if revision and revision != "main":
            step = "create_branch"
            api.create_branch(repo_id, repo_type="dataset", branch=revision, exist_ok=True)
        step = "upload_folder"
        commit = api.upload_folder(
            repo_id=repo_id, repo_type="dataset", folder_path=str(folder), revision=revision,
            allow_patterns=["README.md", MANIFEST, *shard_files],
            # An earlier build's shards have other names: remove them in the same commit.
            delete_patterns=["data/*.parquet"],
            commit_message=commit_message or f"webgym-data tasks v{version} ({content[:19]})",
        )
        if tag:
            step = "create_tag"
            api.create_tag(repo_id, repo_type="dataset", tag=tag, revision=revision or "main",
                           tag_message=f"webgym-data tasks v{version} ({content})")
    except Exception as exc:  # the Hub client raises many kinds (HTTP, offline, network): one line
        reason = " ".join(str(exc).split())[:300]
        raise PushError(f"push of {folder} to {repo_id} failed at {step}: "
                        f"{type(exc).__name__}: {reason}") from exc
    return str(getattr(commit, "commit_url", commit))


@click.command("push")
@click.argument("folder", type=click.Path(path_type=Path))
@click.argument("repo_id")
@hub_push_options
@click.option("--tag", default=None, help="Tag the pushed commit, e.g. v1.0.")
def push_command(folder: Path, repo_id: str, revision: str | None, token: str | None,
                 commit_message: str | None, private: bool, tag: str | None) -> None:
    """Publish a built task set FOLDER to the Hugging Face Hub dataset repo REPO_ID.

    \b
    Example:
      webgym-data push out/tasks my-org/webgym-tasks --tag v1.0
      webgym-data push out/tasks my-org/webgym-tasks --revision dev --private
    """
    try:
        url = push_task_set(folder, repo_id, revision=revision, tag=tag, private=private, token=token,
                            commit_message=commit_message)
    except WebgymDataError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"pushed {folder} to {repo_id}: {url}")
