"""Any JSONL/JSON/CSV/parquet/Arrow file of tasks, or a ``datasets`` ``save_to_disk`` folder, with a
column mapping.

``GenericImporter({"task_name": "question", "website": "url"})`` reads the task fields from those
columns; a field without a mapping is read from the column of its own name when there is one, so
files already in the task format (for example a published WebGym split) need no mapping. A
`task_id` column is kept as is; other columns go to ``source.metadata``.

``difficulty`` may be a fact count (an integer, or digits) or a seed's label: ``easy``, ``medium``
or ``hard`` in any case. A label becomes the task's `seed_difficulty_level` (its difficulty level
while the rubric is not an LLM's) and the fact count stays unknown (0) until a rubric gives one;
the label is kept in ``source.metadata`` as ``difficulty``. Any other string is refused, naming the
accepted forms. A rubric column is ``rubric_source = "given"`` (kept as is by ``--rubrics all``)
unless a ``rubric_source`` column says otherwise; a ``seed_criteria`` column (a list of strings, or
one string) is read as the seed's criteria.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from itertools import repeat
from pathlib import Path
from typing import Any

from webgym_data.errors import MappingError
from webgym_data.importers._base import (
    ImportResult,
    SeedImporter,
    add_task,
    display_name,
    metadata_json,
    require_text,
    site_url,
    text_field,
)
from webgym_data.importers._jsonl import read_jsonl_columns
from webgym_data.loading import saved_dataset_files
from webgym_data.schema import (
    DIFFICULTY_LEVELS,
    MAX_DIFFICULTY,
    MAX_INSTRUCTION_CHARS,
    RUBRIC_SOURCES,
    FactGroup,
    Task,
    TaskSource,
    TaskValidationError,
    make_task_id,
    normalise_evaluator_reference,
    normalise_website,
    seed_difficulty_label,
    text_fault,
)

__all__ = ["TARGET_FIELDS", "GenericImporter", "MappingError"]

TARGET_FIELDS = ("task_name", "website", "start_url", "task_id", "benchmark_name", "definite_answer",
                 "evaluator_reference", "domain", "subdomain", "difficulty", "seed_criteria")
"""Task fields a column can be mapped to."""

_OURS = {"difficulty_level", "fact_group_ids", "parent_task_id", "instruction_source", "environment",
         "env_seed", "source", "rubric_source", "seed_difficulty_level"}


class GenericImporter(SeedImporter):
    name = "generic"
    benchmark_name = "generic"
    hub_id = None
    default_paths = ()
    folder_files = ("*.jsonl", "*.json", "*.csv", "*.parquet")

    def __init__(self, mapping: Mapping[str, str] | None = None, *,
                 benchmark_name: str | None = None) -> None:
        mapping = dict(mapping or {})
        unknown = sorted(set(mapping) - set(TARGET_FIELDS))
        if unknown:
            raise MappingError(f"cannot map to {', '.join(unknown)}; "
                               f"task fields are: {', '.join(TARGET_FIELDS)}")
        self.mapping = mapping
        if benchmark_name:
            self.benchmark_name = benchmark_name  # type: ignore[misc]  # per instance on purpose

    def files_in(self, folder: Path) -> list[Path]:
        # A saved dataset's folder also holds JSON files (its state and info) that are not rows.
        saved = saved_dataset_files(folder)
        return saved if saved is not None else super().files_in(folder)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        columns = {target: self.mapping.get(target, target) for target in TARGET_FIELDS}
        for target in ("task_name", "website"):
            if columns[target] not in record:
                raise TaskValidationError(self._missing_column(target, record), file=file, row=row,
                                          field=columns[target])
        fields: dict[str, Any] = {}
        for target in ("start_url", "definite_answer", "domain", "subdomain"):
            fields[target] = text_field(record, columns[target], file=file, row=row)
        reference = record.get(columns["evaluator_reference"])
        if reference not in (None, ""):
            fields["evaluator_reference"] = reference
        difficulty = record.get(columns["difficulty"])
        label = seed_difficulty_label(difficulty)
        labelled = bool(label)
        own_label = text_field(record, "seed_difficulty_level", file=file, row=row)
        if own_label and not seed_difficulty_label(own_label):
            raise TaskValidationError(f"must be one of {', '.join(DIFFICULTY_LEVELS)} or empty, "
                                      f"got {own_label!r}", file=file, row=row, field="seed_difficulty_level")
        label = label or seed_difficulty_label(own_label)
        if labelled:
            difficulty = None  # a label, not a fact count
        if isinstance(difficulty, str) and difficulty.strip():
            # Decimal digits only ("²" is a digit int() refuses), ten at most (a 32-bit count), and
            # parsed without the blanks str.strip() removed (int() strips fewer: "0\x1f" fails).
            digits = difficulty.strip()
            if not digits.isdecimal() or len(digits) > 10:
                raise TaskValidationError(
                    f"must be a fact count (a non-negative integer) or a seed's label "
                    f"({', '.join(DIFFICULTY_LEVELS)}, any case), got {difficulty[:40]!r}",
                    file=file, row=row, field=columns["difficulty"])
            difficulty = int(digits)
        if isinstance(difficulty, float) and difficulty.is_integer():
            difficulty = int(difficulty)
        if difficulty not in (None, ""):
            fields["difficulty"] = difficulty
        if label:
            fields["seed_difficulty_level"] = label
        criteria = record.get(columns["seed_criteria"])
        if isinstance(criteria, str):
            criteria = [criteria]
        if criteria not in (None, []):
            if not isinstance(criteria, (list, tuple)) or not all(isinstance(c, str) for c in criteria):
                raise TaskValidationError("must be a list of strings", file=file, row=row,
                                          field=columns["seed_criteria"])
            fields["seed_criteria"] = criteria
        rubric_source = text_field(record, "rubric_source", file=file, row=row)
        if rubric_source not in RUBRIC_SOURCES:
            raise TaskValidationError(f"must be one of {', '.join(map(repr, RUBRIC_SOURCES))}, "
                                      f"got {rubric_source!r}", file=file, row=row, field="rubric_source")
        fields["rubric_source"] = rubric_source
        # A difficulty label stays in the metadata too (a fact count is the row's `difficulty`).
        used = {columns[t] for t in TARGET_FIELDS if not (t == "difficulty" and labelled)}
        metadata = {k: v for k, v in record.items()
                    if k not in used and k not in _OURS and not k.startswith("_")}
        benchmark = text_field(record, columns["benchmark_name"], file=file, row=row)
        try:
            task = self.make_task(
                file=file, row=row,
                task_name=require_text(record, columns["task_name"], file=file, row=row),
                website=require_text(record, columns["website"], file=file, row=row),
                website_field=columns["website"], task_name_field=columns["task_name"],
                metadata=metadata, **fields,
            )
        except TaskValidationError as exc:
            # Name the column the user knows, not the task field it was mapped to.
            if exc.field in columns and columns[exc.field] != exc.field:
                raise TaskValidationError(exc.reason, file=file, row=row, field=columns[exc.field]) from None
            raise
        changes = {}
        if benchmark:
            changes["benchmark_name"] = benchmark
            changes["task_id"] = make_task_id(benchmark, task.website, task.task_name)
        task_id = text_field(record, columns["task_id"], file=file, row=row)
        if task_id:
            changes["task_id"] = task_id  # a given id is kept as is
        return dataclasses.replace(task, **changes) if changes else task

    def _missing_column(self, target: str, record: Mapping[str, Any]) -> str:
        """Why a row lacks the column of required task field `target`: the row's columns, and a
        --mapping that would read the task fields from them."""
        how = (f"mapped to task field '{target}' but missing from the row" if target in self.mapping
               else f"no column for task field '{target}' (give --mapping {target}=COLUMN)")
        names = [str(name) for name in record if not str(name).startswith("_")]
        listed = ", ".join(names[:20]) + (f" ... ({len(names)} in all)" if len(names) > 20 else "")
        return f"{how}; the row's columns are: {listed or '(none)'}; for example {_example_mapping(record)}"

    # -- a JSONL file by columns: Arrow parses it; each row whose values the column types vouch for
    # becomes a task here, with the same result as `convert`; any other row (a value to refuse or
    # skip, a null where the row may have had no key) goes through `convert` from its own line.
    def read_file(self, result: ImportResult, file: Path, *, seen: dict[str, str]) -> None:
        columns = read_jsonl_columns(file) if file.suffix.lower() == ".jsonl" else None
        if columns is None:
            super().read_file(result, file, seen=seen)
            return
        name = str(file)
        for row, task in enumerate(self._plain_tasks(columns.table, file=name)):
            if task is None:
                self.add_record(result, columns.record(row), file=name, row=row, seen=seen)
            else:
                add_task(result, task, file=name, row=row, seen=seen)

    def _plain_tasks(self, table: Any, *, file: str) -> list[Task | None]:
        """One task per row of `table` (the rows of `file`), None for a row `convert` must read."""
        import pyarrow as pa  # optional: pyarrow
        import pyarrow.compute as pc  # optional: pyarrow

        n = table.num_rows
        shown = display_name(file)
        if text_fault(shown):  # a file name UTF-8 cannot encode: `convert` names it
            return [None] * n
        undecided = pa.array(repeat(False, n), pa.bool_())
        for column in table.column_names:  # a value Arrow reads otherwise than JSON (a float, a date)
            if not _json_type(table.column(column).type):
                undecided = pc.or_(undecided, pc.is_valid(table.column(column)))

        def values(column: str, accepts: Callable[[Any], bool]) -> list[Any]:
            """The column's values where its type is one `accepts`; otherwise its rows are undecided."""
            nonlocal undecided
            if column not in table.column_names:
                return [None] * n
            array = table.column(column)
            if accepts(array.type):
                return array.to_pylist()
            undecided = pc.or_(undecided, pc.is_valid(array))
            return [None] * n

        def texts(column: str) -> list[str | None]:
            """A text column's values; integers as their text (as `text_field` reads them)."""
            listed = values(column, _text_type)
            if column in table.column_names and pa.types.is_int64(table.column(column).type):
                return [None if v is None else str(v) for v in listed]
            return listed

        columns = {target: self.mapping.get(target, target) for target in TARGET_FIELDS}
        strings = [texts(columns[target]) for target in (
            "task_name", "website", "start_url", "definite_answer", "domain", "subdomain", "benchmark_name",
            "task_id")]
        strings += [texts(name) for name in ("rubric_source", "seed_difficulty_level")]
        strings[1] = _sites(strings[1])
        column = columns["evaluator_reference"]
        if column in table.column_names and _group_list_type(table.column(column).type):
            references = _fact_groups(table.column(column))
        else:
            references = values(column, _reference_type)
        difficulties = values(columns["difficulty"], _text_type)
        criteria = values(columns["seed_criteria"], _strings_type)
        # The seed's other columns go to the metadata, where a null and a missing key differ (and a
        # column cannot tell them apart): rows with a null there are undecided.
        used = {columns[t] for t in TARGET_FIELDS if t != "difficulty"}
        label_column = columns["difficulty"]
        if label_column in used or _not_metadata(label_column):
            label_column = None  # a difficulty label stays in the metadata, as in `convert`
        used.add(columns["difficulty"])
        extra = [k for k in table.column_names if k not in used and not _not_metadata(k)]
        for column in extra:
            array = table.column(column)
            undecided = pc.or_(undecided, pc.is_null(array) if _metadata_type(array.type)
                               else pa.array(repeat(True, n), pa.bool_()))
        extra_rows = (list(zip(*(table.column(k).to_pylist() for k in extra), strict=True)) if extra
                      else [()] * n)
        skip = undecided.to_pylist()
        return [None if skip[row] else self._plain_task(*fields, row=row, file=shown, extra=extra,
                                                        label_column=label_column)
                for row, fields in enumerate(zip(*strings, references, difficulties, criteria, extra_rows,
                                                 strict=True))]

    def _plain_task(self, name: Any, site: str, start_url: Any, answer: Any, domain: Any, subdomain: Any,
                    benchmark: Any, given_id: Any, rubric_source: Any, own_label: Any, reference: Any,
                    difficulty: Any, criteria: Any, extra_values: tuple[Any, ...], *, row: int, file: str,
                    extra: list[str], label_column: str | None) -> Task | None:
        """`convert`'s task from one row's values, or None where `convert` would refuse or skip it."""
        if name is None or not site:
            return None
        task_name = " ".join(name.split())
        if not task_name or len(task_name) > MAX_INSTRUCTION_CHARS:
            return None
        raw_difficulty = difficulty
        label = seed_difficulty_label(difficulty)
        own = _stripped(own_label)
        if own and not seed_difficulty_label(own):
            return None
        labelled = bool(label)
        label = label or seed_difficulty_label(own)
        if labelled:
            difficulty = None
        if isinstance(difficulty, str) and difficulty.strip():
            digits = difficulty.strip()
            if not digits.isdecimal() or len(digits) > 10:
                return None
            difficulty = int(digits)
        if difficulty is None or difficulty == "":
            difficulty = 0
        elif type(difficulty) is not int or not 0 <= difficulty <= MAX_DIFFICULTY:
            return None
        if isinstance(criteria, str):
            criteria = [criteria]
        if criteria is None:
            criteria = ()
        elif not all(isinstance(c, str) for c in criteria):
            return None
        rubric_source = _stripped(rubric_source)
        if rubric_source not in RUBRIC_SOURCES:
            return None
        groups = ()
        if type(reference) is tuple or reference is _UNDECIDED:
            if reference is _UNDECIDED:
                return None
            groups = reference
        elif reference is not None and reference != "" and reference != []:
            try:
                groups = normalise_evaluator_reference(reference)
            except ValueError:
                return None
        metadata = dict(zip(extra, extra_values, strict=True))
        if labelled and label_column is not None:
            metadata[label_column] = raw_difficulty
        benchmark = _stripped(benchmark) or self.benchmark_name
        facts = sum(len(group.facts) for group in groups)
        return _task({
            "task_id": _stripped(given_id) or make_task_id(benchmark, site, task_name),
            "task_name": task_name,
            "website": site, "benchmark_name": benchmark,
            "start_url": start_url and normalise_website(start_url) or site, "domain": _stripped(domain),
            "subdomain": _stripped(subdomain), "evaluator_reference": groups,
            "definite_answer": _stripped(answer), "difficulty": facts or difficulty,
            "parent_task_id": "", "instruction_source": "seed", "environment": "web", "env_seed": 0,
            "source": _task_source(self.name, file, row, metadata_json(metadata) if metadata else "{}"),
            "seed_criteria": tuple(dict.fromkeys(" ".join(c.split()) for c in criteria if c.strip())),
            "rubric_source": (rubric_source or "given") if groups else "",
            "seed_difficulty_level": label,
        })


# `Task`, `TaskSource` and `FactGroup` are frozen dataclasses: their `__init__` and `__post_init__`
# were about a fifth of the import's cost at 300k rows. The columnar path makes them by storing the
# values those would store (the difficulty is the fact count when there are facts, the rubric source
# "given" for a rubric without one, a start URL that is never empty here): the same objects, equal
# field for field. A task's fields are set one by one in their order, so its instance dict shares
# its keys with the other tasks' (filling the dict at once costs ~290 bytes more a task).
def _task(values: dict[str, Any]) -> Task:
    task = object.__new__(Task)
    for name, value in values.items():
        _SET(task, name, value)
    return task


_SET = object.__setattr__


def _task_source(importer: str, file: str, row: int, metadata: str) -> TaskSource:
    source = object.__new__(TaskSource)
    source.__dict__.update(importer=importer, file=file, row=row, metadata=metadata)
    return source


def _fact_group(group_id: str, description: str, facts: tuple[str, ...]) -> FactGroup:
    group = object.__new__(FactGroup)
    group.__dict__.update(id=group_id, description=description, facts=facts)
    return group


def _sites(websites: list[str | None]) -> list[str]:
    """Each row's website as `convert` makes it, or "" where it would refuse or skip the row."""
    known: dict[str, str] = {}
    sites = []
    for website in websites:
        site = known.get(website) if website is not None else ""
        if site is None:
            site = normalise_website(" ".join(website.split()))
            site = known[website] = site if site_url(site) else ""
        sites.append(site)
    return sites


def _stripped(value: str | None) -> str:
    return "" if value is None else value.strip()


def _not_metadata(column: str) -> bool:
    return column in _OURS or column.startswith("_")


# Arrow types whose values read as `json.loads` reads them, per role. Not trusted: floats (Arrow
# reads an integer beyond 64 bits as one), timestamps (its reading of ISO dates), structs outside a
# rubric (a key missing from a row reads as null there).
def _text_type(t: Any) -> bool:
    """Text, or an integer (text and difficulty columns)."""
    import pyarrow as pa  # optional: pyarrow

    return pa.types.is_string(t) or pa.types.is_null(t) or pa.types.is_int64(t)


def _strings_type(t: Any) -> bool:
    """One text or a list of them (seed criteria, a group's facts)."""
    import pyarrow as pa  # optional: pyarrow

    if pa.types.is_list(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_null(t)


def _reference_type(t: Any) -> bool:
    """A rubric: text, a list of texts, or a list of groups."""
    return _strings_type(t) or _group_list_type(t)


def _group_list_type(t: Any) -> bool:
    """A list of rubric groups. Of a group `convert` reads `id`, `description` and `facts`, a
    missing key as a null, so only those need JSON's types."""
    import pyarrow as pa  # optional: pyarrow

    if not (pa.types.is_list(t) and pa.types.is_struct(t.value_type)):
        return False
    kinds = {"id": _text_type, "description": lambda k: pa.types.is_string(k) or pa.types.is_null(k),
             "facts": _strings_type}
    return all(kinds[f.name](f.type) for f in t.value_type if f.name in kinds)


_LIKELY = {"task_name": ("question", "instruction", "task", "query", "goal", "prompt", "intent", "title"),
           "website": ("url", "site", "web", "link", "domain", "host")}
"""Words in a column's name that suggest the task field it holds (for the example --mapping)."""


def _example_mapping(record: Mapping[str, Any]) -> str:
    """An example ``--mapping`` for the required task fields from a row's own columns: a column whose
    name suggests the field, else one whose value looks like it (a URL for the website), else the
    first text column left."""
    texts = [str(k) for k, v in record.items() if isinstance(v, str) and not str(k).startswith("_")]
    chosen: dict[str, str] = {}
    for target in ("website", "task_name"):
        free = [name for name in texts if name not in chosen.values()]
        by_name = [name for name in free if any(word in name.lower() for word in _LIKELY[target])]
        by_value = [name for name in free if target == "website"
                    and str(record[name]).startswith(("http://", "https://", "www."))]
        candidates = by_name or by_value or ([n for n in free if n not in by_value] if target == "task_name"
                                             else [])
        chosen[target] = candidates[0] if candidates else target.upper()
    return " ".join(f"--mapping {target}={chosen[target]}" for target in ("task_name", "website"))


def _json_type(t: Any) -> bool:
    """Values `json.loads` reads the same: text, integers, booleans, nulls, lists and objects of them."""
    import pyarrow as pa  # optional: pyarrow

    if pa.types.is_list(t):
        return _json_type(t.value_type)
    if pa.types.is_struct(t):
        return all(_json_type(field.type) for field in t)
    return pa.types.is_string(t) or pa.types.is_int64(t) or pa.types.is_boolean(t) or pa.types.is_null(t)


def _metadata_type(t: Any) -> bool:
    """Text, an integer, a boolean, or a list of them."""
    import pyarrow as pa  # optional: pyarrow

    if pa.types.is_list(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_int64(t) or pa.types.is_boolean(t) or pa.types.is_null(t)


_UNDECIDED = object()
"""A rubric `normalise_evaluator_reference` would refuse: its row goes through `convert`."""


def _fact_groups(column: Any) -> list[Any]:
    """Each row's rubric from a column of `_group_list_type`: None for a null, else a tuple of
    `FactGroup`s as `normalise_evaluator_reference` makes them from the row's list, or `_UNDECIDED`
    where it would refuse the list. Read from the flat child arrays: a dict per group is slower."""
    import pyarrow as pa  # optional: pyarrow

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    row_nulls = array.is_null().to_pylist()
    offsets = array.offsets.to_pylist()
    groups = array.values
    group_nulls = groups.is_null().to_pylist()
    children = dict(zip([f.name for f in groups.type], groups.flatten(), strict=True))
    absent = [None] * len(groups)
    ids = children["id"].to_pylist() if "id" in children else absent
    descriptions = children["description"].to_pylist() if "description" in children else absent
    facts = children.get("facts")
    if facts is not None and pa.types.is_list(facts.type):
        fact_nulls = facts.is_null().to_pylist()
        fact_offsets = facts.offsets.to_pylist()
        fact_values = facts.values.to_pylist()
        fact_lists = [None if null else fact_values[start:end]
                      for null, start, end in zip(fact_nulls, fact_offsets, fact_offsets[1:], strict=False)]
    elif facts is not None:  # one text per group, or nulls
        fact_lists = [None if f is None else [f] for f in facts.to_pylist()]
    else:
        fact_lists = absent
    rubrics: list[Any] = []
    for row, null in enumerate(row_nulls):
        rubrics.append(None if null else _row_groups(range(offsets[row], offsets[row + 1]), group_nulls, ids,
                                                     descriptions, fact_lists))
    return rubrics


def _row_groups(positions: range, group_nulls: list[bool], ids: list[Any], descriptions: list[Any],
                fact_lists: list[Any]) -> Any:
    """One row's groups (those at `positions` of the flat child lists), as `_fact_groups` says."""
    built = []
    for g in positions:
        if group_nulls[g]:
            return _UNDECIDED
        description = descriptions[g] or ""
        items = fact_lists[g]
        if items is None:
            if not description.strip():
                return _UNDECIDED
            items = [description]
        elif None in items:
            return _UNDECIDED
        items = [f.strip() for f in items if f.strip()]
        if not items:
            return _UNDECIDED
        group_id = ids[g]
        if group_id is None or group_id == "":
            group_id = g - positions.start + 1
        built.append(_fact_group(str(group_id), description.strip(), tuple(items)))
    if len({group.id for group in built}) != len(built):
        return _UNDECIDED
    return tuple(built)
