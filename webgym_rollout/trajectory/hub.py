"""Trajectory datasets on the Hub: the dataset card and ``webgym-rollout push OUT REPO_ID``.

`write_card` writes a folder's ``README.md`` (cards/trajectories_card.md: what the rows hold, the
summary tables, the ``configs:`` block that lets ``datasets.load_dataset(OUT)`` read the listed
shards); `push_trajectories` uploads a finished folder (`webgym_rollout.trajectory.writer`):
exactly the shards its manifest lists, their recordings and the card, never temporary files.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import click

from webgym_core.cards import render_card, size_category
from webgym_core.cli import hub_push_options
from webgym_core.files import TMP_PREFIX, sha256_file, write_atomic
from webgym_rollout.errors import PushRefused, TrajectoryError
from webgym_rollout.trajectory.contract import MANIFEST, TRAJECTORY_SCHEMA_VERSION, succeeded
from webgym_rollout.trajectory.reader import read_episodes, read_manifest
from webgym_rollout.trajectory.recordings import RECORDINGS

__all__ = ["PushRefused", "push_command", "push_trajectories", "write_card"]

logger = logging.getLogger(__name__)


_CARD_COLUMNS = ["split", "reward", "status", "num_steps", "benchmark_name", "difficulty_level",
                 "policy_model", "judge_model"]


def _summary_columns(out_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for batch in read_episodes(out_dir).batches(columns=_CARD_COLUMNS, batch_size=1024):
        rows.extend(batch.to_pylist())
    return rows


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    if not rows:
        return "(none)"
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _grouped(rows: list[dict[str, Any]], key: str) -> list[tuple[Any, ...]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row[key] or "(none)"].append(row)
    return [(name, len(g), f"{sum(succeeded(r['reward']) for r in g) / len(g):.1%}",
             f"{sum(r['num_steps'] or 0 for r in g) / len(g):.1f}") for name, g in sorted(groups.items())]


def _names(rows: list[dict[str, Any]], key: str) -> str:
    return ", ".join(f"`{m}`" for m in sorted({r[key] for r in rows if r[key]})) or "(none)"


def write_card(out_dir: str | Path, *, repo_id: str | None = None) -> Path:
    """Render README.md from `cards/trajectories_card.md` with figures measured from the shards."""
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    rows = _summary_columns(out_dir)
    splits = sorted({s["split"] for s in manifest["shards"]}) or ["train"]
    counts = Counter(r["split"] for r in rows)
    n = len(rows)
    steps = sum(r["num_steps"] or 0 for r in rows)
    configs = ["- config_name: default", "  data_files:"]
    for split in splits:
        # Exact shard paths, not a glob: only what the manifest vouches for is read, and the list
        # changes when shards are added (datasets' cache key hashes the patterns, not the files, so
        # with a glob `load_dataset(OUT)` would return a stale cached copy after a resume).
        paths = [s["path"] for s in manifest["shards"] if s["split"] == split]
        paths = paths or [f"data/{split}-*.parquet"]
        configs += [f"  - split: {split}", "    path:", *(f"    - {p}" for p in paths)]
    values = {
        "pretty_name": f"WebGym trajectories ({repo_id.split('/')[-1]})" if repo_id
        else "WebGym trajectories",
        "size_category": size_category(n),
        "configs_yaml": "\n".join(configs),
        "written_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "schema_version": manifest.get("schema_version", TRAJECTORY_SCHEMA_VERSION),
        "n_episodes": n,
        "splits_line": ", ".join(f"{s}: {counts.get(s, 0)}" for s in splits),
        "n_steps": steps,
        "mean_steps": f"{steps / n:.1f}" if n else "0",
        "success_rate": f"{sum(succeeded(r['reward']) for r in rows) / n:.1%}" if n else "n/a",
        "policy_models": _names(rows, "policy_model"),
        "judge_models": _names(rows, "judge_model"),
        "n_shards": len(manifest["shards"]),
        "repo_hint": repo_id or str(out_dir),
        "first_split": splits[0],
        "status_table": _table(("status", "episodes"), sorted(Counter(r["status"] for r in rows).items())),
        "benchmark_table": _table(("benchmark", "episodes", "success", "mean steps"),
                                  _grouped(rows, "benchmark_name")),
        "difficulty_table": _table(("difficulty", "episodes", "success", "mean steps"),
                                   _grouped(rows, "difficulty_level")),
    }
    path = out_dir / "README.md"
    write_atomic(path, render_card("trajectories_card.md", values))
    return path


# ---------------------------------------------------------------------------------------------- push

def push_trajectories(out_dir: str | Path, repo_id: str, *, private: bool = False,
                      revision: str | None = None, token: str | None = None,
                      commit_message: str | None = None) -> str:
    """Upload the card, the manifest and the listed shards to a Hub dataset repo (to branch `revision`,
    created when missing); returns the commit URL."""
    from huggingface_hub import HfApi  # optional: huggingface_hub

    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    if not manifest["shards"]:
        raise PushRefused(f"{out_dir} has no finished shards to push")
    for shard in manifest["shards"]:
        if shard.get("sha256") and sha256_file(out_dir / shard["path"]) != shard["sha256"]:
            raise PushRefused(f"{out_dir / shard['path']} does not match its sha256 in {MANIFEST}")
    write_card(out_dir, repo_id=repo_id)
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, repo_type="dataset", branch=revision, exist_ok=True)
    # Only what the manifest vouches for: no temporary files, no shard a crash left unlisted.
    allow = ["README.md", MANIFEST, *(shard["path"] for shard in manifest["shards"])]
    if (out_dir / RECORDINGS).is_dir():  # recorded traffic (trajectory.recordings); never temp files
        allow.append(f"{RECORDINGS}/*")
    n = sum(shard["num_rows"] for shard in manifest["shards"])
    commit = api.upload_folder(folder_path=str(out_dir), repo_id=repo_id, repo_type="dataset",
                               revision=revision, allow_patterns=allow,
                               ignore_patterns=[f"*/{TMP_PREFIX}*"],
                               commit_message=commit_message or f"Add {n} WebGym trajectories")
    return str(getattr(commit, "commit_url", commit))


@click.command("push")
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("repo_id")
@hub_push_options
def push_command(out: Path, repo_id: str, revision: str | None, token: str | None, commit_message: str | None,
                 private: bool) -> None:
    """Publish the trajectory dataset in OUT to the Hub dataset repo REPO_ID.

    Uploads README.md (the card, re-rendered with REPO_ID), manifest.json and the shards the
    manifest lists.

    \b
    Example:
      webgym-rollout push out/trajectories/iter-0000 my-org/webgym-trajectories --private
    """
    try:
        url = push_trajectories(out, repo_id, private=private, revision=revision, token=token,
                                commit_message=commit_message)
    except TrajectoryError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"pushed {out} to {repo_id}: {url}")
