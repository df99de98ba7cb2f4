"""Statistics of a task set: counts per split, seed, domain, difficulty level, website and site.

The same figures go into the dataset card and ``manifest.json`` at build time and are printed by
``webgym-data stats FOLDER`` from the parquet files of a built folder, so what the card says is
always measured.

Exceptions: those of `webgym_data.loading`, chiefly ``NotATaskSetError`` (no such folder, no
task shards, or a shard that is not a task parquet file).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from webgym_data.loading import SPLITS, NotATaskSetError, task_shards
from webgym_data.schema import TASK_DIFFICULTY_LEVELS, UNKNOWN_DIFFICULTY, WebgymDataError
from webgym_data.split import registrable_domain

__all__ = [
    "NO_FACTS",
    "NotATaskSetError",
    "compute_stats",
    "markdown_tables",
    "read_columns",
    "stats_command",
    "stats_tables",
]

_COLUMNS = ("task_id", "benchmark_name", "domain", "difficulty", "difficulty_level", "website",
            "parent_task_id", "seed_difficulty_level")
NO_FACTS = UNKNOWN_DIFFICULTY
"""The level of tasks with neither rubric facts nor a seed label (kept as a name for older callers)."""


def read_columns(folder: Path, columns: Iterable[str] = _COLUMNS):
    """The given columns of every task of a built folder as one polars frame with a `split` column.

    A column that a build of an earlier schema did not write (``seed_difficulty_level`` before 1.1)
    is null."""
    columns = list(columns)
    import polars as pl  # optional: polars

    frames = []
    for split, files in task_shards(folder).items():
        for path in files:
            try:
                present = set(pl.read_parquet_schema(path))
                frame = pl.read_parquet(path, columns=[c for c in columns if c in present])
            except Exception as exc:  # polars raises several kinds; name the file either way
                raise NotATaskSetError(f"cannot read as a task parquet file: {exc}", file=str(path)) from exc
            missing = [pl.lit(None, dtype=pl.String).alias(c) for c in columns if c not in present]
            frame = frame.with_columns(missing)
            frames.append(frame.select(columns).with_columns(pl.lit(split).alias("split")))
    return pl.concat(frames, how="vertical") if frames else pl.DataFrame(
        {c: [] for c in (*columns, "split")}, schema={c: pl.String for c in (*columns, "split")})


def compute_stats(frame) -> dict[str, Any]:
    """Counts of a task frame (columns as `read_columns` gives, plus `split`), JSON-ready."""
    import polars as pl  # optional: polars

    websites = frame.get_column("website").unique().to_list()
    site_map = {w: registrable_domain(w) for w in websites}
    frame = frame.with_columns(
        pl.col("website").replace_strict(site_map, default="", return_dtype=pl.String).alias("site"),
        (pl.col("parent_task_id") != "").alias("is_subtask"),
        # Builds before schema 1.1 (no seed_difficulty_level column) filed a task without facts
        # under "easy": count it as unknown, as the schema does now.
        pl.when(pl.col("seed_difficulty_level").is_null() & (pl.col("difficulty") <= 0))
        .then(pl.lit(UNKNOWN_DIFFICULTY)).otherwise(pl.col("difficulty_level")).alias("difficulty_level"),
    )

    def per(column: str) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for key, split, count in frame.group_by([column, "split"]).len().iter_rows():
            table.setdefault(key or "(none)", {s: 0 for s in SPLITS})[split] = count
        return dict(sorted(table.items()))

    splits = {s: 0 for s in SPLITS}
    subtasks = {s: 0 for s in SPLITS}
    for split, is_subtask, count in frame.group_by(["split", "is_subtask"]).len().iter_rows():
        splits[split] += count
        if is_subtask:
            subtasks[split] += count
    uniques = {}
    for column in ("website", "site"):
        uniques[column] = {s: frame.filter(pl.col("split") == s).get_column(column).n_unique()
                           for s in SPLITS}
        uniques[column]["total"] = frame.get_column(column).n_unique()
    difficulty = per("difficulty_level")
    difficulty = {level: difficulty.get(level, {s: 0 for s in SPLITS})
                  for level in TASK_DIFFICULTY_LEVELS if level != UNKNOWN_DIFFICULTY or level in difficulty}
    return {
        "splits": splits,
        "subtasks": subtasks,
        "websites": uniques["website"],
        "sites": uniques["site"],
        "seeds": per("benchmark_name"),
        "domains": per("domain"),
        "difficulty": difficulty,
    }


def stats_tables(stats: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The tables shown by the card and the CLI: (title, header, rows)."""
    def counts(title: str, name: str, table: dict[str, dict[str, int]]):
        rows = [[key, f"{c['train']:,}", f"{c['test']:,}", f"{c['train'] + c['test']:,}"]
                for key, c in table.items()]
        return title, [name, "train", "test", "total"], rows

    total = stats["splits"]
    summary = [
        ["tasks", f"{total['train']:,}", f"{total['test']:,}", f"{total['train'] + total['test']:,}"],
        ["of which decomposed subtasks", f"{stats['subtasks']['train']:,}",
         f"{stats['subtasks']['test']:,}", f"{stats['subtasks']['train'] + stats['subtasks']['test']:,}"],
        ["websites", f"{stats['websites']['train']:,}", f"{stats['websites']['test']:,}",
         f"{stats['websites']['total']:,}"],
        ["sites (registrable domains)", f"{stats['sites']['train']:,}", f"{stats['sites']['test']:,}",
         f"{stats['sites']['total']:,}"],
    ]
    return [
        ("Overview", ["", "train", "test", "total"], summary),
        counts("Tasks per seed set", "seed set", stats["seeds"]),
        counts("Tasks per domain", "domain", stats["domains"]),
        counts("Tasks per difficulty level (easy 1-3 facts, medium 4-6, hard 7+, or the seed's label "
               "until an LLM rubric; unknown: neither)", "level", stats["difficulty"]),
    ]


def markdown_tables(stats: dict[str, Any]) -> str:
    """`stats_tables` as Markdown, for the dataset card."""
    out = []
    for title, header, rows in stats_tables(stats):
        out.append(f"### {title}\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
        out.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
        out.append("")
    return "\n".join(out)


@click.command("stats")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON instead of tables.")
def stats_command(folder: Path, as_json: bool) -> None:
    """Print the statistics tables of a built task set FOLDER.

    \b
    Example:
      webgym-data stats out/tasks
      webgym-data stats out/tasks --json > stats.json
    """
    from rich.console import Console  # lazy: import time
    from rich.table import Table  # lazy: import time

    try:
        stats = compute_stats(read_columns(folder))
    except WebgymDataError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(stats, indent=2, sort_keys=True))
        return
    console = Console()
    for title, header, rows in stats_tables(stats):
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(header):
            table.add_column(name, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
