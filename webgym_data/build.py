"""``webgym-data build``: seeds in, a Hub-ready task-set folder out.

Steps: import -> normalise -> dedupe -> rubrics (LLM only) -> taxonomy -> decompose -> split ->
write. The folder is written next to its destination under a temporary name and renamed into
place at the end, so a failed build never leaves a half folder::

    OUT/
      data/{train,test}-seeds-NNNNN-of-NNNNN.parquet     seed tasks
      data/{train,test}-subtasks-NNNNN-of-NNNNN.parquet  decomposed subtasks (when there are any)
      README.md        dataset card (cards/tasks_card.md) with the measured statistics and the
                       `configs:` block: `default` (all tasks) and `seeds` (no subtasks)
      manifest.json    versions, content hash, input file hashes, settings, counts

``--extend EXISTING`` keeps every task of an earlier build as it is (same ids, same split), adds
the new seed tasks, and puts a new task on a site that is already split into that site's split.

Exceptions::

    WebgymDataError
     └── BuildError   (no seeds, a destination that is not an earlier build, an unreadable EXISTING)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import operator
import os
import shutil
import string
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from webgym import CARDS_DIR
from webgym_data import __version__
from webgym_data.decompose import DecomposeSettings, decompose_tasks
from webgym_data.schema import SCHEMA_VERSION, Task, WebgymDataError, difficulty_level, task_features
from webgym_data.split import (
    DedupeSettings,
    SplitSettings,
    dedupe,
    site_assignment,
    split_tasks,
)

__all__ = ["BuildError", "BuildReport", "BuildSettings", "build", "build_command", "read_task_set",
           "render_card"]

logger = logging.getLogger(__name__)

CARD_TEMPLATE = CARDS_DIR / "tasks_card.md"
MANIFEST = "manifest.json"
_KINDS = ("seeds", "subtasks")
_ROW_GROUP_ROWS = 10_000  # small row groups: readers can stream a shard without loading it whole


class BuildError(WebgymDataError):
    """The build cannot run as asked."""


@dataclass(frozen=True)
class BuildSettings:
    """Everything one build depends on (recorded in ``manifest.json``, except secrets)."""

    out: Path
    """Folder to write; replaced atomically if it holds an earlier build."""
    seeds_dir: Path | None = None
    """Folder of seed sets; every registered importer whose default path exists there is used."""
    importers: tuple[tuple[str, str], ...] = ()
    """Extra ``(importer name, file, folder or Hub id)`` sources."""
    llm_base_url: str | None = None
    """OpenAI-compatible endpoint for rubrics, subtask instructions and taxonomy; None = offline."""
    llm_model: str | None = None
    """Model name at `llm_base_url`."""
    llm_cache_dir: Path | None = None
    """LLM reply cache; None uses $XDG_CACHE_HOME/webgym/llm."""
    llm_max_retries: int = 3
    """Retries per LLM request (errors, invalid replies) before giving up."""
    test_size: int = 1167
    """Target number of test tasks."""
    seed: int = 0
    """Seed of the split."""
    max_subtasks: int = 8
    """Most decomposed subtasks per task (0: no decomposition)."""
    large_threshold: int = 3
    """Facts that make a fact group large (each subtask holds a large group)."""
    near_threshold: float = 0.9
    """Token-set Jaccard at which two instructions on one site are duplicates."""
    extend: Path | None = None
    """An earlier build to extend: its tasks, ids and site split are kept."""
    shard_rows: int = 250_000
    """Most rows per parquet file."""
    show_progress: bool = True
    """Show rich progress bars on stderr."""

    @property
    def offline(self) -> bool:
        return not self.llm_base_url


@dataclass
class BuildReport:
    """What a build wrote."""

    out: Path
    manifest: dict[str, Any]
    train: list[Task] = field(default_factory=list, repr=False)
    test: list[Task] = field(default_factory=list, repr=False)


# ------------------------------------------------------------------------------------- reading

def read_task_set(folder: Path) -> tuple[list[Task], list[Task], dict[str, Any]]:
    """``(train, test, manifest)`` of a built folder (raises `BuildError` naming the file)."""
    import pyarrow.parquet as pq

    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise BuildError(f"{folder}: not a webgym-data build (no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BuildError(f"{manifest_path}: unreadable: {exc}") from None
    splits: dict[str, list[Task]] = {}
    for split in ("train", "test"):
        tasks: list[Task] = []
        for path in sorted((folder / "data").glob(f"{split}-*.parquet")):
            try:
                rows = pq.read_table(path).to_pylist()
            except Exception as exc:  # pyarrow raises many kinds; name the file either way
                raise BuildError(f"{path}: unreadable parquet: {exc}") from None
            tasks.extend(Task.from_row(row, file=str(path), row_index=i) for i, row in enumerate(rows))
        splits[split] = tasks
    return splits["train"], splits["test"], manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------- writing

def _strings(values: Sequence[str]):
    """A pyarrow string array. Through polars: ~10x faster than ``pa.array`` for long texts."""
    import polars as pl
    import pyarrow as pa

    return pl.Series(values, dtype=pl.String).to_arrow().cast(pa.string())


def _arrow_table(tasks: Sequence[Task], schema):
    """The task rows as an arrow table (same content as `Task.to_row`).

    Built column by column, the nested rubric from flat offset arrays: converting one Python dict
    per row is ~10x slower at 300k tasks.
    """
    import pyarrow as pa

    group_offsets, fact_offsets = [0], [0]
    group_ids: list[str] = []
    descriptions: list[str] = []
    facts: list[str] = []
    for task in tasks:
        for group in task.evaluator_reference:
            group_ids.append(group.id)
            descriptions.append(group.description)
            facts.extend(group.facts)
            fact_offsets.append(len(facts))
        group_offsets.append(len(group_ids))
    offsets = pa.array(group_offsets, pa.int32())
    ids = _strings(group_ids)
    reference_type = schema.field("evaluator_reference").type
    groups = pa.StructArray.from_arrays(
        [ids, _strings(descriptions),
         pa.ListArray.from_arrays(pa.array(fact_offsets, pa.int32()), _strings(facts))],
        fields=list(reference_type.value_type))
    sources = [t.source for t in tasks]
    columns: dict[str, Any] = {}
    for f in schema:
        if f.name == "evaluator_reference":
            columns[f.name] = pa.ListArray.from_arrays(offsets, groups, type=reference_type)
        elif f.name == "fact_group_ids":
            columns[f.name] = pa.ListArray.from_arrays(offsets, ids, type=f.type)
        elif f.name == "difficulty_level":
            columns[f.name] = _strings([difficulty_level(t.difficulty) for t in tasks])
        elif f.name == "source":
            columns[f.name] = pa.StructArray.from_arrays(
                [_strings([s.importer for s in sources]), _strings([s.file for s in sources]),
                 pa.array([s.row for s in sources], pa.int64()), _strings([s.metadata for s in sources])],
                fields=list(f.type))
        elif pa.types.is_string(f.type):
            columns[f.name] = _strings(list(map(operator.attrgetter(f.name), tasks)))
        else:
            columns[f.name] = pa.array(list(map(operator.attrgetter(f.name), tasks)), f.type)
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


def _write_split(tasks: Sequence[Task], data_dir: Path, split: str, shard_rows: int,
                 advance: Callable[[int], None]) -> list[str]:
    """Write one split as ``<split>-<kind>-i-of-n.parquet`` files; returns their names."""
    import pyarrow.parquet as pq

    # The arrow schema of the `datasets` features carries them in its metadata, so `load_dataset`
    # restores the declared features (what `Dataset.to_parquet` writes, without its tqdm bars).
    schema = task_features().arrow_schema
    names = []
    for kind in _KINDS:
        part = [t for t in tasks if bool(t.parent_task_id) == (kind == "subtasks")]
        # An empty split gets no file (an empty parquet file breaks `load_dataset`); the card's
        # `configs:` then leaves the split out.
        if not part:
            continue
        n_shards = max(1, -(-len(part) // shard_rows))
        for shard in range(n_shards):
            chunk = part[shard * shard_rows:(shard + 1) * shard_rows]
            table = _arrow_table(chunk, schema)
            name = f"{split}-{kind}-{shard:05d}-of-{n_shards:05d}.parquet"
            pq.write_table(table, data_dir / name, row_group_size=_ROW_GROUP_ROWS)
            names.append(name)
            advance(len(chunk))
    return names


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return label
    return "10M<n<100M"


def render_card(manifest: dict[str, Any], *, template: Path = CARD_TEMPLATE) -> str:
    """The README.md dataset card for a manifest (placeholders filled with measured figures)."""
    from webgym_data.stats import markdown_tables

    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"dataset card template {template} is unreadable: {exc}") from None
    counts, settings, stats = manifest["counts"], manifest["settings"], manifest["stats"]
    inputs = "".join(f"\n   - `{i['importer']}`: {i['tasks']:,} tasks, {i['skipped']:,} rows skipped"
                     + (f" ({i['unresolved_websites']:,} without a usable website)"
                        if i["unresolved_websites"] else "")
                     for i in manifest["inputs"]) or " no new seeds"
    if counts["rubrics"]["llm"]:
        rubric_line = (f"{counts['rubrics']['generated']:,} generated by `{settings['llm_model']}`, "
                       f"{counts['rubrics']['failed']:,} tasks dropped after invalid replies.")
    else:
        rubric_line = (f"no LLM was used; {counts['rubrics']['missing']:,} seed tasks have no rubric "
                       "(they have no facts and are not decomposed).")
    sources = counts["decompose"]["instruction_sources"]
    instruction_line = ", ".join(f"{n:,} {k}" for k, n in sorted(sources.items())) or "none"
    taxonomy_line = "LLM with rule-based fallback" if counts["rubrics"]["llm"] else "rule-based"
    splits = [split for split in ("train", "test") if stats["splits"][split]]
    configs = ["configs:"]
    for name, kind in (("default", ""), ("seeds", "seeds-")):
        configs += [f"- config_name: {name}", "  data_files:"]
        for split in splits:
            configs += [f"  - split: {split}", f"    path: data/{split}-{kind}*.parquet"]
    values = {
        "configs": "\n".join(configs),
        "size_category": _size_category(stats["splits"]["train"] + stats["splits"]["test"]),
        "builder": manifest["builder"],
        "n_inputs": str(len(manifest["inputs"])),
        "dataset_version": str(manifest["dataset_version"]),
        "schema_version": manifest["schema_version"],
        "content_hash": manifest["content_hash"],
        "built_at": manifest["built_at"],
        "n_train": f"{stats['splits']['train']:,}",
        "n_test": f"{stats['splits']['test']:,}",
        "repo_hint": "webgym/tasks",
        "split_seed": str(settings["seed"]),
        "test_size_target": f"{settings['test_size']:,}",
        "stats_tables": markdown_tables(stats),
        "inputs_list": inputs,
        "n_duplicate_ids": f"{counts['normalise']['duplicate_ids']:,}",
        "n_exact": f"{counts['dedupe']['exact']:,}",
        "n_near": f"{counts['dedupe']['near']:,}",
        "near_threshold": str(settings["near_threshold"]),
        "rubric_line": rubric_line,
        "n_subtasks": f"{counts['decompose']['subtasks']:,}",
        "n_parents": f"{counts['decompose']['parents']:,}",
        "large_threshold": str(settings["large_threshold"]),
        "max_subtasks": str(settings["max_subtasks"]),
        "instruction_line": instruction_line,
        "taxonomy_line": taxonomy_line,
    }
    try:
        return string.Template(text).substitute(values)
    except (KeyError, ValueError) as exc:
        raise BuildError(f"dataset card template {template}: bad placeholder {exc}") from None


@contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A temporary folder next to `out`, renamed to `out` when the block succeeds."""
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise BuildError(f"{out} exists and is not an earlier webgym-data build; "
                         "choose an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.building-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------- progress

class _Steps:
    """One rich progress display for the whole build; each step is a bar (or a spinner)."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled)

    def __enter__(self) -> _Steps:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.__exit__(*exc_info)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop this display while a step shows its own bar (rich allows one live display)."""
        self.progress.stop()
        yield
        # Not restarted after an error: the error line is then the last thing printed.
        self.progress.start()

    @contextmanager
    def step(self, name: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        task = self.progress.add_task(name, total=total)
        started, cpu = time.perf_counter(), time.process_time()
        try:
            yield lambda n=1: self.progress.advance(task, n)
        finally:
            logger.info("step %s: %.2f s (cpu %.2f s)", name, time.perf_counter() - started,
                        time.process_time() - cpu)
            self.progress.update(task, completed=total if total is not None else 1,
                                 total=total if total is not None else 1)


# ------------------------------------------------------------------------------------- build

def _llm_client(settings: BuildSettings):
    if settings.offline:
        return None
    if not settings.llm_model:
        raise BuildError("--llm-base-url needs --llm-model")
    from webgym_data.llm import LLMClient, LLMSettings

    cache_dir = settings.llm_cache_dir or (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "webgym" / "llm")
    return LLMClient(LLMSettings(base_url=settings.llm_base_url, model=settings.llm_model,
                                 cache_dir=cache_dir, max_retries=settings.llm_max_retries))


def _settings_record(settings: BuildSettings) -> dict[str, Any]:
    record = asdict(settings)
    record.pop("show_progress")
    return json.loads(json.dumps(record, default=str))


def build(settings: BuildSettings) -> BuildReport:
    """Run the whole pipeline and write `settings.out` atomically."""
    from webgym_data.importers import discover_seeds, import_seed
    from webgym_data.taxonomy import assign_taxonomy

    decompose_settings = DecomposeSettings(large_threshold=settings.large_threshold,
                                           max_subtasks=settings.max_subtasks)
    split_settings = SplitSettings(test_size=settings.test_size, seed=settings.seed)
    dedupe_settings = DedupeSettings(near_threshold=settings.near_threshold)

    client = _llm_client(settings)
    existing_train: list[Task] = []
    existing_test: list[Task] = []
    previous: dict[str, Any] | None = None
    if settings.extend is not None:
        existing_train, existing_test, previous = read_task_set(settings.extend)

    sources: list[tuple[str, str]] = []
    if settings.seeds_dir is not None:
        if not Path(settings.seeds_dir).is_dir():
            raise BuildError(f"seed folder {settings.seeds_dir} does not exist")
        sources.extend((name, str(path)) for name, path in discover_seeds(Path(settings.seeds_dir)))
    sources.extend(settings.importers)
    if not sources:
        raise BuildError("no seed sets to import: give --seeds DIR with known seed files, "
                         "or --importer NAME=PATH")

    counts: dict[str, Any] = {}
    inputs: list[dict[str, Any]] = []
    with _Steps(settings.show_progress) as steps:
        # -- import
        tasks: list[Task] = []
        with steps.step("import", total=len(sources)) as advance:
            for name, source in sources:
                result = import_seed(name, source)
                files = {}
                for path in result.files:
                    path = Path(path)
                    shown = str(path)
                    if settings.seeds_dir is not None and path.is_relative_to(Path(settings.seeds_dir)):
                        shown = str(path.relative_to(Path(settings.seeds_dir)))
                    files[shown] = "sha256:" + _sha256(path) if path.is_file() else ""
                inputs.append({"importer": name, "source": str(source), "files": files,
                               "tasks": len(result.tasks), "skipped": len(result.skipped),
                               "unresolved_websites": result.unresolved_websites})
                tasks.extend(result.tasks)
                advance(1)

        # -- normalise: one row per task id (the first wins); earlier builds' ids are kept as they are
        known = {t.task_id for t in (*existing_train, *existing_test)}
        seen: set[str] = set()
        unique: list[Task] = []
        already = 0
        for task in tasks:
            if task.task_id in known:
                already += 1
            elif task.task_id not in seen:
                seen.add(task.task_id)
                unique.append(task)
        counts["normalise"] = {"imported": len(tasks), "duplicate_ids": len(tasks) - len(unique) - already,
                               "already_in_extended": already}

        # -- dedupe
        with steps.step("dedupe"):
            report = dedupe(unique, dedupe_settings, existing=[*existing_train, *existing_test])
        tasks = report.tasks
        counts["dedupe"] = {"exact": report.exact, "near": report.near, "kept": len(tasks)}

        # -- rubrics
        missing = sum(1 for t in tasks if not t.evaluator_reference and t.environment == "web")
        counts["rubrics"] = {"llm": client is not None, "missing": missing, "generated": 0, "failed": 0}
        if client is not None and missing:
            from webgym_data.rubrics import generate_rubrics

            with steps.paused():
                rubric_report = generate_rubrics(tasks, client, progress=settings.show_progress)
            tasks = rubric_report.tasks
            counts["rubrics"].update(generated=rubric_report.generated, failed=len(rubric_report.failed),
                                     missing=missing - rubric_report.generated - len(rubric_report.failed),
                                     usage=asdict(rubric_report.usage))

        # -- taxonomy, for the seed tasks. It runs before decomposition (the issue lists it after)
        # because a subtask is classified as its parent: copying the parent's pair is the same
        # result without a second pass over every subtask.
        if client is None:
            with steps.step("taxonomy", total=len(tasks)):
                tasks = list(assign_taxonomy(tasks))
        else:
            with steps.paused():
                tasks = list(assign_taxonomy(tasks, client, progress=settings.show_progress))
        counts["taxonomy"] = dict(Counter(t.domain or "(none)" for t in tasks))

        # -- decompose
        if client is None:
            with steps.step("decompose", total=len(tasks)) as advance:
                decomposed = decompose_tasks(tasks, decompose_settings, progress=advance)
        else:
            with steps.paused():
                decomposed = decompose_tasks(tasks, decompose_settings, client,
                                             llm_progress=settings.show_progress)
        counts["decompose"] = {
            "parents": decomposed.parents, "subtasks": len(decomposed.subtasks),
            "llm_fallbacks": len(decomposed.llm_fallbacks),
            "instruction_sources": dict(Counter(t.instruction_source for t in decomposed.subtasks)),
        }

        subtasks = decomposed.subtasks

        # -- split
        with steps.step("split"):
            fixed = site_assignment(existing_train, existing_test) if previous is not None else None
            # When extending, the test target counts what test already holds; new tasks on sites
            # already in test go there and count too.
            target = max(0, split_settings.test_size - len(existing_test))
            split = split_tasks([*tasks, *subtasks], replace(split_settings, test_size=target), fixed=fixed)
        train = [*existing_train, *split.train]
        test = [*existing_test, *split.test]
        if not train and not test:
            raise BuildError("the seeds gave no tasks to write (see the import and dedupe counts with -v)")

        # -- write
        with _staging(Path(settings.out)) as tmp:
            data_dir = tmp / "data"
            data_dir.mkdir()
            written: list[str] = []
            with steps.step("write", total=len(train) + len(test)) as advance:
                for name, part in (("train", train), ("test", test)):
                    written.extend(_write_split(part, data_dir, name, settings.shard_rows, advance))
            file_hashes = {f"data/{name}": "sha256:" + _sha256(data_dir / name) for name in sorted(written)}
            content = hashlib.sha256("\n".join(f"{k} {v}" for k, v in file_hashes.items()).encode())
            with steps.step("stats"):
                from webgym_data.stats import compute_stats, read_columns

                stats = compute_stats(read_columns(tmp))
            manifest = {
                "schema_version": SCHEMA_VERSION,
                "builder": f"webgym_data {__version__}",
                "dataset_version": (int(previous.get("dataset_version", 0)) + 1) if previous else 1,
                "content_hash": "sha256:" + content.hexdigest(),
                "built_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
                "extends": None if previous is None else {
                    "path": str(settings.extend), "dataset_version": previous.get("dataset_version"),
                    "content_hash": previous.get("content_hash")},
                "inputs": inputs,
                "settings": _settings_record(settings),
                "counts": counts,
                "stats": stats,
                "files": file_hashes,
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
            (tmp / "README.md").write_text(render_card(manifest), encoding="utf-8")
    return BuildReport(out=Path(settings.out), manifest=manifest, train=train, test=test)


# ------------------------------------------------------------------------------------- CLI

def _parse_importer(ctx, param, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    parsed = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise click.BadParameter(f"expected NAME=PATH, got {value!r}")
        parsed.append((name.strip(), path.strip()))
    return tuple(parsed)


@click.command("build")
@click.option("--seeds", "seeds_dir", type=click.Path(path_type=Path), default=None,
              help="Folder of seed sets (every known importer whose files are there is used).")
@click.option("--importer", "importers", multiple=True, callback=_parse_importer, metavar="NAME=PATH",
              help="Import PATH (file, folder or Hub id) with importer NAME; repeatable.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Folder to write.")
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint (rubrics, instructions, "
              "taxonomy). Without it the build is offline: template instructions, rule taxonomy.")
@click.option("--llm-model", default=None, help="Model name at --llm-base-url.")
@click.option("--llm-cache", "llm_cache_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="LLM reply cache [default: $XDG_CACHE_HOME/webgym/llm].")
@click.option("--llm-retries", "llm_max_retries", type=click.IntRange(min=0), default=3, show_default=True,
              help="Retries per LLM request for errors and invalid replies.")
@click.option("--test-size", type=click.IntRange(min=0), default=1167, show_default=True,
              help="Target number of test tasks (never more than a fifth of all tasks).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the test-site draw.")
@click.option("--max-subtasks", type=click.IntRange(min=0), default=8, show_default=True,
              help="Most decomposed subtasks per task (0 turns decomposition off).")
@click.option("--large-threshold", type=click.IntRange(min=1), default=3, show_default=True,
              help="Facts that make a fact group large.")
@click.option("--near-threshold", type=click.FloatRange(min=0, max=1, min_open=True), default=0.9,
              show_default=True, help="Token-set Jaccard at which instructions on one site are duplicates.")
@click.option("--extend", type=click.Path(path_type=Path), default=None,
              help="An earlier build to extend: its task ids and site split are kept.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bars.")
def build_command(seeds_dir: Path | None, importers: tuple[tuple[str, str], ...], out: Path,
                  llm_base_url: str | None, llm_model: str | None, llm_cache_dir: Path | None,
                  llm_max_retries: int, test_size: int, seed: int, max_subtasks: int, large_threshold: int,
                  near_threshold: float, extend: Path | None, no_progress: bool) -> None:
    """Import seed sets, add rubrics, decompose, split by site; write a Hub-ready folder.

    \b
    Example:
      webgym-data build --seeds ../shared/seeds --out out/tasks
      webgym-data build --seeds ../shared/seeds --out out/tasks \\
          --llm-base-url http://127.0.0.1:8000/v1 --llm-model Qwen/Qwen3-8B
      webgym-data build --importer generic=new_tasks.jsonl --extend out/tasks --out out/tasks-v2
    """
    settings = BuildSettings(
        out=out, seeds_dir=seeds_dir, importers=importers, llm_base_url=llm_base_url, llm_model=llm_model,
        llm_cache_dir=llm_cache_dir, llm_max_retries=llm_max_retries, test_size=test_size, seed=seed,
        max_subtasks=max_subtasks,
        large_threshold=large_threshold, near_threshold=near_threshold, extend=extend,
        show_progress=not no_progress)
    try:
        report = build(settings)
    except WebgymDataError as exc:
        raise click.ClickException(str(exc)) from None
    stats = report.manifest["stats"]
    click.echo(f"wrote {report.out}: {stats['splits']['train']:,} train + {stats['splits']['test']:,} test "
               f"tasks on {stats['websites']['total']:,} website(s) ({report.manifest['content_hash'][:19]})")
