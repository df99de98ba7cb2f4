"""webgym_data.schema: published rows load unchanged, legacy rubrics normalise, errors say where."""

from __future__ import annotations

import pytest
from datasets import Dataset

from webgym_data.schema import (
    MAX_INSTRUCTION_CHARS,
    FactGroup,
    RubricError,
    Task,
    TaskValidationError,
    WebgymDataError,
    difficulty_level,
    normalise_evaluator_reference,
    task_features,
)

PUBLISHED_ROW = {
    "benchmark_name": "online-mind2web",
    "task_name": "Add the cheapest  unit-price item to the cart.",
    "domain": "Shopping",
    "subdomain": "General",
    "website": "www.example-shop.com",
    "definite_answer": "",
    "task_id": "abc123",
    "difficulty": 9,
    "evaluator_reference": [
        {"id": 1, "description": "Item Information",
         "facts": ["Check prices of all items", "Check amounts", "Calculate unit prices"]},
        {"id": 2, "description": "Cart Manipulation", "facts": ["Add the item to the cart"]},
    ],
}


def test_published_row_loads_and_keeps_its_fields():
    task = Task.from_row(PUBLISHED_ROW)
    assert task.task_id == "abc123"
    assert task.website == "https://www.example-shop.com"
    assert task.start_url == task.website
    assert task.task_name == "Add the cheapest unit-price item to the cart."
    # difficulty is the fact count, whatever the row said
    assert task.difficulty == 4 and task.difficulty_level == "medium"
    assert task.fact_group_ids == ["1", "2"]


def test_rows_round_trip_through_the_declared_features():
    task = Task.from_row(PUBLISHED_ROW)
    dataset = Dataset.from_list([task.to_row()], features=task_features())
    assert Task.from_row(dataset[0]) == task


@pytest.mark.parametrize(("value", "facts"), [
    ("Find the price", [["Find the price"]]),
    (["A", "B"], [["A"], ["B"]]),
    ('[{"id": "x", "description": "d", "facts": ["f1", "f2"]}]', [["f1", "f2"]]),
    ([{"description": "Check the date", "difficulty": 2}], [["Check the date"]]),
    (None, []),
])
def test_legacy_rubric_forms_normalise(value, facts):
    assert [list(g.facts) for g in normalise_evaluator_reference(value)] == facts


@pytest.mark.parametrize(("difficulty", "level"), [(0, "unknown"), (1, "easy"), (3, "easy"), (4, "medium"),
                                                   (6, "medium"), (7, "hard"), (30, "hard")])
def test_difficulty_levels(difficulty, level):
    assert difficulty_level(difficulty) == level


def test_validation_error_names_file_row_and_field():
    row = dict(PUBLISHED_ROW, evaluator_reference=[{"id": 1, "facts": [3]}])
    with pytest.raises(TaskValidationError) as info:
        Task.from_row(row, file="seeds/x.jsonl", row_index=17)
    message = str(info.value)
    assert message.startswith("seeds/x.jsonl, row 17, field 'evaluator_reference':")
    assert info.value.row == 17 and info.value.field == "evaluator_reference"


def test_missing_instruction_is_an_error():
    with pytest.raises(TaskValidationError, match="field 'task_name'"):
        Task.from_row(dict(PUBLISHED_ROW, task_name="  "), row_index=0)


def test_duplicate_group_ids_are_refused():
    with pytest.raises(ValueError, match="not unique"):
        normalise_evaluator_reference([{"id": 1, "facts": ["a"]}, {"id": 1, "facts": ["b"]}])


def test_fact_group_ids_are_strings():
    assert FactGroup(id=3, description="d", facts=["a"]).id == "3"


def test_a_task_needs_a_rubric_exactly_when_it_has_no_fact_groups():
    from webgym_data.importers.miniwob import miniwob_task

    bare = Task.from_row({"task_name": "Find the hours", "website": "museum.org"})
    graded = Task.from_row({**PUBLISHED_ROW})
    assert bare.needs_rubric and not graded.needs_rubric
    # A MiniWoB++ row is judged by its page and carries that one fact as its rubric: no LLM needed,
    # without anyone testing its environment string.
    assert not miniwob_task("click-button", 0).needs_rubric
    unusual = Task.from_row({"task_name": "Click", "website": "miniwob:click-button",
                             "environment": "miniwob:click-button"})
    assert unusual.needs_rubric


def test_a_malformed_rubric_is_a_rubric_error():
    with pytest.raises(RubricError, match="item 0 is an empty string") as caught:
        normalise_evaluator_reference([""])
    assert isinstance(caught.value, WebgymDataError) and isinstance(caught.value, ValueError)


def test_every_public_error_of_webgym_data_is_a_webgym_data_error():
    import importlib
    import inspect
    import pkgutil

    import webgym_data

    found = []
    for info in pkgutil.walk_packages(webgym_data.__path__, "webgym_data."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name
                    and not name.startswith("_") and name != "Skip"):  # Skip: an importer's control signal
                found.append(value)
    assert len(found) > 15
    assert [cls.__qualname__ for cls in found if not issubclass(cls, WebgymDataError)] == []


ONE_GROUP = [{"id": "attribute", "description": "Product", "facts": ["a red dress"]}]


def test_a_task_without_facts_or_label_is_unknown_never_easy():
    bare = Task.from_row({"task_name": "Find the hours", "website": "museum.org"})
    assert (bare.difficulty, bare.difficulty_level, bare.rubric_source) == (0, "unknown", "")
    assert bare.to_row()["difficulty_level"] == "unknown"


@pytest.mark.parametrize(("rubric_source", "level"), [("seed", "hard"), ("given", "hard"), ("llm", "easy")])
def test_a_seed_label_is_the_level_until_an_llm_writes_the_rubric(rubric_source, level):
    task = Task.from_row({"task_name": "Find a red dress", "website": "shop.example",
                          "rubric_source": rubric_source, "evaluator_reference": ONE_GROUP,
                          "seed_difficulty_level": "Hard"})
    assert task.seed_difficulty_level == "hard" and task.difficulty == 1
    assert task.difficulty_level == level
    labelled_only = Task.from_row({"task_name": "Find a red dress", "website": "shop.example",
                                   "seed_difficulty_level": "medium"})
    assert labelled_only.difficulty_level == "medium"      # no facts: the label, not "unknown"


def test_new_fields_round_trip_through_the_declared_features():
    task = Task.from_row({"task_name": "Find a red dress", "website": "shop.example", "rubric_source": "seed",
                          "evaluator_reference": ONE_GROUP, "seed_difficulty_level": "hard",
                          "seed_criteria": ["attribute: a red dress", "sort: None"]})
    assert task.seed_criteria == ("attribute: a red dress", "sort: None")
    row = Dataset.from_list([task.to_row()], features=task_features())[0]
    new_fields = ("seed_criteria", "rubric_source", "seed_difficulty_level", "difficulty_level")
    assert [row[name] for name in new_fields] == [
        ["attribute: a red dress", "sort: None"], "seed", "hard", "hard"]
    assert Task.from_row(row) == task


def test_a_stored_level_the_facts_do_not_explain_survives_a_row_without_the_label_field():
    # What a trajectory row carries: the level, not seed_difficulty_level.
    row = {k: v for k, v in Task.from_row({"task_name": "Find a red dress", "website": "shop.example",
                                           "evaluator_reference": ONE_GROUP,
                                           "seed_difficulty_level": "hard"}).to_row().items()
           if k in ("task_name", "website", "evaluator_reference", "difficulty", "difficulty_level")}
    assert Task.from_row(row).difficulty_level == "hard"
    # A build before schema 1.1 wrote "easy" for every task without facts: that is not a label.
    legacy = Task.from_row({"task_name": "Find the hours", "website": "museum.org", "difficulty": 0,
                            "difficulty_level": "easy"})
    assert legacy.difficulty_level == "unknown"
    # The published rows' levels are their fact counts: no label is read into them.
    assert Task.from_row({**PUBLISHED_ROW, "difficulty_level": "medium"}).seed_difficulty_level == ""


def test_bad_new_fields_name_the_field():
    base = {"task_name": "Find", "website": "shop.example"}
    for row, field, message in [
        ({**base, "difficulty": "easy"}, "difficulty", "seed_difficulty_level"),
        ({**base, "seed_difficulty_level": "very hard"}, "seed_difficulty_level", "easy, medium, hard"),
        ({**base, "rubric_source": "gpt"}, "rubric_source", "'llm'"),
        ({**base, "seed_criteria": [1, 2]}, "seed_criteria", "list of strings"),
    ]:
        with pytest.raises(TaskValidationError, match=message) as caught:
            Task.from_row(row, file="t.jsonl", row_index=3)
        assert (caught.value.file, caught.value.row, caught.value.field) == ("t.jsonl", 3, field)


def test_an_instruction_over_the_limit_is_refused_with_the_limit_named():
    ok = Task.from_row({"task_name": "x" * MAX_INSTRUCTION_CHARS, "website": "shop.example"})
    assert len(ok.task_name) == MAX_INSTRUCTION_CHARS
    with pytest.raises(TaskValidationError, match=r"field 'task_name': is 4,001 characters long; "
                                                  r"instructions are limited to 4,000") as caught:
        Task.from_row({"task_name": "x" * (MAX_INSTRUCTION_CHARS + 1), "website": "shop.example"},
                      file="t.jsonl", row_index=0)
    assert caught.value.to_dict() == {"file": "t.jsonl", "row": 0, "line": None, "field": "task_name",
                                      "reason": caught.value.reason}


# The task row's Features as they were written out by hand before they were derived from `Task`
# (webgym_data.features): a built dataset's schema must not change by a byte.
_EXPLICIT_TASK_FEATURES = {
    "task_id": "string", "task_name": "string", "website": "string", "start_url": "string",
    "benchmark_name": "string", "domain": "string", "subdomain": "string", "difficulty": "int32",
    "difficulty_level": "string",
    "evaluator_reference": [{"id": "string", "description": "string", "facts": ["string"]}],
    "definite_answer": "string", "parent_task_id": "string", "fact_group_ids": ["string"],
    "instruction_source": "string", "environment": "string", "env_seed": "int64",
    "source": {"importer": "string", "file": "string", "row": "int64", "metadata": "string"},
    "seed_criteria": ["string"], "rubric_source": "string", "seed_difficulty_level": "string",
}


def _explicit(spec):
    from datasets import List, Value

    if isinstance(spec, str):
        return Value(spec)
    if isinstance(spec, list):
        return List(_explicit(spec[0]))
    return {name: _explicit(inner) for name, inner in spec.items()}


def test_task_features_derived_from_the_dataclass_are_todays_schema_byte_for_byte():
    from datasets import Features

    explicit = Features({name: _explicit(spec) for name, spec in _EXPLICIT_TASK_FEATURES.items()})
    derived = task_features()
    assert list(derived.items()) == list(explicit.items())  # the same columns, types and order
    assert derived.arrow_schema.serialize().to_pybytes() == explicit.arrow_schema.serialize().to_pybytes()
    task = Task.from_row({"task_name": "Find a hat", "website": "shop.example", "env_seed": 2**40,
                          "source": {"importer": "generic", "row": 2**33}})
    assert Dataset.from_list([task.to_row()], features=derived)[0]["env_seed"] == 2**40


def test_a_task_field_without_a_column_is_refused(monkeypatch):
    from webgym_data import schema

    monkeypatch.setattr(schema, "_ROW_COLUMNS", schema._ROW_COLUMNS[:-1])  # seed_difficulty_level lost
    with pytest.raises(TypeError, match="seed_difficulty_level"):
        task_features()
