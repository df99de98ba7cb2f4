"""webgym_data.schema: published rows load unchanged, legacy rubrics normalise, errors say where."""

from __future__ import annotations

import pytest
from datasets import Dataset

from webgym_data.schema import (
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


@pytest.mark.parametrize(("difficulty", "level"), [(1, "easy"), (3, "easy"), (4, "medium"),
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
