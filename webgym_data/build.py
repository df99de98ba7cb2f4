"""``webgym-data build``: seeds in, a Hub-ready task-set folder out.

Steps: import -> normalise -> dedupe -> rubrics (LLM only) -> taxonomy -> decompose -> split ->
write. Rubrics (``--rubrics``, see `webgym_data.rubrics`): ``all`` (the default, the published
method) has the LLM write the rubric of every task but those given as rubrics, the seed's own
criteria going into the prompt and staying in `seed_criteria`; ``missing`` only of tasks without
one. Without an LLM endpoint the seed rubrics are kept as imported, and the manifest and the card
say so. The folder is written next to its destination under a temporary name and renamed into
place at the end, so a failed build never leaves a half folder::

    OUT/
      data/{train,test}-seeds-<build id>-NNNNN-of-NNNNN.parquet     seed tasks
      data/{train,test}-subtasks-<build id>-NNNNN-of-NNNNN.parquet  decomposed subtasks (if any)
      README.md        dataset card (cards/tasks_card.md) with the measured statistics and the
                       `configs:` block listing those files: `default` (all tasks) and `seeds`
      manifest.json    build id, versions, content hash, input file hashes, the seed sets used (with
                       their licences and where they live) and skipped (and why), settings, counts, files

The build id is the start of the content hash (a hash of every shard's bytes), so shard names
differ whenever the rows do. That is what makes a plain ``datasets.load_dataset(folder)`` safe:
`datasets` caches a local folder under the folder's name and the card's file list, so a later
build with other rows in a folder of the same name, with the same file names, would be answered
from the earlier build's cache. Builds made before the build id (``train-seeds-00000-of-00001.parquet``)
still read everywhere (`webgym_data.loading`).

``--extend EXISTING`` keeps every task of an earlier build as it is (same ids, same split), adds
the new seed tasks, and puts a new task on a site that is already split into that site's split.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     └── BuildError   (bad settings, no seeds, a destination that is not an earlier build, a folder
                       that cannot be written; also a ValueError)
    and those of the steps: importers, split, decompose, llm, loading (an unreadable EXISTING).
"""

from __future__ import annotations

import datetime as _dt
import gc
import hashlib
import json
import logging
import operator
import os
import re
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

from webgym_core.cards import CARDS_DIR, size_category
from webgym_core.errors import SettingsError
from webgym_core.files import sha256_file, write_atomic
from webgym_core.settings import SettingsCommand, flat, load_settings, settings_options, settings_to_dict
from webgym_data import __version__
from webgym_data.decompose import DecomposeSettings, decompose_tasks
from webgym_data.errors import BuildError, WebgymDataError
from webgym_data.importers import discover_seeds, import_seed, seed_search, skipped_seeds
from webgym_data.llm import LLMClient, LLMSettings
from webgym_data.loading import MANIFEST, read_task_set
from webgym_data.provenance import license_metadata, seed_set_records, seed_sets_section, summary_lines
from webgym_data.rubrics import RUBRIC_MODES, RubricMode, generate_rubrics, wants_rubric
from webgym_data.schema import SCHEMA_VERSION, Task, task_arrow_schema
from webgym_data.split import (
    DedupeSettings,
    SplitSettings,
    dedupe,
    site_assignment,
    split_tasks,
)
from webgym_data.stats import compute_stats, markdown_tables, read_columns
from webgym_data.taxonomy import assign_taxonomy

__all__ = ["BuildError", "BuildReport", "BuildSettings", "build", "build_command", "render_card",
           "shard_name"]

logger = logging.getLogger(__name__)

CARD_TEMPLATE = CARDS_DIR / "tasks_card.md"
_KINDS = ("seeds", "subtasks")
_ROW_GROUP_ROWS = 10_000  # small row groups: readers can stream a shard without loading it whole
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
BUILD_ID_CHARS = 12
"""Hex digits of the content hash that name a build's shards."""


@dataclass(frozen=True)
class BuildSettings:
    """Everything one build depends on (recorded in ``manifest.json``, except secrets)."""

    out: Path | None = None
    """Folder to write (required); replaced atomically if it holds an earlier build."""
    seeds: Path | None = None
    """Folder of the seed sets you fetched (where each goes: docs/guides/data.md); every seed set found
    there is used, and the build names those it skipped."""
    importers: tuple[tuple[str, str], ...] = field(default=(), metadata={"cli": False})
    """Extra ``(importer name, file, folder or Hub id)`` sources (``--importer NAME=PATH``)."""
    extend: Path | None = None
    """An earlier build to extend: its tasks, ids and site split are kept."""
    repo_id: str | None = None
    """The Hub dataset id you will publish this build as (ORG/NAME): the card shows how to load it
    from there. Without one the card shows how to load the local folder; ``webgym-data push`` writes
    its REPO_ID into the card either way."""
    llm: LLMSettings = field(default_factory=LLMSettings)
    """OpenAI-compatible LLM for rubrics, subtask instructions and taxonomy; no URL = offline."""
    rubrics: RubricMode = "all"
    """Which tasks get an LLM rubric: all (the published method: every task but those given as
    rubrics, the seed's criteria kept as reference) or missing (only tasks without one). Offline,
    seed rubrics are kept either way."""
    dedupe: DedupeSettings = flat(DedupeSettings)
    """Duplicate instructions (``--near-threshold``)."""
    decompose: DecomposeSettings = flat(DecomposeSettings)
    """Subtasks from rubrics (``--large-threshold``, ``--max-subtasks``)."""
    split: SplitSettings = flat(SplitSettings)
    """The out-of-distribution test split (``--test-size``, ``--seed``, ...)."""
    shard_rows: int = 250_000
    """Most rows per parquet file."""
    progress: bool = True
    """Show rich progress bars on stderr."""

    def __post_init__(self) -> None:
        if self.out is None or not str(self.out).strip():
            raise BuildError("out: required: the folder to write, e.g. out/tasks")
        if self.shard_rows < 1:
            raise BuildError(f"shard_rows: must be >= 1, got {self.shard_rows}")
        if self.repo_id is not None and not _REPO_ID.match(self.repo_id):
            raise BuildError(f"repo_id: expected a Hub dataset id ORG/NAME, got {self.repo_id!r}")
        if self.rubrics not in RUBRIC_MODES:
            raise BuildError(f"rubrics: must be one of {', '.join(RUBRIC_MODES)}, got {self.rubrics!r}")

    @property
    def offline(self) -> bool:
        """No LLM endpoint: template instructions, rule taxonomy, no new rubrics."""
        return not self.llm.configured


@dataclass
class BuildReport:
    """What a build wrote."""

    out: Path
    manifest: dict[str, Any]
    train: list[Task] = field(default_factory=list, repr=False)
    test: list[Task] = field(default_factory=list, repr=False)


def shard_name(split: str, kind: str, build_id: str, index: int, count: int) -> str:
    """The file name of one shard: ``train-seeds-<build id>-00000-of-00001.parquet``."""
    return f"{split}-{kind}-{build_id}-{index:05d}-of-{count:05d}.parquet"


# ------------------------------------------------------------------------------------- writing

def _strings(values: Sequence[str]):
    """A pyarrow string array. Through polars: ~10x faster than ``pa.array`` for long texts."""
    import polars as pl  # optional: polars
    import pyarrow as pa  # optional: pyarrow

    return pl.Series(values, dtype=pl.String).to_arrow().cast(pa.string())


def _arrow_table(tasks: Sequence[Task], schema):
    """The task rows as an arrow table (same content as `Task.to_row`).

    Built column by column, the nested rubric from flat offset arrays: converting one Python dict
    per row is ~10x slower at 300k tasks.
    """
    import pyarrow as pa  # optional: pyarrow

    group_offsets, fact_offsets, criteria_offsets = [0], [0], [0]
    group_ids: list[str] = []
    descriptions: list[str] = []
    facts: list[str] = []
    criteria: list[str] = []
    for task in tasks:
        for group in task.evaluator_reference:
            group_ids.append(group.id)
            descriptions.append(group.description)
            facts.extend(group.facts)
            fact_offsets.append(len(facts))
        group_offsets.append(len(group_ids))
        criteria.extend(task.seed_criteria)
        criteria_offsets.append(len(criteria))
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
            columns[f.name] = _strings([t.difficulty_level for t in tasks])
        elif f.name == "seed_criteria":
            columns[f.name] = pa.ListArray.from_arrays(pa.array(criteria_offsets, pa.int32()),
                                                       _strings(criteria), type=f.type)
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
                 advance: Callable[[int], None]) -> list[tuple[str, str, int, int, Path]]:
    """Write one split's shards under temporary names (the build id is not known yet: it hashes
    them all); returns ``(split, kind, index, count, path)`` for each."""
    import pyarrow.parquet as pq  # optional: pyarrow

    # The arrow schema of the `datasets` features carries them in its metadata, so `load_dataset`
    # restores the declared features (what `Dataset.to_parquet` writes, without its tqdm bars).
    schema = task_arrow_schema()
    written = []
    for kind in _KINDS:
        part = [t for t in tasks if bool(t.parent_task_id) == (kind == "subtasks")]
        # An empty split gets no file (an empty parquet file breaks `load_dataset`); the card's
        # `configs:` then leaves the split out.
        if not part:
            continue
        n_shards = max(1, -(-len(part) // shard_rows))
        for shard in range(n_shards):
            chunk = part[shard * shard_rows:(shard + 1) * shard_rows]
            path = data_dir / f".unnamed-{split}-{kind}-{shard:05d}.parquet"
            pq.write_table(_arrow_table(chunk, schema), path, row_group_size=_ROW_GROUP_ROWS)
            written.append((split, kind, shard, n_shards, path))
            advance(len(chunk))
    return written


def _name_shards(written: Sequence[tuple[str, str, int, int, Path]]) -> tuple[str, str, dict[str, str]]:
    """Hash the shards, name them after the build id; returns (build id, content hash, files)."""
    digests = [(split, kind, index, count, path, "sha256:" + sha256_file(path))
               for split, kind, index, count, path in written]
    # The content hash covers each shard's place and bytes, not its name (which holds the hash).
    lines = sorted(f"{split}-{kind}-{index:05d}-of-{count:05d} {digest}"
                   for split, kind, index, count, _, digest in digests)
    content = "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()
    build_id = content.removeprefix("sha256:")[:BUILD_ID_CHARS]
    files = {}
    for split, kind, index, count, path, digest in digests:
        name = shard_name(split, kind, build_id, index, count)
        os.replace(path, path.with_name(name))
        files[f"data/{name}"] = digest
    return build_id, content, dict(sorted(files.items()))


def _configs_block(files: dict[str, str]) -> str:
    """The card's `configs:` YAML: every shard listed by name (never a pattern), per split, for the
    ``default`` config (all tasks) and ``seeds`` (no subtasks). Empty splits are left out."""
    lines = ["configs:"]
    for config, kinds in (("default", _KINDS), ("seeds", ("seeds",))):
        lines += [f"- config_name: {config}", "  data_files:"]
        for split in ("train", "test"):
            paths = [path for path in files
                     if any(Path(path).name.startswith(f"{split}-{kind}-") for kind in kinds)]
            if paths:
                lines += [f"  - split: {split}", "    path:"] + [f"    - {path}" for path in paths]
    return "\n".join(lines)


def render_card(manifest: dict[str, Any], *, template: Path = CARD_TEMPLATE,
                repo_id: str | None = None) -> str:
    """The README.md dataset card for a manifest (placeholders filled with measured figures).

    The card shows how to load the set from `repo_id` (default: the build's ``--repo-id``), or from
    its local folder when there is none; it lists the seed sets with their licences."""
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"dataset card template {template} is unreadable: {exc}") from None
    counts, settings, stats = manifest["counts"], manifest["settings"], manifest["stats"]
    inputs = "".join(f"\n   - `{i['importer']}`: {i['tasks']:,} tasks, {i['skipped']:,} rows skipped"
                     + (f" ({i['unresolved_websites']:,} without a usable website)"
                        if i["unresolved_websites"] else "")
                     for i in manifest["inputs"]) or " no new seeds"
    rubric_line = _rubric_line(counts["rubrics"], settings)
    sources = counts["decompose"]["instruction_sources"]
    instruction_line = ", ".join(f"{n:,} {k}" for k, n in sorted(sources.items())) or "none"
    taxonomy_line = "LLM with rule-based fallback" if counts["rubrics"]["llm"] else "rule-based"
    values = {
        "configs": _configs_block(manifest["files"]),
        "size_category": size_category(stats["splits"]["train"] + stats["splits"]["test"]),
        "builder": manifest["builder"],
        "n_inputs": str(len(manifest["inputs"])),
        "dataset_version": str(manifest["dataset_version"]),
        "schema_version": manifest["schema_version"],
        "content_hash": manifest["content_hash"],
        "build_id": manifest["build_id"],
        "built_at": manifest["built_at"],
        "n_train": f"{stats['splits']['train']:,}",
        "n_test": f"{stats['splits']['test']:,}",
        **_load_values(manifest, repo_id),
        "license_yaml": license_metadata(manifest.get("seed_sets", [])),
        "seed_sets_section": seed_sets_section(manifest.get("seed_sets", []),
                                               manifest.get("seeds_skipped", [])),
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


def _load_values(manifest: dict[str, Any], repo_id: str | None) -> dict[str, str]:
    """The card's `repo_hint` (what `load_dataset` is given) and the sentence before it."""
    repo_id = repo_id or manifest["settings"].get("repo_id")
    if repo_id:
        return {"repo_hint": repo_id,
                "load_intro": f"On the Hub as [`{repo_id}`](https://huggingface.co/datasets/{repo_id}):"}
    folder = str(manifest["settings"].get("out") or "path/to/folder")
    return {"repo_hint": folder,
            "load_intro": f"This build names no Hub dataset id, so load it from its folder (`{folder}` "
                          "when it was built; the folder holding this card). `webgym-data build --repo-id "
                          "ORG/NAME` or `webgym-data push FOLDER ORG/NAME` names the published id here."}


def _rubric_line(rubrics: dict[str, Any], settings: dict[str, Any]) -> str:
    """The card's sentence on where the rubrics come from."""
    mode = rubrics.get("mode", "missing")
    seed = rubrics.get("seed", 0)
    unknown = (f"{rubrics['missing']:,} seed tasks have no rubric (difficulty level `unknown` unless "
               "their seed labels it, the longest step budget; not decomposed)")
    if not rubrics["llm"]:
        asked = (" (`--rubrics all` needs an LLM endpoint: the seed rubrics were kept as imported)"
                 if mode == "all" else "")
        return (f"no LLM was used{asked}; {seed:,} seed tasks carry a rubric read from their seed's own "
                f"criteria, {unknown}.")
    model = f"`{settings['llm']['model']}`"
    if mode == "all":
        return (f"{rubrics['generated']:,} written by {model} for every task but those given as rubrics "
                f"({rubrics.get('replaced', 0):,} of them in place of a rubric read from the seed's "
                "criteria, which the prompt showed as reference and `seed_criteria` keeps); "
                f"{rubrics.get('kept_seed', 0):,} kept their seed rubric and {rubrics['failed']:,} tasks "
                f"were dropped after invalid replies; {unknown}.")
    return (f"{rubrics['generated']:,} written by {model} for tasks without one (`--rubrics missing`), "
            f"{rubrics['failed']:,} tasks dropped after invalid replies; {seed:,} seed tasks keep a rubric "
            f"read from their seed's criteria; {unknown}.")


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

def _collect_again() -> None:
    """Turn the cyclic collector on again, with every object it tracks moved to its oldest
    generation first (`gc.freeze` then `gc.unfreeze`), so the objects made while it was off are not
    all examined by the next young-generation pass."""
    gc.freeze()
    gc.unfreeze()
    gc.enable()


class _Steps:
    """One rich progress display for the whole build; each step is a bar (or a spinner).

    While the build's own steps run, Python's cyclic garbage collector is off: they make millions
    of small objects (tasks, rubric groups, strings) and hold most of them, and the collector's
    passes over that growing heap were a quarter of a 300k-task build's CPU time. Nothing the steps
    make needs it (their objects hold no reference cycles and are freed as usual when the last
    reference goes). It is on again while an LLM step runs (`paused`) and after the build; what the
    steps made is then moved to its oldest generation unexamined (`_collect_again`), as a pass over
    it would cost about a second at 300k tasks, and most of it is freed with the build's result.
    """

    def __init__(self, enabled: bool) -> None:
        # lazy: import time
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled)
        self._collecting = gc.isenabled()

    def __enter__(self) -> _Steps:
        self.progress.__enter__()
        gc.disable()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._collecting:
            _collect_again()
        self.progress.__exit__(*exc_info)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop this display while a step shows its own bar (rich allows one live display); the
        collector runs meanwhile (an LLM step can last hours)."""
        self.progress.stop()
        if self._collecting:
            _collect_again()
        yield
        gc.disable()
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
    return LLMClient(settings.llm)


def _settings_record(settings: BuildSettings) -> dict[str, Any]:
    """The settings as the manifest records them: no display switch, no secret."""
    record = settings_to_dict(settings)
    record.pop("progress", None)
    record["llm"].pop("api_key", None)
    return record


def build(settings: BuildSettings) -> BuildReport:
    """Run the whole pipeline and write `settings.out` atomically."""
    out = Path(settings.out)  # type: ignore[arg-type]  # checked by BuildSettings
    client = _llm_client(settings)
    existing_train: list[Task] = []
    existing_test: list[Task] = []
    previous: dict[str, Any] | None = None
    if settings.extend is not None:
        existing_train, existing_test, previous = read_task_set(settings.extend)
    sources, skipped = _sources(settings)

    counts: dict[str, Any] = {}
    with _Steps(settings.progress) as steps:
        tasks, inputs = _import(sources, settings, steps)
        tasks, counts["normalise"] = _normalise(tasks, [*existing_train, *existing_test])
        with steps.step("dedupe"):
            report = dedupe(tasks, settings.dedupe, existing=[*existing_train, *existing_test])
        tasks = report.tasks
        counts["dedupe"] = {"exact": report.exact, "near": report.near, "kept": len(tasks)}
        tasks, counts["rubrics"] = _rubrics(tasks, client, settings, steps)
        # The taxonomy, for the seed tasks, runs before decomposition (the issue lists it after)
        # because a subtask is classified as its parent: copying the parent's pair is the same
        # result without a second pass over every subtask.
        tasks = _taxonomy(tasks, client, settings, steps)
        counts["taxonomy"] = dict(Counter(t.domain or "(none)" for t in tasks))
        subtasks, counts["decompose"] = _decompose(tasks, client, settings, steps)
        with steps.step("split"):
            fixed = site_assignment(existing_train, existing_test) if previous is not None else None
            # When extending, the test target counts what test already holds; new tasks on sites
            # already in test go there and count too.
            target = max(0, settings.split.test_size - len(existing_test))
            split = split_tasks([*tasks, *subtasks], replace(settings.split, test_size=target), fixed=fixed)
        train = [*existing_train, *split.train]
        test = [*existing_test, *split.test]
        if not train and not test:
            raise BuildError("the seeds gave no tasks to write (see the import and dedupe counts with -v)")
        try:
            with _staging(out) as tmp:
                manifest = _write(tmp, settings, steps, train, test, inputs=inputs, counts=counts,
                                  previous=previous, skipped=skipped)
        except OSError as exc:
            raise BuildError(f"cannot write {out}: {exc}") from None
    return BuildReport(out=out, manifest=manifest, train=train, test=test)


def _sources(settings: BuildSettings) -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """The (importer, path) pairs to import: the seed sets found in `settings.seeds`, then
    `settings.importers`; and the seed sets of `settings.seeds` skipped, each with its reason."""
    sources: list[tuple[str, str]] = []
    skipped: list[dict[str, str]] = []
    if settings.seeds is not None:
        if not Path(settings.seeds).is_dir():
            raise BuildError(f"seed folder {settings.seeds} does not exist")
        found = discover_seeds(Path(settings.seeds))
        if not found and not settings.importers:
            raise BuildError(f"no seed sets found in {settings.seeds}; looked for {seed_search()}")
        sources.extend((name, str(path)) for name, path in found)
        skipped = [{"importer": name, "reason": reason}
                   for name, reason in skipped_seeds(Path(settings.seeds), found)]
        logger.info("seed sets found in %s: %s; skipped: %s", settings.seeds,
                    ", ".join(name for name, _ in found) or "none",
                    "; ".join(f"{s['importer']} ({s['reason']})" for s in skipped) or "none")
    sources.extend(settings.importers)
    if not sources:
        raise BuildError("no seed sets to import: give --seeds DIR with known seed files, "
                         "or --importer NAME=PATH")
    return sources, skipped


def _import(sources: list[tuple[str, str]], settings: BuildSettings,
            steps: _Steps) -> tuple[list[Task], list[dict[str, Any]]]:
    """Import every source; returns the tasks and the manifest's record of each input (its files
    and their hashes, relative to the seed folder when inside it)."""
    tasks: list[Task] = []
    inputs: list[dict[str, Any]] = []
    with steps.step("import", total=len(sources)) as advance:
        for name, source in sources:
            result = import_seed(name, source)
            files = {}
            for path in result.files:
                path = Path(path)
                shown = str(path)
                if settings.seeds is not None and path.is_relative_to(Path(settings.seeds)):
                    shown = str(path.relative_to(Path(settings.seeds)))
                files[shown] = "sha256:" + sha256_file(path) if path.is_file() else ""
            inputs.append({"importer": name, "source": str(source), "files": files,
                           "tasks": len(result.tasks), "skipped": len(result.skipped),
                           "unresolved_websites": result.unresolved_websites})
            tasks.extend(result.tasks)
            advance(1)
    return tasks, inputs


def _normalise(tasks: list[Task], existing: list[Task]) -> tuple[list[Task], dict[str, int]]:
    """One row per task id (the first wins); earlier builds' ids are kept as they are. Returns the
    tasks kept and the counts."""
    known = {t.task_id for t in existing}
    seen: set[str] = set()
    unique: list[Task] = []
    already = 0
    for task in tasks:
        if task.task_id in known:
            already += 1
        elif task.task_id not in seen:
            seen.add(task.task_id)
            unique.append(task)
    return unique, {"imported": len(tasks), "duplicate_ids": len(tasks) - len(unique) - already,
                    "already_in_extended": already}


def _rubrics(tasks: list[Task], client: Any, settings: BuildSettings,
             steps: _Steps) -> tuple[list[Task], dict[str, Any]]:
    """Rubrics by an LLM for the tasks the mode picks (webgym_data.rubrics); offline the seed
    rubrics stay as imported. Returns the tasks and the counts."""
    counts: dict[str, Any] = {"llm": client is not None, "mode": settings.rubrics, "generated": 0,
                              "replaced": 0, "kept_seed": 0, "failed": 0}
    asked = any(wants_rubric(t, settings.rubrics) for t in tasks)
    if client is None and asked:
        logger.warning("--rubrics %s: no LLM endpoint, so the seed rubrics are kept as imported "
                       "(give --llm-base-url and --llm-model for LLM rubrics)", settings.rubrics)
    if client is not None and asked:
        with steps.paused():
            rubric_report = generate_rubrics(tasks, client, mode=settings.rubrics,
                                             progress=settings.progress)
        tasks = rubric_report.tasks
        counts.update(generated=rubric_report.generated, replaced=rubric_report.replaced,
                      kept_seed=len(rubric_report.kept_seed), failed=len(rubric_report.failed),
                      usage=asdict(rubric_report.usage))
    counts.update(missing=sum(t.needs_rubric for t in tasks),
                  seed=sum(t.rubric_source == "seed" for t in tasks))
    return tasks, counts


def _taxonomy(tasks: list[Task], client: Any, settings: BuildSettings, steps: _Steps) -> list[Task]:
    """The seed tasks with their domain and subdomain: by rules offline, by the LLM otherwise."""
    if client is None:
        with steps.step("taxonomy", total=len(tasks)):
            return list(assign_taxonomy(tasks))
    with steps.paused():
        return list(assign_taxonomy(tasks, client, progress=settings.progress))


def _decompose(tasks: list[Task], client: Any, settings: BuildSettings,
               steps: _Steps) -> tuple[list[Task], dict[str, Any]]:
    """The tasks' subtasks and the counts (instructions by template offline, by the LLM otherwise)."""
    if client is None:
        with steps.step("decompose", total=len(tasks)) as advance:
            decomposed = decompose_tasks(tasks, settings.decompose, progress=advance)
    else:
        with steps.paused():
            decomposed = decompose_tasks(tasks, settings.decompose, client,
                                         llm_progress=settings.progress)
    counts = {
        "parents": decomposed.parents, "subtasks": len(decomposed.subtasks),
        "llm_fallbacks": len(decomposed.llm_fallbacks),
        "instruction_sources": dict(Counter(t.instruction_source for t in decomposed.subtasks)),
    }
    return decomposed.subtasks, counts


def _write(tmp: Path, settings: BuildSettings, steps: _Steps, train: list[Task], test: list[Task], *,
           inputs: list[dict[str, Any]], counts: dict[str, Any], previous: dict[str, Any] | None,
           skipped: list[dict[str, str]]) -> dict[str, Any]:
    """Write the shards, the manifest and the card into the staging folder `tmp`."""
    data_dir = tmp / "data"
    data_dir.mkdir()
    written = []
    with steps.step("write", total=len(train) + len(test)) as advance:
        for name, part in (("train", train), ("test", test)):
            written.extend(_write_split(part, data_dir, name, settings.shard_rows, advance))
        build_id, content_hash, files = _name_shards(written)
    with steps.step("stats"):
        stats = compute_stats(read_columns(tmp))
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "builder": f"webgym_data {__version__}",
        "build_id": build_id,
        "dataset_version": (int(previous.get("dataset_version", 0)) + 1) if previous else 1,
        "content_hash": content_hash,
        "built_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "extends": None if previous is None else {
            "path": str(settings.extend), "dataset_version": previous.get("dataset_version"),
            "content_hash": previous.get("content_hash")},
        "inputs": inputs,
        "seed_sets": seed_set_records(inputs, (previous or {}).get("seed_sets", [])),
        "seeds_skipped": skipped,
        "settings": _settings_record(settings),
        "counts": counts,
        "stats": stats,
        "files": files,
    }
    write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    write_atomic(tmp / "README.md", render_card(manifest))
    return manifest


# ------------------------------------------------------------------------------------- CLI

def _parse_importer(ctx, param, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    parsed = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise click.BadParameter(f"expected NAME=PATH, got {value!r}")
        parsed.append((name.strip(), path.strip()))
    return tuple(parsed)


@click.command("build", cls=SettingsCommand)
@settings_options(BuildSettings)
@click.option("--importer", "importer_specs", multiple=True, callback=_parse_importer, metavar="NAME=PATH",
              help="Import PATH (file, folder or Hub id) with importer NAME; repeatable (YAML key: "
                   "importers, a list of [NAME, PATH]).")
def build_command(config: str | None, importer_specs: tuple[tuple[str, str], ...], **flags: Any) -> None:
    """Import seed sets, add rubrics, decompose, split by site; write a Hub-ready folder.

    With an LLM (--llm-base-url, --llm-model) every task gets an LLM rubric (--rubrics all, the
    published method; the seed's own criteria go into the prompt and stay in seed_criteria), or only
    tasks without one (--rubrics missing). Without one the build is offline: seed rubrics as
    imported, template subtask instructions, rule-based taxonomy.

    --seeds is a folder holding the seed sets you fetched, one subfolder each (insta_v3/, deepshop/,
    ...; where each lives and its licence: docs/guides/data.md, "Getting the data"). The build uses
    those it finds, prints the ones it skipped and why, and lists both in the card with the seeds'
    licences. --repo-id names the Hub dataset id the card loads from (else the local folder).

    \b
    Example:
      webgym-data build --seeds seeds/ --out out/tasks
      webgym-data build --seeds seeds/ --out out/tasks --repo-id my-org/webgym-tasks
      webgym-data build --seeds seeds/ --out out/tasks \\
          --llm-base-url http://127.0.0.1:8000/v1 --llm-model Qwen/Qwen3-8B
      webgym-data build --seeds seeds/ --out out/tasks --rubrics missing \\
          --llm-base-url http://127.0.0.1:8000/v1 --llm-model Qwen/Qwen3-8B
      webgym-data build --importer generic=new_tasks.jsonl --extend out/tasks --out out/tasks-v2
      webgym-data build --config build.yaml --test-size 500
    """
    try:
        settings = load_settings(BuildSettings, config, flags, importers=importer_specs)
        report = build(settings)
    except (SettingsError, WebgymDataError) as exc:
        raise click.ClickException(str(exc)) from None
    stats = report.manifest["stats"]
    for line in summary_lines(report.manifest):
        click.echo(line)
    click.echo(f"wrote {report.out}: {stats['splits']['train']:,} train + {stats['splits']['test']:,} test "
               f"tasks on {stats['websites']['total']:,} website(s) ({report.manifest['content_hash'][:19]})")
    if stats["splits"]["test"] == 0 and settings.split.test_size > 0:
        click.echo(empty_test_split_warning(settings.split, stats["splits"]["train"]), err=True)


def empty_test_split_warning(split: SplitSettings, tasks: int) -> str:
    """Why a build with a test size came out without a test split, and what to change."""
    return (f"warning: the test split is empty. It takes whole sites, and no site fits in "
            f"{split.target(tasks):,} tasks (--test-size {split.test_size:,}, and at most "
            f"--max-test-fraction {split.max_test_fraction} of {tasks:,} tasks); give a larger "
            "--max-test-fraction or --test-size, or tasks of more sites")
