"""Task files: the one reader of tasks for the whole toolkit, and the JSONL writer.

``load_tasks(source, split="train", limit=None, skip_invalid=False)`` reads validated `Task` rows from

- a JSONL file (one task row per line; ``.json`` holding a list of rows works too);
- a parquet file of task rows, or an Arrow file of them (what ``datasets`` writes);
- a folder written by ``datasets``' ``save_to_disk`` (a ``Dataset``: its ``state.json`` lists the
  Arrow files, which are its train split unless it names another; a ``DatasetDict``: one such
  folder per split, named in ``dataset_dict.json``);
- a folder written by ``webgym-data build``: the shards its ``manifest.json`` lists for `split`
  (``data/<split>-<seeds|subtasks>-<build id>-NNNNN-of-NNNNN.parquet``, or the older
  ``data/<split>-<seeds|subtasks>-NNNNN-of-NNNNN.parquet`` of builds made before the build id);
- any other folder of task files: ``data/<split>-*.parquet``, else ``<split>-*.parquet``,
  ``<split>.parquet`` or ``<split>*.jsonl`` anywhere below it; a folder whose files name no split
  at all is its own train split.

``split=None`` reads every split of a folder; a split that a build left empty gives no tasks. A
task id that appears twice is refused (a rollout identifies an episode by task id and attempt),
and every error names the file, row and field.

Invalid rows. Every row is validated before anything is returned, and all invalid rows are
reported at once: one `InvalidTasksError` whose message lists them (the first
`MAX_LISTED_ERRORS`, then a count) and whose ``errors`` holds each one (a `TaskValidationError`
with file, row, field and reason). With ``skip_invalid=True`` the invalid rows are left out
instead and come back with the tasks: `load_tasks` returns a `TaskList`, a list of the valid tasks
whose ``invalid`` attribute holds the skipped rows' errors (``error.to_dict()`` for a report)::

    tasks = load_tasks("tasks.jsonl", skip_invalid=True)
    for error in tasks.invalid:
        print(error.file, error.row, error.field, error.reason)

A row is invalid when it is not JSON, fails `Task.from_row` (a missing instruction, a bad rubric,
an instruction over `webgym_data.schema.MAX_INSTRUCTION_CHARS`, ...) or repeats a task id (the
first row with the id is kept). With a `limit`, reading stops at that many valid tasks, so rows
after them are not looked at. A source that cannot be read at all still raises `TaskSourceError`.

`read_task_set` gives both splits of a build with its manifest; `task_shards` lists a build's
parquet files per split (what ``stats``, ``diff`` and ``push`` read).

Nothing here goes through ``datasets.load_dataset``: its cache is keyed by the folder's name and
the card's file list, so reading the parquet files directly is both faster and always this
folder's rows.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     └── TaskValidationError          a bad row (names the file, row and field)
          ├── InvalidTasksError       every bad row of a source at once (`errors`: one per row)
          └── TaskSourceError         the file or folder itself: missing, unreadable, of an unknown
               │                      type, or without tasks of the split
               └── NotATaskSetError   a folder that is not a built task set (also a FileNotFoundError)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from webgym_core.files import TMP_PREFIX, write_atomic
from webgym_data.errors import (
    MAX_LISTED_ERRORS,
    InvalidTasksError,
    NotATaskSetError,
    TaskSourceError,
    TaskValidationError,
)
from webgym_data.schema import Task

__all__ = ["MANIFEST", "MAX_LISTED_ERRORS", "SPLITS", "InvalidTasksError", "NotATaskSetError", "TaskList",
           "TaskSourceError", "load_tasks", "read_manifest", "read_table_rows", "read_task_set",
           "saved_dataset_files", "task_shards", "write_tasks"]

MANIFEST = "manifest.json"
"""The file that makes a folder a webgym-data build (versions, settings, counts, shard list)."""
SPLITS = ("train", "test")
"""The splits a build writes."""


class TaskList(list):
    """What `load_tasks` returns: the valid tasks, in file order (a plain list of `Task`), and in
    `invalid` the errors of the rows it left out with ``skip_invalid=True`` (empty otherwise)."""

    def __init__(self, tasks: Iterable[Task] = (), invalid: Iterable[TaskValidationError] = ()) -> None:
        super().__init__(tasks)
        self.invalid: tuple[TaskValidationError, ...] = tuple(invalid)


# ------------------------------------------------------------------------------------- builds

def read_manifest(folder: Path | str) -> dict[str, Any] | None:
    """The ``manifest.json`` of a build, or None when `folder` holds none (raises for a bad one)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
        raise NotATaskSetError(f"unreadable: {exc}", file=str(path)) from None
    if not isinstance(manifest, dict):
        raise NotATaskSetError("expected a JSON object", file=str(path))
    return manifest


def _split_of(name: str) -> str:
    """The split a file name starts with: ``train-seeds-....parquet`` and ``train.jsonl`` -> ``train``."""
    return name.split("-", 1)[0].split(".", 1)[0]


def _is_build(manifest: dict[str, Any] | None) -> bool:
    # A rollout folder has a manifest too; a build's lists its files.
    return manifest is not None and isinstance(manifest.get("files"), dict)


def task_shards(folder: Path | str) -> dict[str, list[Path]]:
    """``split -> parquet files`` of a built folder, train and test always present (maybe empty).

    A build's manifest lists its files (``files``: ``data/<name> -> sha256``): exactly those are
    read, so a stray parquet file copied into ``data/`` is never mixed in. A folder without a
    manifest is read by name, ``data/<split>-*.parquet``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise NotATaskSetError(f"{folder}: no such folder")
    manifest = read_manifest(folder)
    shards: dict[str, list[Path]] = {split: [] for split in SPLITS}
    if _is_build(manifest):
        for relative in sorted(manifest["files"]):
            path = folder / relative
            if not path.is_file():
                raise NotATaskSetError(f"listed in {MANIFEST} but missing", file=str(path))
            if path.suffix == ".parquet":
                shards.setdefault(_split_of(path.name), []).append(path)
    else:
        for split in SPLITS:
            shards[split] = sorted(p for p in (folder / "data").glob(f"{split}-*.parquet") if p.is_file())
    if not any(shards.values()):
        raise NotATaskSetError(f"{folder}: not a built task set (no data/train-*.parquet or "
                               "data/test-*.parquet)")
    return shards


def read_task_set(folder: Path | str) -> tuple[list[Task], list[Task], dict[str, Any]]:
    """``(train, test, manifest)`` of a folder written by ``webgym-data build``."""
    folder = Path(folder)
    manifest = read_manifest(folder) if folder.is_dir() else None
    if manifest is None:
        raise NotATaskSetError(f"{folder}: not a webgym-data build (no {MANIFEST})")
    shards = task_shards(folder)
    train = list(_read_files(shards["train"], limit=None, source=str(folder)))
    test = list(_read_files(shards["test"], limit=None, source=str(folder)))
    return train, test, manifest


# ------------------------------------------------------------------------------------- any source

def _visible(folder: Path, pattern: str) -> list[Path]:
    """The files of `folder` matching `pattern`, without hidden or temporary ones (a writer's
    half-written file starts with '.'), sorted."""
    return sorted(p for p in folder.glob(pattern) if p.is_file()
                  and not any(part.startswith((".", TMP_PREFIX)) for part in p.relative_to(folder).parts))


def _json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
        raise TaskSourceError(f"unreadable: {exc}", file=str(path)) from None
    if not isinstance(value, dict):
        raise TaskSourceError(f"expected a JSON object, got {type(value).__name__}", file=str(path))
    return value


def saved_dataset_files(folder: Path | str, split: str | None = None) -> list[Path] | None:
    """The Arrow files of a folder written by ``datasets``' ``save_to_disk`` for `split` (None: every
    split), or None when `folder` is not one. A saved ``Dataset`` (``state.json``) is one split: the one
    its state names, else train; a ``DatasetDict`` (``dataset_dict.json``) has a folder per split.
    Raises `TaskSourceError` naming the file for a folder whose JSON files are broken or that lacks
    the asked split or a listed file."""
    folder = Path(folder)
    if (folder / "dataset_dict.json").is_file():
        path = folder / "dataset_dict.json"
        splits = _json_object(path).get("splits")
        if not isinstance(splits, list) or not all(_plain_name(name) for name in splits):
            raise TaskSourceError(f"'splits' must be a list of split names, got {splits!r}"[:200],
                                  file=str(path))
        if split is not None and split not in splits:
            raise TaskSourceError(f"has no '{split}' split (splits: {', '.join(splits)})", file=str(folder))
        files = []
        for name in (splits if split is None else [split]):
            found = saved_dataset_files(folder / name)
            if found is None:
                raise TaskSourceError(f"lists split '{name}', but {folder / name} holds no state.json",
                                      file=str(path))
            files.extend(found)
        return files
    path = folder / "state.json"
    if not path.is_file():
        return None
    state = _json_object(path)
    own = state.get("_split") or "train"
    if split is not None and split != own:
        raise TaskSourceError(f"a saved dataset of the '{own}' split only; asked for '{split}'",
                              file=str(folder))
    entries = state.get("_data_files")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and _plain_name(e.get("filename"))
                                                for e in entries):
        raise TaskSourceError("'_data_files' must be a list of {\"filename\": ...} objects", file=str(path))
    files = [folder / entry["filename"] for entry in entries]
    for file in files:
        if not file.is_file():
            raise TaskSourceError(f"listed in {path.name} but missing", file=str(file))
    return files


def _plain_name(name: Any) -> bool:
    """`name` is a file name inside its folder (no path separators, not "." or "..")."""
    return (isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name
            and "\\" not in name)


def read_table_rows(path: Path | str) -> list[dict[str, Any]]:
    """The rows of a parquet file, or of an Arrow file (stream or file format, as ``datasets`` and
    pyarrow write them), as dicts. Raises `TaskSourceError` naming the file when it cannot be read
    (missing, truncated, not that format)."""
    import pyarrow as pa  # optional: pyarrow
    import pyarrow.parquet as pq  # optional: pyarrow

    path = Path(path)
    try:
        if path.suffix == ".arrow":
            try:
                with pa.OSFile(str(path)) as source:
                    table = pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                with pa.OSFile(str(path)) as source:
                    table = pa.ipc.open_file(source).read_all()
        else:
            table = pq.read_table(path)
        return table.to_pylist()
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        kind = "Arrow" if path.suffix == ".arrow" else "parquet"
        raise TaskSourceError(f"not a readable {kind} file: {exc}", file=str(path)) from None


def _folder_files(folder: Path, split: str | None) -> list[Path]:
    saved = saved_dataset_files(folder, split)
    if saved is not None:
        return saved
    if _is_build(read_manifest(folder)):
        shards = task_shards(folder)
        if split is None:
            return [path for files in shards.values() for path in files]
        if split not in shards:
            raise TaskSourceError(f"has no '{split}' split (splits: {', '.join(shards)})", file=str(folder))
        return shards[split]  # empty when the build's split is
    files = [p for p in _visible(folder, "**/*") if p.suffix in (".parquet", ".jsonl")]
    if split is None:
        found = files
    else:
        found = []
        for pattern in (f"data/{split}-*.parquet", f"**/{split}-*.parquet", f"**/{split}.parquet",
                        f"**/{split}*.jsonl"):
            found = _visible(folder, pattern)
            if found:
                break
        if not found and split == "train" and not any(_split_of(p.name) in SPLITS for p in files):
            # Plain task files (tasks.jsonl, part-0.parquet) that name no split: the train split.
            found = files
    if not found:
        wanted = "parquet or JSONL task files" if split is None else \
            f"'{split}' task shards (data/{split}-*.parquet)"
        if split is not None and not files:
            wanted += " and no parquet or JSONL files"
        raise TaskSourceError(f"holds no {wanted}", file=str(folder))
    return found


def _rows(path: Path) -> Iterator[tuple[int, int | None, Any]]:
    """``(row number, line number or None, row)`` of a task file: a JSONL row's number is its line's
    index (from 0) and its line number the one an editor shows (from 1); parquet and JSON-list rows
    have no line. A line that is not JSON gives its `TaskValidationError` as the row (a bad row,
    reported with the others)."""
    if path.suffix in (".parquet", ".arrow"):
        for number, row in enumerate(read_table_rows(path)):
            yield number, None, row
        return
    if path.suffix not in (".jsonl", ".json"):
        raise TaskSourceError("expected a .jsonl, .json, .parquet or .arrow task file", file=str(path))
    try:
        with path.open(encoding="utf-8") as handle:
            if path.suffix == ".json" and handle.read(1) == "[":
                handle.seek(0)
                try:
                    rows = json.load(handle)
                except json.JSONDecodeError as exc:
                    raise TaskSourceError(f"invalid JSON: {exc.msg} (line {exc.lineno})",
                                          file=str(path)) from None
                except (ValueError, RecursionError) as exc:
                    raise TaskSourceError(f"invalid JSON: {_json_problem(exc)}", file=str(path)) from None
                for number, row in enumerate(rows):
                    yield number, None, row
                return
            handle.seek(0)
            for number, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    row = TaskValidationError(f"invalid JSON: {exc.msg} (column {exc.colno})",
                                              file=str(path), row=number, line=number + 1)
                except (ValueError, RecursionError) as exc:
                    row = TaskValidationError(f"invalid JSON: {_json_problem(exc)}", file=str(path),
                                              row=number, line=number + 1)
                yield number, number + 1, row
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskSourceError(f"unreadable: {exc}", file=str(path)) from None


def _json_problem(exc: ValueError | RecursionError) -> str:
    """What is wrong with text `json.loads` refused without a JSONDecodeError: nesting deeper than
    the recursion limit, or an integer of more digits than Python converts (a plain ValueError)."""
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]


def _validated(files: Sequence[Path]) -> Iterator[Task | TaskValidationError]:
    """Each row of `files` as a `Task`, or as the `TaskValidationError` that says why it is invalid
    (a task id seen before is invalid too: the first row with it is kept)."""
    seen: dict[str, tuple[str, int]] = {}
    for file in files:
        for number, line, row in _rows(file):
            if isinstance(row, TaskValidationError):
                yield row
                continue
            try:
                task = Task.from_row(row, file=str(file), row_index=number)
            except TaskValidationError as exc:
                yield exc if line is None else TaskValidationError(exc.reason, file=exc.file, row=exc.row,
                                                                   field=exc.field, line=line)
                continue
            if task.task_id in seen:
                first_file, first_row = seen[task.task_id]
                yield TaskValidationError(f"duplicate task_id {task.task_id!r} (first in {first_file} row "
                                          f"{first_row})", file=str(file), row=number, field="task_id",
                                          line=line)
                continue
            seen[task.task_id] = (str(file), number)
            yield task


def _read_files(files: Sequence[Path], *, limit: int | None, skip_invalid: bool = False,
                source: str | None = None) -> TaskList:
    """The valid tasks of `files` (up to `limit`); the invalid rows raise one `InvalidTasksError`,
    or, with `skip_invalid`, come back in the result's ``invalid``."""
    tasks: list[Task] = []
    invalid: list[TaskValidationError] = []
    for item in _validated(files):
        if isinstance(item, TaskValidationError):
            invalid.append(item)
            continue
        tasks.append(item)
        if limit is not None and len(tasks) >= limit:
            break
    if invalid and not skip_invalid:
        raise InvalidTasksError(invalid, source=source)
    return TaskList(tasks, invalid)


def load_tasks(source: Path | str, *, split: str | None = "train", limit: int | None = None,
               skip_invalid: bool = False) -> TaskList:
    """Validated tasks from a task file or folder (see the module docstring), in file order.

    `split` picks a folder's split (None: all of them; a file is read whole); `limit` stops after
    that many valid tasks. Every row is validated first: invalid rows (bad JSON, a field that fails
    `Task.from_row`, a task id seen before) raise one `InvalidTasksError` listing them all, or, with
    `skip_invalid`, are left out and returned in the result's ``invalid`` (a `TaskList`). Raises
    `TaskSourceError` for a source that cannot be read.
    """
    if limit is not None and limit < 0:
        raise TaskSourceError(f"limit: must be >= 0, got {limit}")
    path = Path(source)
    if path.is_dir():
        files = _folder_files(path, split)
    elif path.is_file():
        files = [path]
    else:
        raise TaskSourceError("no such file or folder", file=str(path))
    if limit == 0:
        return TaskList()
    return _read_files(files, limit=limit, skip_invalid=skip_invalid, source=str(path))


# ------------------------------------------------------------------------------------- writing

def write_tasks(tasks: Iterable[Task], path: Path | str) -> Path:
    """Write task rows as JSONL (what `load_tasks` reads back), atomically: a crash leaves the old
    file or the new one, never a part. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(task.to_row(), ensure_ascii=False) + "\n" for task in tasks))
    return path
