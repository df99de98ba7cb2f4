"""Seed importers: turn each seed task set (a local file or folder, or a Hub dataset) into `Task` rows.

One module per seed, registered by name::

    name             benchmark_name   default path in a seeds folder           Hub dataset id
    insta_v3         insta-v3         insta_v3/ (*.parquet)                    data-for-agents/insta-150k-v3
    pae_webvoyager   pae-webvoyager   pae_webvoyager/ (*.jsonl)                yifeizhou/pae-data
    agentsynth_web   agentsynth-web   agentsynth_web/ (2 jsonl files)          sunblaze-ucb/AgentSynth
    browsecomp       browsecomp       browsecomp/ (browse_comp*.csv)           -
    travelplanner    travelplanner    travelplanner/ (*_queries.jsonl)         osunlp/TravelPlanner
    mind2web_live    mind2web-live    mind2web_live/ (*.json)                  iMeanAI/Mind2Web-Live
    online_mind2web  online-mind2web  online_mind2web/ (Online_Mind2Web*.json) osunlp/Online-Mind2Web
    deepshop         deepshop         deepshop/ (deepshop*.jsonl)              DeepShop/DeepShop
    mind2web2        mind2web-2       mind2web2/ (dev_set_tasks.jsonl + trees) osunlp/Mind2Web-2
    gaia_web         gaia-web         gaia_web/ (GAIA_web*.jsonl)              -
    webvoyager       webvoyager       (explicit path) WebVoyager_data.jsonl + reference_answer.json
    generic          generic          (explicit path) JSONL/JSON/CSV/parquet/Arrow or a save_to_disk
                                      folder, with a column mapping
    miniwob          miniwob          (explicit path) rows of MiniWoB++ task + seed(s)  -
    local_sites      webgym-shop ...  local_sites/ (*.jsonl): rows `webgym-rollout site-tasks` writes

Where each seed lives, its licence and how to fetch it: ``docs/guides/data.md`` (each importer's
`license_id`, `license_note` and `location` hold the same facts for the task card).

A seeds folder (``webgym-data build --seeds DIR``) may also use the upstream names: the upstream
repository's folder name (``DeepShop/``, ``Online-Mind2Web/``, ``Mind2Web-Live/``, ...) or the upstream
files themselves directly in DIR (``deepshop_test.jsonl``, ``Online_Mind2Web.json``,
``mind2web-live_test_20241024.json``, ``GAIA_web.jsonl``, ``browse_comp_test_set.csv``, ...); see
`discover_seeds` and `seed_search`.

``import_seed(name, source)`` reads a local path, or, when `source` is not a local path and looks
like ``org/name``, loads that Hub dataset with ``datasets.load_dataset`` (online only).

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     ├── TaskValidationError   a malformed row (names file, row and field)
     │    └── TaskSourceError  (webgym_data.loading) a seed file that cannot be read at all
     ├── UnknownImporterError  lists the known importer names
     ├── SeedNotFoundError     (also a FileNotFoundError) names the missing path
     ├── HubImportError        a Hub dataset could not be loaded (offline, gated, missing)
     ├── MappingError          a generic-importer mapping names no task field
     └── ImportSettingsError   ``webgym-data import`` settings that cannot work (also a ValueError)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_options
from webgym_data.errors import (
    HubImportError,
    ImportSettingsError,
    MappingError,
    SeedNotFoundError,
    UnknownImporterError,
    WebgymDataError,
)
from webgym_data.importers._base import ImportResult, SeedImporter
from webgym_data.importers.agentsynth_web import AgentSynthWebImporter
from webgym_data.importers.browsecomp import BrowseCompImporter
from webgym_data.importers.deepshop import DeepShopImporter
from webgym_data.importers.gaia_web import GaiaWebImporter
from webgym_data.importers.generic import GenericImporter
from webgym_data.importers.insta_v3 import InstaV3Importer
from webgym_data.importers.local_sites import LocalSitesImporter
from webgym_data.importers.mind2web2 import Mind2Web2Importer
from webgym_data.importers.mind2web_live import Mind2WebLiveImporter
from webgym_data.importers.miniwob import MiniWobImporter
from webgym_data.importers.online_mind2web import OnlineMind2WebImporter
from webgym_data.importers.pae_webvoyager import PaeWebVoyagerImporter
from webgym_data.importers.travelplanner import TravelPlannerImporter
from webgym_data.importers.webvoyager import WebVoyagerImporter
from webgym_data.loading import write_tasks

__all__ = [
    "LOCAL_SEEDS",
    "SEED_IMPORTERS",
    "HubImportError",
    "ImportResult",
    "ImportSettings",
    "ImportSettingsError",
    "Importer",
    "MappingError",
    "SeedNotFoundError",
    "UnknownImporterError",
    "available_importers",
    "discover_seeds",
    "get_importer",
    "import_command",
    "import_seed",
    "run_import",
    "seed_search",
    "skipped_seeds",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class Importer(Protocol):
    """What every registered importer offers (see the table in the module docstring)."""

    name: str
    benchmark_name: str
    hub_id: str | None
    default_paths: tuple[str, ...]
    license_id: str
    license_note: str

    @property
    def location(self) -> str: ...

    def read(self, path: Path) -> ImportResult: ...


_REGISTRY: dict[str, SeedImporter] = {importer.name: importer for importer in (
    InstaV3Importer(), PaeWebVoyagerImporter(), AgentSynthWebImporter(), BrowseCompImporter(),
    TravelPlannerImporter(), Mind2WebLiveImporter(), OnlineMind2WebImporter(), DeepShopImporter(),
    Mind2Web2Importer(), GaiaWebImporter(), WebVoyagerImporter(), GenericImporter(), MiniWobImporter(),
    LocalSitesImporter(),
)}

SEED_IMPORTERS = ("insta_v3", "pae_webvoyager", "agentsynth_web", "browsecomp", "travelplanner",
                  "mind2web_live", "online_mind2web", "deepshop", "mind2web2", "gaia_web")
"""The ten WebGym seed task sets, in the order of the published statistics table."""
LOCAL_SEEDS = ("local_sites",)
"""Seed sets of the toolkit's own (the local sites' generated tasks), found in a seeds folder too."""

# "org/name" (Hub repo id syntax), but not something that is plainly a data file path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".arrow")


def available_importers() -> list[str]:
    """The registered importer names, sorted."""
    return sorted(_REGISTRY)


def get_importer(name: str) -> Importer:
    """The importer registered as `name`; `UnknownImporterError` lists the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownImporterError(
            f"unknown importer {name!r}; known importers: {', '.join(available_importers())}") from None


def discover_seeds(seeds_dir: Path) -> list[tuple[str, Path]]:
    """``(importer name, path)`` for each seed set found in `seeds_dir`, in `SEED_IMPORTERS` order
    (then `LOCAL_SEEDS`).

    A seed is found by the first of its importer's `default_paths` (our folder name, the upstream
    repository's) that holds files the importer reads (``seeds/insta_v3`` with only its SOURCE.txt
    is left out), else by its upstream file names lying directly in `seeds_dir` (one entry per file:
    ``deepshop_test.jsonl``, ``Online_Mind2Web.json``, ...). `seed_search` says what is looked for.
    """
    found = []
    for name in (*SEED_IMPORTERS, *LOCAL_SEEDS):
        importer = _REGISTRY[name]
        paths = [path for path in (Path(seeds_dir) / relative for relative in importer.default_paths)
                 if path.is_file() or (path.is_dir() and _holds_seed_files(importer, path))][:1]
        if not paths:
            paths = sorted({path for pattern in importer.upstream_files
                            for path in Path(seeds_dir).glob(pattern) if path.is_file()})
        found.extend((name, path) for path in paths)
    return found


def skipped_seeds(seeds_dir: Path, found: list[tuple[str, Path]] | None = None) -> list[tuple[str, str]]:
    """``(importer name, reason)`` for each of the ten `SEED_IMPORTERS` not in `found` (default:
    `discover_seeds(seeds_dir)`): its folder is missing, or holds none of the files it reads."""
    found_names = {name for name, _ in (discover_seeds(seeds_dir) if found is None else found)}
    skipped = []
    for name in SEED_IMPORTERS:
        if name in found_names:
            continue
        importer = _REGISTRY[name]
        folders = [relative for relative in importer.default_paths if (Path(seeds_dir) / relative).is_dir()]
        if folders:
            reason = f"{folders[0]}/ holds none of {', '.join(importer.folder_files)}"
        else:
            reason = f"no {' or '.join(f'{path}/' for path in importer.default_paths)} folder"
            if importer.upstream_files:
                reason += f" and no {' or '.join(importer.upstream_files)}"
        skipped.append((name, reason))
    return skipped


def _holds_seed_files(importer: SeedImporter, folder: Path) -> bool:
    try:
        importer.files_in(folder)
    except SeedNotFoundError:
        return False
    return True


def seed_search() -> str:
    """What `discover_seeds` looks for, one clause per seed set (for an error that finds none)."""
    clauses = []
    for name in (*SEED_IMPORTERS, *LOCAL_SEEDS):
        importer = _REGISTRY[name]
        folders = " or ".join(f"{path}/" for path in importer.default_paths)
        clause = f"{name}: {folders} (with {', '.join(importer.folder_files)})"
        if importer.upstream_files:
            clause += f" or {', '.join(importer.upstream_files)} in the folder itself"
        clauses.append(clause)
    return "; ".join(clauses)


def _looks_like_hub_id(source: str) -> bool:
    return bool(_HUB_ID.match(source)) and not source.lower().endswith(_DATA_SUFFIXES)


def import_seed(name: str, source: str | Path, *, mapping: Mapping[str, str] | None = None,
                benchmark_name: str | None = None, revision: str | None = None) -> ImportResult:
    """Import seed `name` from a local file/folder or, when `source` is not a local path, a Hub id.

    `mapping` and `benchmark_name` apply to the ``generic`` importer only; `revision` (a branch,
    tag or commit) to a Hub id only.
    """
    importer = get_importer(name)
    if mapping or benchmark_name:
        if name != "generic":
            raise MappingError(f"a column mapping or benchmark name applies to the 'generic' importer only, "
                               f"not {name!r}")
        importer = GenericImporter(mapping, benchmark_name=benchmark_name)
    path = Path(source)
    if path.exists() or isinstance(source, Path) or not _looks_like_hub_id(str(source)):
        return importer.read(path)
    return _import_from_hub(importer, str(source), revision=revision)


def _import_from_hub(importer: SeedImporter, repo_id: str, *, revision: str | None) -> ImportResult:
    import datasets  # optional: datasets

    result = ImportResult()
    seen: dict[str, str] = {}
    for config in importer.hub_configs or (None,):
        where = f"{repo_id}" + (f" (config {config})" if config else "")
        try:
            loaded = datasets.load_dataset(repo_id, config, revision=revision)
        except Exception as exc:  # any failure of the Hub client is one typed error for the caller
            raise HubImportError(
                f"{repo_id}: not a local path, and loading it as a Hub dataset for importer "
                f"'{importer.name}' failed: {type(exc).__name__}: {exc}") from exc
        splits = loaded.items() if isinstance(loaded, Mapping) else [("train", loaded)]
        for split, dataset in splits:
            label = f"hf://datasets/{repo_id}/{config + '/' if config else ''}{split}"
            logger.info("importing %d rows from %s", len(dataset), where)
            importer.read_into(result, dataset, file=label, seen=seen)
    return result


@dataclass
class ImportSettings:
    """Settings of ``webgym-data import``."""

    name: str = field(default="", metadata={"cli": False})
    """Registered importer name (see ``available_importers()``; the NAME argument)."""
    source: str = field(default="", metadata={"cli": False})
    """A local seed file or folder, or a Hub dataset id ``org/name`` (the SOURCE argument)."""
    out: Path | None = None
    """The JSONL file to write, one task row per line (required; written whole or not at all)."""
    mapping: dict[str, str] = field(default_factory=dict)
    """For the generic importer: read a task field from a column, as FIELD=COLUMN (task_name=question)."""
    benchmark_name: str | None = None
    """For the generic importer: the benchmark_name written to every row (default: generic)."""
    revision: str | None = None
    """For a Hub id: the branch, tag or commit to load (default: the Hub's default branch)."""

    def __post_init__(self) -> None:
        for name in ("name", "source"):
            if not str(getattr(self, name)).strip():
                raise ImportSettingsError(f"{name}: required")
        if self.out is None:
            raise ImportSettingsError("out: required: the JSONL file to write")


def run_import(settings: ImportSettings) -> ImportResult:
    """Import one seed and write its task rows to `settings.out`."""
    result = import_seed(settings.name, settings.source, mapping=settings.mapping or None,
                         benchmark_name=settings.benchmark_name, revision=settings.revision)
    write_tasks(result.tasks, settings.out)  # type: ignore[arg-type]  # checked by ImportSettings
    return result


@click.command("import", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name")
@click.argument("source")
@settings_options(ImportSettings)
def import_command(name: str, source: str, config: str | None, **flags: Any) -> None:
    """Import seed set NAME from SOURCE (a file, a folder, or a Hub id org/name) to task rows.

    Rows are validated (an error names the file, row and field) and written as JSONL. Importers:
    insta_v3, pae_webvoyager, agentsynth_web, browsecomp, travelplanner, mind2web_live,
    online_mind2web, deepshop, mind2web2, gaia_web, webvoyager, generic, miniwob.

    \b
    Example:
      webgym-data import online_mind2web seeds/online_mind2web --out out/om2w.jsonl
      webgym-data import mind2web_live seeds/mind2web_live --out out/m2wl.jsonl
      webgym-data import generic my_tasks.csv --out out/mine.jsonl \\
          --mapping task_name=question --mapping website=url --benchmark-name my-set
      webgym-data import mind2web_live iMeanAI/Mind2Web-Live --revision main --out out/m2wl.jsonl
    """
    from rich.console import Console  # lazy: import time

    console = Console(stderr=True)
    try:
        settings = load_settings(ImportSettings, config, flags, name=name, source=source)
        with console.status(f"importing {name} from {source}"):
            result = run_import(settings)
    except (SettingsError, WebgymDataError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from exc
    click.echo(f"{name}: {len(result.tasks)} tasks, {len(result.skipped)} skipped, "
               f"{result.unresolved_websites} unresolved websites -> {settings.out}")
    for reason in result.skipped[:10]:
        click.echo(f"  skipped: {reason}")
    if len(result.skipped) > 10:
        click.echo(f"  ... and {len(result.skipped) - 10} more skipped")
