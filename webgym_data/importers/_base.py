"""What every seed importer shares: the result type, file readers and the row-to-task conversion.

An importer turns *records* (one dict per seed row, read from a local file or a Hub split) into
`Task` rows. Subclasses of `SeedImporter` say which files they read and how one record becomes one
task (`convert`); everything else (finding files, row numbers in errors, duplicate ids) is here.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from webgym_data.errors import SeedNotFoundError, TaskSourceError
from webgym_data.loading import read_table_rows
from webgym_data.schema import (
    MAX_DIFFICULTY,
    MAX_INSTRUCTION_CHARS,
    FactGroup,
    Task,
    TaskSource,
    TaskValidationError,
    instruction_too_long,
    make_task_id,
    normalise_evaluator_reference,
    normalise_website,
    text_fault,
    unencodable_field,
)

logger = logging.getLogger(__name__)

# Seeds that give a question but no site start from a search engine, as the reference system does
# for GAIA-Web (whose rows say so explicitly).
SEARCH_START_URL = "https://www.google.com/"


class Skip(Exception):  # a control-flow signal from `convert`, not an error
    """Raised by `convert` to leave a row out; the reason lands in `ImportResult.skipped`."""

    def __init__(self, reason: str, *, unresolved_website: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unresolved_website = unresolved_website


@dataclass
class ImportResult:
    """The tasks read from one seed, with the files read and what was left out (and why)."""

    tasks: list[Task] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """One reason per skipped row, naming file and row."""
    unresolved_websites: int = 0
    """Rows skipped because no start URL could be derived for them."""


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``.json`` (a list, or an object of rows), ``.jsonl``, ``.csv``, ``.parquet`` or ``.arrow``
    file.

    A malformed row raises `TaskValidationError`, a file that cannot be read at all (permissions,
    not UTF-8, not parquet) `TaskSourceError`; both name the file.
    """
    try:
        return _read_records(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TaskSourceError(f"unreadable: {exc}", file=str(path)) from None


def _read_records(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except (ValueError, RecursionError) as exc:
                    raise TaskValidationError(f"invalid JSON on line {line_number + 1}: {json_problem(exc)}",
                                              file=str(path), row=len(rows)) from None
        return rows
    if suffix == ".json":
        data = read_json_file(path)
        if isinstance(data, Mapping):
            # Some seeds store {id: row}; keep the key so the row can use it as its id.
            return [{"_key": key, **value} if isinstance(value, Mapping) else {"_key": key, "value": value}
                    for key, value in data.items()]
        if not isinstance(data, list):
            raise TaskValidationError(f"expected a JSON list of rows, got {type(data).__name__}",
                                      file=str(path))
        return data
    if suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    if suffix in (".parquet", ".arrow"):
        return read_table_rows(path)
    raise TaskValidationError(f"unsupported file type {suffix or '(none)'}; "
                              "expected .json, .jsonl, .csv, .parquet or .arrow", file=str(path))


def _number_text(value: Any) -> Any:
    """A number as its text (ids are often numbers); anything else as is. NaN and infinities are not
    text a task can use (a float column's empty cells read as NaN), so they stay floats."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(value)
    return value


def json_problem(exc: ValueError | RecursionError) -> str:
    """What is wrong with JSON text that `json.loads` refused (json raises a plain ValueError for an
    integer of more digits than Python converts, and RecursionError for deep nesting)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).split(";")[0]


def read_json_file(path: Path) -> Any:
    """The JSON value in `path`. A file that cannot be read is a `TaskSourceError`, text that is not
    JSON a `TaskValidationError`; both name the file (and the line where JSON says where)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskSourceError(f"unreadable: {exc}", file=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskValidationError(f"invalid JSON at line {exc.lineno}: {exc.msg}", file=str(path)) from None
    except (ValueError, RecursionError) as exc:
        raise TaskValidationError(f"invalid JSON: {json_problem(exc)}", file=str(path)) from None


def require_text(record: Mapping[str, Any], name: str, *, file: str, row: int) -> str:
    """The non-empty string in `record[name]` (numbers are accepted as text), whitespace collapsed."""
    value = _number_text(record.get(name))
    if not isinstance(value, str) or not value.strip():
        found = "missing" if name not in record else f"got {value!r}"[:80]
        raise TaskValidationError(f"is required and must be a non-empty string ({found})",
                                  file=file, row=row, field=name)
    return " ".join(value.split())


def text_field(record: Mapping[str, Any], name: str, *, file: str, row: int) -> str:
    """The string in `record[name]`, stripped ("" when missing or null; numbers are accepted as text).
    Any other value (an object, a list, NaN) is refused naming the field: unlike `optional_text`,
    for a column the user named, where dropping a value would change the task silently."""
    value = _number_text(record.get(name))
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TaskValidationError(f"must be a string, got {type(value).__name__} {value!r}"[:120],
                                  file=file, row=row, field=name)
    return value.strip()


def optional_text(record: Mapping[str, Any], name: str) -> str:
    value = record.get(name)
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value.strip() if isinstance(value, str) else ""


# scheme://[userinfo@]host[:port] followed by the end or a path/query/fragment. The host is a DNS
# name (labels of letters, digits, '-', '_') or a bracketed IPv6 address; checked with one regex
# because `urlsplit` is the slowest step when importing a 150k-row seed.
_SITE = re.compile(
    r"(?P<scheme>https?)://(?:[^@/?#\s]*@)?"
    r"(?P<host>[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*\.?|\[[0-9a-f:.]+\])"
    r"(?P<port>:[0-9]{1,5})?(?:[/?#]|$)",
    re.IGNORECASE,
)


def site_url(url: str) -> str:
    """Scheme and host of an http(s) URL (``https://www.x.com/a?b`` -> ``https://www.x.com/``), or ""
    when `url` is not an http(s) URL with a well-formed host."""
    match = _SITE.match(url.strip())
    if not match:
        return ""
    return f"{match['scheme'].lower()}://{match['host'].lower()}{match['port'] or ''}/"


def metadata_json(metadata: Mapping[str, Any] | None) -> str:
    """`source.metadata` text: sorted JSON, values JSON cannot hold (dates, arrays) written as text."""
    return json.dumps(dict(metadata or {}), sort_keys=True, ensure_ascii=False, default=str)


class SeedImporter:
    """Base of the registered importers (see `webgym_data.importers.Importer` for the contract)."""

    name: ClassVar[str] = ""
    benchmark_name: ClassVar[str] = ""
    hub_id: ClassVar[str | None] = None
    """Hugging Face dataset id holding the full seed (loaded only when online)."""
    license_id: ClassVar[str] = "unknown"
    """The seed's licence as a Hub licence id (``mit``, ``cc-by-4.0``, ...; ``unknown`` when not
    known): the task card lists it in its ``license:`` metadata and its licence table."""
    license_note: ClassVar[str] = ""
    """What else the seed's owners ask of its users (the card prints it beside the licence)."""
    home_url: ClassVar[str] = ""
    """Where the seed lives when it is not a Hub dataset: a download URL or a repository."""
    hub_configs: ClassVar[tuple[str, ...]] = ()
    """Configs to load from `hub_id` (empty: the default config)."""
    default_paths: ClassVar[tuple[str, ...]] = ()
    """Files or folders relative to a seeds folder, ours and the upstream repository's name (the
    first that exists, holding files the importer reads, is the seed)."""
    upstream_files: ClassVar[tuple[str, ...]] = ()
    """The upstream release's own file names (glob patterns), found directly in a seeds folder when
    no `default_paths` entry is there (``deepshop_test.jsonl`` dropped next to the other seeds)."""
    folder_files: ClassVar[tuple[str, ...]] = ()
    """File names (glob patterns) read, in this order, when `read` is given a folder."""

    @property
    def location(self) -> str:
        """Where the seed lives: its Hub dataset page, else `home_url` (empty when neither)."""
        return f"https://huggingface.co/datasets/{self.hub_id}" if self.hub_id else self.home_url

    def read(self, path: Path) -> ImportResult:
        """Read a seed file, or every known file of a seed folder."""
        path = Path(path)
        if not path.exists():
            raise SeedNotFoundError(f"{path}: no such file or folder (importer '{self.name}')")
        files = self.files_in(path) if path.is_dir() else [path]
        result = ImportResult(files=files)
        seen: dict[str, str] = {}
        for file in files:
            self.read_file(result, file, seen=seen)
        logger.info("%s: %d tasks from %d files, %d skipped", self.name, len(result.tasks), len(files),
                    len(result.skipped))
        return result

    def files_in(self, folder: Path) -> list[Path]:
        files: list[Path] = []
        for pattern in self.folder_files:
            files.extend(sorted(p for p in folder.glob(pattern) if p.is_file() and p not in files))
        if not files:
            raise SeedNotFoundError(f"{folder}: holds none of the files importer '{self.name}' reads "
                                    f"({', '.join(self.folder_files) or 'none declared'})")
        return files

    def read_file(self, result: ImportResult, file: Path, *, seen: dict[str, str]) -> None:
        """Read one seed file into `result` (`seen`: the task ids read so far, and where). Row by
        row here; the generic importer reads a JSONL file by columns."""
        self.read_into(result, read_records(file), file=str(file), seen=seen)

    def read_into(self, result: ImportResult, records: Iterable[Any], *, file: str,
                  seen: dict[str, str] | None = None) -> None:
        """Convert `records` (rows of `file`, numbered from 0) and append them to `result`."""
        seen = {} if seen is None else seen
        for row, record in enumerate(self.prepare(records, file=file)):
            self.add_record(result, record, file=file, row=row, seen=seen)

    def add_record(self, result: ImportResult, record: Any, *, file: str, row: int,
                   seen: dict[str, str]) -> None:
        """Convert row `row` of `file` and add its task to `result` (or its reason to skip it)."""
        if not isinstance(record, Mapping):
            raise TaskValidationError(f"expected an object, got {type(record).__name__}", file=file, row=row)
        try:
            task = self.convert(record, file=file, row=row)
        except Skip as skip:
            result.skipped.append(f"{file}, row {row}: {skip.reason}")
            result.unresolved_websites += int(skip.unresolved_website)
            return
        add_task(result, task, file=file, row=row, seen=seen)

    def prepare(self, records: Iterable[Any], *, file: str) -> Iterator[Any]:
        """Hook for importers that need a whole file at once (joins with a side file)."""
        yield from records

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        raise NotImplementedError

    # Shared construction, so that every importer validates and normalises the same way. Builds the
    # `Task` directly (not through `Task.from_row`): the importer has already checked its fields, and
    # a second validation pass doubles the cost of a 150k-row seed.
    def make_task(self, *, file: str, row: int, task_name: str, website: str, source_id: str = "",
                  metadata: Mapping[str, Any] | None = None, website_field: str = "website",
                  evaluator_reference: Any = (), definite_answer: str = "", difficulty: Any = 0,
                  start_url: str = "", domain: str = "", subdomain: str = "",
                  seed_criteria: Iterable[str] = (), rubric_source: str = "",
                  seed_difficulty_level: str = "", task_name_field: str = "task_name") -> Task:
        """A validated `Task`; its id hashes the seed's own id when it has one, else site + text.

        `rubric_source` is ``"seed"`` when the importer made `evaluator_reference` from the seed's
        own criteria (``--rubrics all`` then asks an LLM for a new one); unset, a rubric is
        ``"given"``. An instruction over `MAX_INSTRUCTION_CHARS` skips the row (a value fault).
        """
        website = normalise_website(website)
        if not site_url(website):
            # A value, not a structural fault (seen in real seeds: "a.org and b.net"): skip and count it.
            raise Skip(f"field '{website_field}': {website!r} is not an http(s) URL or host name",
                       unresolved_website=True)
        task_name = " ".join(task_name.split())
        if not task_name:
            raise TaskValidationError("is required and must be a non-empty string", file=file, row=row,
                                      field="task_name")
        if len(task_name) > MAX_INSTRUCTION_CHARS:
            raise Skip(f"field '{task_name_field}' {instruction_too_long(task_name)}")
        if not (isinstance(evaluator_reference, tuple | list)
                and all(isinstance(g, FactGroup) for g in evaluator_reference)):
            try:
                evaluator_reference = normalise_evaluator_reference(evaluator_reference)
            except ValueError as exc:
                raise TaskValidationError(str(exc), file=file, row=row, field="evaluator_reference") from None
        if (isinstance(difficulty, bool) or not isinstance(difficulty, int)
                or not 0 <= difficulty <= MAX_DIFFICULTY):
            if isinstance(difficulty, int) and difficulty.bit_length() > 64:  # too long to write out
                shown = f"an integer of {difficulty.bit_length()} bits"
            else:
                shown = repr(difficulty)[:80]
            raise TaskValidationError(f"must be a non-negative integer (at most {MAX_DIFFICULTY}), "
                                      f"got {shown}", file=file, row=row, field="difficulty")
        try:
            task_id = (make_task_id(self.benchmark_name, "id", source_id) if source_id
                       else make_task_id(self.benchmark_name, website, task_name))
        except UnicodeEncodeError:  # text UTF-8 cannot encode: refused below, naming its field
            task_id = ""
        task = Task(
            task_id=task_id, task_name=task_name, website=website, benchmark_name=self.benchmark_name,
            start_url=normalise_website(start_url) or website, domain=domain.strip(),
            subdomain=subdomain.strip(), evaluator_reference=tuple(evaluator_reference or ()),
            definite_answer=definite_answer.strip(), difficulty=difficulty,
            source=TaskSource(importer=self.name, file=display_name(file), row=row,
                              metadata=metadata_json(metadata)),
            seed_criteria=tuple(dict.fromkeys(" ".join(c.split()) for c in seed_criteria if c.strip())),
            rubric_source=rubric_source, seed_difficulty_level=seed_difficulty_level,
        )
        fault = unencodable_field(task)
        if fault is None and not task_id:
            fault = ("task_id", text_fault(source_id))  # the seed's own id
        if fault is not None:
            name, reason = fault
            if name == "source.metadata":  # name the seed's own column
                name = next((str(key) for key, value in (metadata or {}).items()
                             if text_fault(str(key)) or text_fault(json.dumps(value, ensure_ascii=False,
                                                                              default=str))), name)
            raise TaskValidationError(reason, file=file, row=row, field=name)
        return task


def add_task(result: ImportResult, task: Task, *, file: str, row: int, seen: dict[str, str]) -> None:
    """Add `task` (row `row` of `file`) to `result`, or skip it when its id was `seen` before."""
    where = seen.get(task.task_id)
    if where is not None:
        result.skipped.append(f"{file}, row {row}: duplicate task_id {task.task_id} (first at {where})")
        return
    seen[task.task_id] = f"{file}, row {row}"
    result.tasks.append(task)


@functools.lru_cache(maxsize=256)
def display_name(file: str) -> str:
    """What `source.file` records: a local file's name (not the machine's path), or a Hub label."""
    return file if "://" in file else Path(file).name
