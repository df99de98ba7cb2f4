"""webgym_data.importers._jsonl and the generic importer's JSONL read by columns: the same tasks, skips
and errors as the per-row path (`SeedImporter.read_file`), on awkward rows and on generated ones."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webgym_data.importers import get_importer
from webgym_data.importers._base import ImportResult, SeedImporter
from webgym_data.importers._jsonl import JsonlColumns, read_jsonl_columns
from webgym_data.schema import FactGroup, WebgymDataError

AWKWARD = [
    {"task_name": "  Find\tthe cheapest  red shoe ", "website": "https://Shop.Example/a?b=1",
     "task_id": "t-1", "start_url": "https://shop.example/shoes", "benchmark_name": "bench",
     "domain": " retail ",
     "subdomain": "shoes", "difficulty": 2, "definite_answer": " 12 EUR ", "note": "kept",
     "seed_criteria": ["price  shown", " ", "price shown"], "rubric_source": "seed",
     "seed_difficulty_level": "Medium",
     "evaluator_reference": [{"id": "a", "description": "price", "facts": ["a price", " "]},
                             {"id": "b", "description": "colour", "facts": ["red"]}]},
    # Optional fields missing; unicode everywhere.
    {"task_name": "Trouvez le café ☕ le moins cher à 東京 \U0001f600", "website": "cafe.example",
     "note": "ünïcödé 東京"},
    # Nulls where a row may have had no key (the metadata column `note` included).
    {"task_name": "Null fields", "website": "n.example", "domain": None, "evaluator_reference": None,
     "note": None, "difficulty": None, "seed_criteria": None, "task_id": None},
    # Groups without ids, a group whose facts are missing (its description is the fact), empty ones.
    {"task_name": "Nested groups", "website": "g.example", "note": "n",
     "evaluator_reference": [{"description": "rating", "facts": ["4 stars", "\u202eodd"]},
                             {"description": "only a description"},
                             {"id": "", "description": "x", "facts": ["y"]}]},
    # Skipped: no usable website; a duplicate id.
    {"task_name": "No site", "website": "not a site", "note": "n"},
    {"task_name": "Again", "website": "shop.example", "task_id": "t-1", "note": "n"},
]
# Metadata Arrow cannot read as JSON does: a float, an integer beyond 64 bits, a date-like text.
ODD_METADATA = [{"task_name": "Plain", "website": "p.example"},
                {"task_name": "Odd metadata", "website": "m.example", "score": 0.5, "big": 2**70,
                 "when": "2020-01-01"}]


def _both(path: Path) -> list:
    """The columnar and the per-row outcome of importing `path`: (tasks, skips, unresolved), or the
    error's text."""
    importer = get_importer("generic")
    outcomes = []
    for read in (importer.read_file, functools.partial(SeedImporter.read_file, importer)):
        result = ImportResult()
        try:
            read(result, path, seen={})
        except WebgymDataError as error:
            outcomes.append(f"{type(error).__name__}: {error}")
        else:
            outcomes.append((result.tasks, result.skipped, result.unresolved_websites))
    return outcomes


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_awkward_rows_give_the_per_row_paths_tasks_and_skips(tmp_path, monkeypatch):
    path = _write(tmp_path / "awkward.jsonl", AWKWARD)
    assert read_jsonl_columns(path) is not None  # read by columns, not handed to the per-row path whole
    handed_over = []
    record = JsonlColumns.record
    monkeypatch.setattr(JsonlColumns, "record",
                        lambda self, row: handed_over.append(row) or record(self, row))
    columnar, per_row = _both(path)
    assert columnar == per_row
    tasks, skipped, _ = columnar
    assert [t.task_name for t in tasks][:2] == ["Find the cheapest red shoe",
                                                "Trouvez le café ☕ le moins cher à 東京 \U0001f600"]
    first = tasks[0]
    assert first.evaluator_reference == (FactGroup(id="a", description="price", facts=("a price",)),
                                         FactGroup(id="b", description="colour", facts=("red",)))
    assert (first.domain, first.definite_answer, first.seed_criteria) == ("retail", "12 EUR",
                                                                           ("price shown",))
    assert json.loads(first.source.metadata) == {"note": "kept"}
    nested = next(t for t in tasks if t.task_name == "Nested groups")
    assert [(g.id, g.facts) for g in nested.evaluator_reference] == [
        ("1", ("4 stars", "\u202eodd")), ("2", ("only a description",)), ("3", ("y",))]
    assert any("row 4" in reason for reason in skipped) and any("duplicate task_id t-1" in s for s in skipped)
    assert json.loads(tasks[1].source.metadata) == {"note": "ünïcödé 東京"}
    # Every row but two was converted from its columns: the row with nulls (a null `note` may be a
    # missing key) and the one to skip went through `convert`.
    assert handed_over == [2, 4]


def test_metadata_arrow_reads_otherwise_goes_through_convert(tmp_path):
    columnar, per_row = _both(_write(tmp_path / "odd.jsonl", ODD_METADATA))
    assert columnar == per_row
    assert json.loads(columnar[0][1].source.metadata) == {"score": 0.5, "big": 2**70, "when": "2020-01-01"}


@pytest.mark.parametrize(("bad", "field"), [
    ({"difficulty": -1}, "difficulty"),
    ({"seed_difficulty_level": "extreme"}, "seed_difficulty_level"),
    ({"rubric_source": "oracle"}, "rubric_source"),
    ({"task_name": " "}, "task_name"),
    ({"evaluator_reference": [{"id": "1", "description": " ", "facts": [" "]}]}, "evaluator_reference"),
    ({"evaluator_reference": [{"id": "1", "description": "p", "facts": ["q"]},
                              {"id": "1", "description": "r", "facts": ["s"]}]}, "evaluator_reference"),
])
def test_a_bad_row_is_the_same_error_naming_file_row_and_field(tmp_path, bad, field):
    rows = [{"task_name": f"Task {i}", "website": "a.example", "difficulty": 1,
             "seed_difficulty_level": "easy", "rubric_source": "seed"} for i in range(5)]
    rows[3].update(bad)
    path = _write(tmp_path / "bad.jsonl", rows)
    assert read_jsonl_columns(path) is not None
    columnar, per_row = _both(path)
    assert columnar == per_row
    assert isinstance(columnar, str) and f"{path}, row 3" in columnar and f"'{field}'" in columnar, columnar


@pytest.mark.parametrize("text", [
    b"\xef\xbb\xbf" + b'{"task_name": "a", "website": "a.example"}\n',  # a byte-order mark
    b'{"task_name": "caf\xe9", "website": "a.example"}\n',  # not UTF-8
    b'{"task_name": "a", "website": "a.example"}\nnull\n',  # a line that is not an object
    b'{"task_name": "a", "website": "a.example"} {"task_name": "b", "website": "b.example"}\n',
    b'{"task_name": "a", "website": "a.example"}\n{"task_name": 1.5e3, "website": [1]}\n',  # types change
    b'{"task_name": "a", "website": "a.example"}\n{"task_name": "b", "website": \n',  # not JSON
    # pyarrow 26 builds an invalid list of objects from these rows (offsets past the values).
    b'{"task_name": "a", "website": "a.example", "evaluator_reference": [{"facts": null}]}\n'
    b'{"task_name": "b", "website": "b.example", "evaluator_reference": [{"facts": [null, "f"]}]}\n'
    b'{"task_name": "c", "website": "c.example"}\n',
    b'{"task_name": "a", "website": "a.example", "n": ' + b"1" * 5000 + b'}\n',  # Arrow: an infinite float
])
def test_files_arrow_reads_otherwise_are_read_row_by_row(tmp_path, text):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(text)
    assert read_jsonl_columns(path) is None
    columnar, per_row = _both(path)
    assert columnar == per_row


def test_rows_are_numbered_past_blank_lines_and_carriage_returns(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\n{"task_name": "a", "website": "a.example"}\r\n\r\n  \n'
                     b'{"task_name": "b", "website": "b.example", "difficulty": -1}\n')
    columnar, per_row = _both(path)
    assert columnar == per_row and f"{path}, row 1" in columnar


scalar = (st.none() | st.booleans() | st.integers(-5, 5)
          | st.sampled_from(["", " ", "easy", "Hard", "3", "x"]) | st.text(max_size=5))
group_id = st.none() | st.sampled_from(["", "1", "2"]) | st.integers(1, 2)
group = st.fixed_dictionaries({}, optional={"id": group_id,
                                            "description": st.none() | st.text(max_size=4),
                                            "facts": st.none() | st.lists(st.none() | st.text(max_size=4),
                                                                          max_size=3)})
row = st.fixed_dictionaries({"task_name": st.sampled_from(["Find it", " ", "Find  it\u2028now"]),
                             "website": st.sampled_from(["a.example", "https://b.example/x", "nope"])},
                            optional={"difficulty": scalar, "domain": scalar, "task_id": scalar,
                                      "note": scalar, "seed_difficulty_level": scalar,
                                      "rubric_source": scalar,
                                      "seed_criteria": st.none() | st.lists(st.text(max_size=4), max_size=2),
                                      "evaluator_reference": st.none() | st.lists(group, max_size=3)})


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(row, min_size=1, max_size=6))
def test_generated_rows_give_the_per_row_paths_outcome(rows, tmp_path_factory):
    path = _write(tmp_path_factory.mktemp("rows") / "rows.jsonl", rows)
    columnar, per_row = _both(path)
    assert columnar == per_row
