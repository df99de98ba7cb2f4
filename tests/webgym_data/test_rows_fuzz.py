"""Untrusted task rows at every reader: `Task.from_row`, `load_tasks` (JSONL, JSON, parquet, Arrow,
``save_to_disk`` folders) and the importers. A row either loads (and then writes and reads back
unchanged, as JSONL and as parquet) or is refused with a `TaskValidationError` that names the file,
the row (and a JSONL line) and the field; a file that cannot be read at all is a `TaskSourceError`
naming it. Never a bare TypeError, KeyError, RecursionError or pyarrow error.

The property tests are bounded (`settings(max_examples=...)`) so each runs in seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webgym_data.importers import SEED_IMPORTERS, get_importer, import_seed
from webgym_data.importers._base import ImportResult
from webgym_data.loading import InvalidTasksError, TaskSourceError, load_tasks, write_tasks
from webgym_data.schema import (
    MAX_DIFFICULTY,
    Task,
    TaskValidationError,
    WebgymDataError,
    task_features,
)

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

# Text that has broken readers elsewhere: NUL, a lone combining mark, right-to-left override, emoji
# (outside the BMP), line and paragraph separators (str.split() treats them as blanks), BOM.
ODD = ["\x00", "\u0301", "\u202e", "\U0001f600", "\u2028", "\u2029", "\ufeff", "\t\n", " ", "Ω≈ç√", "٣"]
odd_text = st.lists(st.sampled_from(ODD) | st.text(max_size=6), min_size=1, max_size=5).map("".join)
# A lone surrogate: a Python string holds it (JSON's "\ud800" escape decodes to it), UTF-8 cannot.
surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
junk_scalar = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62, max_value=2**80)
               | st.floats() | odd_text | surrogate | st.binary(max_size=4))
junk = st.recursive(junk_scalar, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
# Deeply nested JSON text: json.loads raises RecursionError on it.
deep_json = st.integers(min_value=2_000, max_value=50_000).map(lambda n: "[" * n)
# An integer of more digits than Python converts: json.loads raises a plain ValueError on it.
HUGE_INT = "1" * 5_000

TASK_FIELDS = ("task_id", "task_name", "website", "start_url", "benchmark_name", "domain", "subdomain",
               "difficulty", "evaluator_reference", "definite_answer", "parent_task_id", "instruction_source",
               "environment", "env_seed", "source", "seed_criteria", "rubric_source", "seed_difficulty_level")

facts = st.lists(odd_text.filter(str.strip), min_size=1, max_size=3)
groups = st.lists(st.fixed_dictionaries({"description": odd_text, "facts": facts}), max_size=3).map(
    lambda items: [{**item, "id": str(i + 1)} for i, item in enumerate(items)])
good_rows = st.fixed_dictionaries({
    "task_name": odd_text.filter(str.strip),
    "website": st.sampled_from(["shop.example", "https://a.example/path?q=1", "b.example/\u202e"]),
}, optional={
    "task_id": odd_text.filter(str.strip),
    "benchmark_name": odd_text,
    "domain": odd_text,
    "definite_answer": odd_text,
    "difficulty": st.integers(min_value=0, max_value=MAX_DIFFICULTY),
    "evaluator_reference": groups,
    "env_seed": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "seed_criteria": st.lists(odd_text, max_size=3),
    "source": st.fixed_dictionaries({"importer": odd_text, "row": st.integers(-1, 2**40),
                                     "metadata": st.dictionaries(odd_text, odd_text, max_size=2)}),
    "seed_difficulty_level": st.sampled_from(["", "easy", "Medium", "HARD"]),
    "rubric_source": st.sampled_from(["", "seed", "llm", "given"]),
})

GOOD = {"task_name": "Find the cheapest red shoe", "website": "shop.example",
        "evaluator_reference": [{"id": "1", "description": "price", "facts": ["a price is given"]}]}


def _writes_and_reads_back(task: Task, folder: Path) -> None:
    """`task` survives JSONL (`write_tasks`/`load_tasks`) and parquet (the declared features)."""
    assert Task.from_row(task.to_row()) == task
    path = write_tasks([task], folder / "one.jsonl")
    assert list(load_tasks(path)) == [task]
    features = task_features()
    table = pa.Table.from_pylist([features.encode_example(task.to_row())], schema=features.arrow_schema)
    pq.write_table(table, folder / "one.parquet")
    assert list(load_tasks(folder / "one.parquet")) == [task]


def _assert_names_the_place(error: TaskValidationError, file: str | None, row: int | None) -> None:
    assert error.file == file and error.row == row, str(error)
    assert error.reason and str(error).startswith(f"{file}, row {row}" if file else "")


# ----------------------------------------------------------------------------------- Task.from_row

@FUZZ
@given(row=good_rows)
def test_good_rows_with_odd_text_load_and_round_trip(row, tmp_path_factory):
    task = Task.from_row(row)
    _writes_and_reads_back(task, tmp_path_factory.mktemp("rows"))


@FUZZ
@given(name=st.sampled_from(TASK_FIELDS), value=junk)
def test_one_bad_field_is_refused_naming_that_field(name, value, tmp_path_factory):
    row = {**GOOD, name: value}
    try:
        task = Task.from_row(row, file="tasks.jsonl", row_index=7)
    except TaskValidationError as error:
        _assert_names_the_place(error, "tasks.jsonl", 7)
        assert error.field is not None and error.field.split(".")[0] == name, str(error)
        return
    # What passes is data: it is written and read back unchanged.
    _writes_and_reads_back(task, tmp_path_factory.mktemp("rows"))


@FUZZ
@given(row=st.dictionaries(st.sampled_from(TASK_FIELDS) | st.text(max_size=5), junk, max_size=10) | junk)
def test_any_junk_is_a_task_or_a_validation_error(row, tmp_path_factory):
    try:
        task = Task.from_row(row, file="t.parquet", row_index=0)
    except TaskValidationError as error:
        _assert_names_the_place(error, "t.parquet", 0)
        return
    _writes_and_reads_back(task, tmp_path_factory.mktemp("rows"))


@pytest.mark.parametrize(("name", "value", "message"), [
    ("task_name", "Find \ud800 it", "lone surrogate"),
    ("definite_answer", "\udfff", "lone surrogate"),
    ("evaluator_reference", [{"id": "1", "facts": ["ok", "bad \udc00"]}], "group 0 fact 1 holds a lone"),
    ("evaluator_reference", "[" * 100_000, "nested too deeply"),
    ("evaluator_reference", [{"id": {"x": 1}, "facts": ["f"]}], "'id' must be a string or an integer"),
    ("evaluator_reference", b"facts", "got bytes"),
    ("evaluator_reference", {"a", "b"}, "got set"),
    ("seed_criteria", "[" * 100_000, "nested too deeply"),
    ("difficulty", float("nan"), "got nan"),
    ("difficulty", 2.5, "got 2.5"),
    ("difficulty", 2**40, "outside 0..2147483647"),
    ("env_seed", 2**70, "64-bit integer"),
    ("task_id", float("inf"), "must be a string"),
    ("source", {"row": "abc"}, "got 'abc'"),
    ("source", {"importer": {"x": 1}}, "must be a string"),
    ("source", {"metadata": "not json"}, "is not JSON"),
    ("source", {"metadata": "[1, 2]"}, "JSON object"),
    ("source", {"metadata": b"raw"}, "JSON object"),
])
def test_values_that_used_to_crash_or_pass_silently_name_their_field(name, value, message):
    with pytest.raises(TaskValidationError, match=message) as caught:
        Task.from_row({**GOOD, name: value}, file="f.jsonl", row_index=2)
    assert caught.value.field.split(".")[0] == name
    assert str(caught.value).startswith("f.jsonl, row 2, field")


def test_a_float_difficulty_with_an_integral_value_still_loads():
    assert Task.from_row({**GOOD, "evaluator_reference": None, "difficulty": 3.0}).difficulty == 3


# ------------------------------------------------------------------------------------- task files

jsonl_line = (st.dictionaries(st.sampled_from(TASK_FIELDS), junk, max_size=6).map(lambda r: {**GOOD, **r})
              .map(lambda r: json.dumps(r, default=repr))
              | st.just(json.dumps(GOOD))
              | st.text(max_size=20).filter(lambda t: "\n" not in t and "\r" not in t)
              | deep_json | st.just(f'{{"task_name": "a", "website": "b.example", "env_seed": {HUGE_INT}}}')
              | junk.map(lambda v: json.dumps(v, default=repr)))


@FUZZ
@given(lines=st.lists(jsonl_line, min_size=1, max_size=6))
def test_every_bad_jsonl_line_is_reported_with_its_row_and_line(lines, tmp_path_factory):
    lines = [line for line in lines if "\u2028" not in line and "\u2029" not in line and "\x85" not in line]
    path = tmp_path_factory.mktemp("jsonl") / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    try:
        tasks = load_tasks(path, skip_invalid=True)
    except TaskSourceError as error:  # a byte UTF-8 cannot decode (a written lone surrogate)
        assert error.file == str(path) and "unreadable" in str(error)
        return
    used = [number for number, line in enumerate(lines) if line.strip()]
    assert len(tasks) + len(tasks.invalid) == len(used)
    for error in tasks.invalid:
        assert error.file == str(path) and error.row in used and error.line == error.row + 1
        assert str(error).startswith(f"{path}, row {error.row}")
        assert str(error).endswith(f"(line {error.line})")
    if tasks.invalid:
        with pytest.raises(InvalidTasksError):
            load_tasks(path)


column_types = {
    "string": (pa.string(), odd_text),
    "int": (pa.int64(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    "float": (pa.float64(), st.floats()),
    "bool": (pa.bool_(), st.booleans()),
    "strings": (pa.list_(pa.string()), st.lists(odd_text, max_size=3)),
    "groups": (pa.list_(pa.struct([("id", pa.string()), ("facts", pa.list_(pa.string()))])),
               st.lists(st.fixed_dictionaries({"id": odd_text, "facts": st.lists(odd_text, max_size=2)}),
                        max_size=2)),
    "struct": (pa.struct([("row", pa.string()), ("metadata", pa.int64())]),
               st.fixed_dictionaries({"row": odd_text, "metadata": st.integers(0, 9)})),
}


@st.composite
def parquet_tables(draw):
    """A table whose columns are task fields (or others) of any Arrow type, nulls included."""
    names = draw(st.lists(st.sampled_from([*TASK_FIELDS, "extra"]), min_size=1, max_size=6, unique=True))
    kinds = {name: draw(st.sampled_from(sorted(column_types))) for name in names}
    n = draw(st.integers(min_value=1, max_value=4))
    columns = {name: [draw(st.none() | column_types[kind][1]) for _ in range(n)]
               for name, kind in kinds.items()}
    schema = pa.schema([(name, column_types[kind][0]) for name, kind in kinds.items()])
    return pa.table(columns, schema=schema)


@FUZZ
@given(table=parquet_tables())
def test_parquet_rows_of_any_types_are_tasks_or_errors_naming_file_row_and_field(table, tmp_path_factory):
    path = tmp_path_factory.mktemp("pq") / "tasks.parquet"
    pq.write_table(table, path)
    tasks = load_tasks(path, skip_invalid=True)
    assert len(tasks) + len(tasks.invalid) == table.num_rows
    for error in tasks.invalid:
        assert error.file == str(path) and 0 <= error.row < table.num_rows and error.line is None
        assert error.field is not None or "duplicate" in error.reason, str(error)
    for task in tasks:
        _writes_and_reads_back(task, path.parent)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(cut=st.floats(min_value=0.0, max_value=0.999), suffix=st.sampled_from([".parquet", ".arrow"]))
def test_a_truncated_table_file_is_a_source_error_naming_it(cut, suffix, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cut")
    features = task_features()
    rows = [features.encode_example(Task.from_row({**GOOD, "task_id": f"t{i}"}).to_row()) for i in range(20)]
    table = pa.Table.from_pylist(rows, schema=features.arrow_schema)
    path = folder / f"tasks{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=5)
    assert len(load_tasks(path)) == 20
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    try:
        tasks = load_tasks(path)
    except TaskSourceError as error:
        assert error.file == str(path) and "not a readable" in str(error)
        return
    # An Arrow stream cut between record batches reads as its first batches: no row is invented.
    assert suffix == ".arrow" and len(tasks) < 20 and all(t.task_name == GOOD["task_name"] for t in tasks)


def test_a_zero_byte_or_foreign_file_names_the_file(tmp_path):
    for name in ("empty.parquet", "empty.arrow"):
        (tmp_path / name).write_bytes(b"")
        with pytest.raises(TaskSourceError, match=rf"{name}: not a readable"):
            load_tasks(tmp_path / name)
    (tmp_path / "x.json").write_text("[" * 100_000)
    with pytest.raises(TaskSourceError, match=r"x\.json: invalid JSON: nested too deeply"):
        load_tasks(tmp_path / "x.json")


def test_a_saved_dataset_folder_loads_by_split_and_a_broken_one_names_its_file(tmp_path):
    import datasets

    rows = [Task.from_row({**GOOD, "task_id": f"t{i}"}).to_row() for i in range(3)]
    train = datasets.Dataset.from_list(rows[:2], features=task_features())
    test = datasets.Dataset.from_list(rows[2:], features=task_features())
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "dict"))
    train.save_to_disk(str(tmp_path / "one"))
    assert [t.task_id for t in load_tasks(tmp_path / "dict")] == ["t0", "t1"]
    assert [t.task_id for t in load_tasks(tmp_path / "dict", split="test")] == ["t2"]
    assert len(load_tasks(tmp_path / "dict", split=None)) == 3
    assert [t.task_id for t in load_tasks(tmp_path / "one")] == ["t0", "t1"]
    # The generic importer reads the rows, not the folder's state.json / dataset_info.json.
    assert sorted(t.task_id for t in import_seed("generic", tmp_path / "dict").tasks) == ["t0", "t1", "t2"]
    with pytest.raises(TaskSourceError, match="has no 'validation' split"):
        load_tasks(tmp_path / "dict", split="validation")
    (tmp_path / "one" / "state.json").write_text('{"_data_files": [{"filename": "../../etc/passwd"}]}')
    with pytest.raises(TaskSourceError, match=r"state\.json: '_data_files' must be"):
        load_tasks(tmp_path / "one")
    (tmp_path / "one" / "state.json").write_text('{"_data_files": [{"filename": "gone.arrow"}]}')
    with pytest.raises(TaskSourceError, match=r"gone\.arrow: listed in state\.json but missing"):
        load_tasks(tmp_path / "one")
    (tmp_path / "one" / "state.json").write_text("{")
    with pytest.raises(TaskSourceError, match=r"state\.json: unreadable"):
        load_tasks(tmp_path / "one")


# -------------------------------------------------------------------------------------- importers

generic_row = st.dictionaries(
    st.sampled_from(["task_name", "website", "start_url", "task_id", "benchmark_name", "definite_answer",
                     "evaluator_reference", "domain", "subdomain", "difficulty", "seed_criteria",
                     "rubric_source", "seed_difficulty_level", "note"]), junk, max_size=6)


@FUZZ
@given(rows=st.lists(generic_row.map(lambda r: {"task_name": "Find it", "website": "a.example", **r}),
                     min_size=1, max_size=4))
def test_generic_importer_rows_are_tasks_or_errors_naming_file_row_and_column(rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("generic") / "rows.jsonl"
    path.write_text("".join(json.dumps(r, default=repr) + "\n" for r in rows), encoding="utf-8")
    try:
        result = import_seed("generic", path)
    except TaskValidationError as error:
        assert error.file == str(path) and error.row is not None and 0 <= error.row < len(rows)
        assert error.field in rows[error.row] or error.field in ("task_name", "website"), str(error)
        return
    assert len(result.tasks) + len(result.skipped) == len(rows)
    assert all(reason.startswith(f"{path}, row ") for reason in result.skipped)
    for task in result.tasks:
        _writes_and_reads_back(task, path.parent)


csv_cell = (st.text(max_size=12) | deep_json
            | st.sampled_from(["²", "٣", "9" * 5000, "easy", "3", "0\x1f", "[", "[1]", "a.example"]))


@FUZZ
@given(rows=st.lists(st.fixed_dictionaries({
    "task_name": csv_cell, "website": csv_cell | st.just("a.example"), "difficulty": csv_cell,
    "evaluator_reference": csv_cell, "seed_criteria": csv_cell, "rubric_source": csv_cell}),
    min_size=1, max_size=3))
def test_generic_csv_cells_of_any_text_are_tasks_or_errors_naming_file_row_and_column(rows, tmp_path_factory):
    import csv

    path = tmp_path_factory.mktemp("csv") / "rows.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    try:
        result = import_seed("generic", path)
    except TaskValidationError as error:
        assert error.file == str(path) and error.field in rows[0], str(error)
        return
    for task in result.tasks:
        _writes_and_reads_back(task, path.parent)


@pytest.mark.parametrize(("column", "value"), [
    ("definite_answer", {"a": 1}), ("domain", [1]), ("task_id", {"id": 1}), ("benchmark_name", ["x"]),
    ("start_url", {"u": 1}), ("rubric_source", "gpt-4"), ("seed_difficulty_level", "very hard"),
    ("evaluator_reference", 7), ("difficulty", 2**40), ("note", "\ud800"),
])
def test_generic_importer_refuses_a_value_it_used_to_drop_or_crash_on(tmp_path, column, value):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"task_name": "Find it", "website": "a.example", column: value}) + "\n")
    with pytest.raises(TaskValidationError) as caught:
        import_seed("generic", path)
    assert (caught.value.file, caught.value.row, caught.value.field) == (str(path), 0, column)


seed_keys = st.sampled_from([
    "task", "website", "ques", "web", "task_id", "Final answer", "confirmed_task", "query", "instruction",
    "criteria", "task_description", "id", "web_name", "level", "Level", "attribute", "filter", "sort",
    "canary", "problem", "answer", "url", "start_url", "task_name", "difficulty", "_key", "value",
    "reference_answer", "evaluation", "key", "utterance", "seed"])


@FUZZ
@given(name=st.sampled_from(sorted(SEED_IMPORTERS)),
       records=st.lists(st.dictionaries(seed_keys, junk | st.just("Find a shoe") | st.just("a.example"),
                                        max_size=10), min_size=1, max_size=3))
def test_seed_importers_turn_junk_records_into_tasks_skips_or_named_errors(name, records, tmp_path_factory):
    importer = get_importer(name)
    result = ImportResult()
    try:
        importer.read_into(result, records, file="seed.json")
    except WebgymDataError as error:
        assert "seed.json" in str(error), str(error)
        return
    for task in result.tasks:
        assert not math.isnan(task.difficulty)
        _writes_and_reads_back(task, tmp_path_factory.mktemp(name))


def test_json_python_cannot_read_is_a_named_error_everywhere(tmp_path):
    line = f'{{"task_name": "a", "website": "b.example", "env_seed": {HUGE_INT}}}'
    (tmp_path / "t.jsonl").write_text(json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(InvalidTasksError, match=r"t\.jsonl, row 1: invalid JSON: Exceeds the .*\(line 2\)"):
        load_tasks(tmp_path / "t.jsonl")
    with pytest.raises(TaskValidationError, match=r"t\.jsonl, row 1: invalid JSON on line 2: Exceeds"):
        import_seed("generic", tmp_path / "t.jsonl")
    (tmp_path / "t.json").write_text(f"[{line}]")
    with pytest.raises(TaskSourceError, match=r"t\.json: invalid JSON: Exceeds the limit"):
        load_tasks(tmp_path / "t.json")
    with pytest.raises(TaskValidationError, match=r"t\.json: invalid JSON: Exceeds the limit"):
        import_seed("generic", tmp_path / "t.json")
    with pytest.raises(TaskValidationError, match="field 'evaluator_reference': is JSON Python cannot read"):
        Task.from_row({**GOOD, "evaluator_reference": f"[{HUGE_INT}]"})


def test_a_deeply_nested_seed_line_is_a_named_error(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"task_name": "a", "website": "b.example"}) + "\n" + "[" * 100_000 + "\n")
    with pytest.raises(TaskValidationError, match=r"rows\.jsonl, row 1: invalid JSON on line 2: nested"):
        import_seed("generic", path)
