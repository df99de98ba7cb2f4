"""Decomposition: which subsets become subtasks, their rubric, ids and instructions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.webgym_data.helpers import llm_settings
from webgym_data.decompose import (
    DecomposeError,
    DecomposeSettings,
    candidate_subsets,
    decompose_task,
    decompose_tasks,
    template_instruction,
)
from webgym_data.llm import LLMClient, LLMUnavailable
from webgym_data.schema import FactGroup, Task


def make_task(groups: list[tuple[str, int]], *, task_id: str = "parent-1",
              name: str = "Do the thing.") -> Task:
    return Task(
        task_id=task_id, task_name=name, website="https://shop.example.com", benchmark_name="test",
        evaluator_reference=tuple(
            FactGroup(id=str(i + 1), description=desc, facts=tuple(f"{desc} fact {j}" for j in range(n)))
            for i, (desc, n) in enumerate(groups)),
        definite_answer="42",
    )


WORKED = Task(
    task_id="worked", website="https://shop.example.com", benchmark_name="test",
    task_name=("Examine all items displayed on the webpage, compare their prices and amounts and add the "
               "item with lowest unit price and one to shopping cart."),
    evaluator_reference=(
        FactGroup("1", "Item Information", ("Check prices of all items", "Check amounts of all items",
                                            "Calculate unit prices of all items")),
        FactGroup("2", "Cart Manipulation", ("Add the item with lowest unit price to the shopping cart",)),
    ),
)


def test_worked_example_gives_exactly_the_item_information_subtask():
    assert WORKED.difficulty == 4
    subtasks = decompose_task(WORKED)
    assert len(subtasks) == 1
    sub = subtasks[0]
    assert [g.description for g in sub.evaluator_reference] == ["Item Information"]
    assert sub.evaluator_reference[0] == WORKED.evaluator_reference[0]
    assert sub.difficulty == 3
    assert sub.difficulty_level == "easy"
    assert sub.parent_task_id == "worked"
    assert sub.fact_group_ids == ["1"]
    assert sub.instruction_source == "template"
    assert sub.task_id not in ("", WORKED.task_id)
    assert sub.website == WORKED.website and sub.benchmark_name == WORKED.benchmark_name
    # The template asks for the kept group only.
    assert "Item Information" in sub.task_name and "Cart Manipulation" not in sub.task_name


@pytest.mark.parametrize("groups", [
    [("only", 5)],                 # one group: nothing to drop
    [("a", 2), ("b", 2)],          # no large group
    [],                            # no rubric
])
def test_tasks_that_do_not_decompose(groups):
    assert decompose_task(make_task(groups)) == []


def test_subtasks_are_not_decomposed_again():
    sub = decompose_task(make_task([("a", 3), ("b", 3), ("c", 1)]))[0]
    assert sub.parent_task_id
    assert decompose_task(sub) == []


def test_every_valid_subset_is_used_below_the_cap():
    task = make_task([("a", 3), ("b", 1), ("c", 4)])
    subsets = candidate_subsets(task.evaluator_reference)
    # Proper non-empty subsets of 3 groups holding group 0 or 2: all 6 except {1}.
    assert sorted(subsets) == sorted([(0,), (2,), (0, 1), (0, 2), (1, 2)])
    subtasks = decompose_task(task)
    assert [s.difficulty for s in subtasks] == [3, 4, 4, 7, 5]
    assert [s.difficulty_level for s in subtasks] == ["easy", "medium", "medium", "hard", "medium"]
    assert all(s.definite_answer == "" for s in subtasks)
    assert len({s.task_id for s in subtasks}) == len(subtasks)


def test_cap_and_threshold_are_configurable_and_the_choice_is_deterministic():
    task = make_task([("a", 3), ("b", 3), ("c", 3), ("d", 3)])  # 14 valid subsets
    assert len(candidate_subsets(task.evaluator_reference, DecomposeSettings(max_subtasks=100))) == 14
    capped = candidate_subsets(task.evaluator_reference, DecomposeSettings(max_subtasks=5))
    assert capped == [(0,), (1,), (2,), (3,), (0, 1)]  # smallest subsets first, in group order
    assert decompose_task(task, DecomposeSettings(max_subtasks=0)) == []
    # With threshold 4 no group is large; with 2, a 2-fact group becomes large.
    assert decompose_task(task, DecomposeSettings(large_threshold=4)) == []
    small = make_task([("a", 2), ("b", 1)])
    assert len(decompose_task(small, DecomposeSettings(large_threshold=2))) == 1
    with pytest.raises(DecomposeError, match="large_threshold"):
        DecomposeSettings(large_threshold=0)


def test_many_groups_do_not_enumerate_every_subset():
    # 40 groups = 2^40 subsets: the lazy enumeration stops at the cap.
    task = make_task([(f"g{i}", 3 if i == 39 else 1) for i in range(40)])
    subsets = candidate_subsets(task.evaluator_reference, DecomposeSettings(max_subtasks=3))
    assert subsets == [(39,), (0, 39), (1, 39)]


def test_template_instruction_is_deterministic_and_names_the_groups():
    groups = list(WORKED.evaluator_reference[:1])
    assert template_instruction(WORKED, groups) == template_instruction(WORKED, groups)
    assert "Check amounts of all items" in template_instruction(WORKED, groups)


group_lists = st.lists(
    st.tuples(st.text("abcdefgh ", min_size=1, max_size=8), st.integers(min_value=1, max_value=6)),
    min_size=0, max_size=6)


@settings(max_examples=60, deadline=None)
@given(groups=group_lists, threshold=st.integers(1, 5), cap=st.integers(0, 20))
def test_properties_of_subtasks(groups, threshold, cap):
    parent = make_task(groups)
    options = DecomposeSettings(large_threshold=threshold, max_subtasks=cap)
    subtasks = decompose_task(parent, options)
    parent_groups = set(parent.evaluator_reference)
    assert len(subtasks) <= cap
    for sub in subtasks:
        kept = set(sub.evaluator_reference)
        assert kept and kept < parent_groups                      # proper, non-empty subset
        assert sub.evaluator_reference != parent.evaluator_reference
        assert sub.task_id != parent.task_id
        assert any(len(g.facts) >= threshold for g in kept)        # holds a large group
        assert sub.difficulty == sum(len(g.facts) for g in kept)
    # Ids are stable across runs and unique.
    again = decompose_task(make_task(groups), options)
    assert [s.task_id for s in again] == [s.task_id for s in subtasks]
    assert len({s.task_id for s in subtasks}) == len(subtasks)


def test_ids_depend_on_parent_and_groups():
    a = decompose_task(make_task([("a", 3), ("b", 1)], task_id="p1"))
    b = decompose_task(make_task([("a", 3), ("b", 1)], task_id="p2"))
    assert a[0].task_id != b[0].task_id


def _client(base_url: str, tmp_path, **kw) -> LLMClient:
    return LLMClient(llm_settings(base_url, model="scripted-model", cache_dir=tmp_path / "cache",
                                  backoff_s=0.01, **kw))


def test_llm_rewrites_instructions_and_caches_them(scripted_openai, tmp_path):
    reply = json.dumps({"instruction": "Check the prices and amounts of all items and work out unit prices."})
    llm = scripted_openai([reply])
    report = decompose_tasks([WORKED], client=_client(llm.base_url, tmp_path))
    [sub] = report.subtasks
    assert sub.instruction_source == "llm"
    assert sub.task_name == "Check the prices and amounts of all items and work out unit prices."
    assert len(llm.requests) == 1
    prompt = json.dumps(llm.requests[0]["messages"])
    assert "Item Information" in prompt and WORKED.task_name in prompt
    # Same ids as the template version: the instruction does not change the identity.
    assert sub.task_id == decompose_task(WORKED)[0].task_id
    # A rerun is answered from the cache: no new request.
    again = decompose_tasks([WORKED], client=_client(llm.base_url, tmp_path))
    assert again.subtasks == report.subtasks
    assert len(llm.requests) == 1


def test_invalid_llm_replies_fall_back_to_the_template_and_are_counted(scripted_openai, tmp_path):
    llm = scripted_openai(["not json", json.dumps({"instruction": ""})])
    report = decompose_tasks([WORKED], client=_client(llm.base_url, tmp_path, max_retries=1))
    [sub] = report.subtasks
    assert sub.instruction_source == "template"
    assert sub.task_name == template_instruction(WORKED, WORKED.evaluator_reference[:1])
    assert [task_id for task_id, _ in report.llm_fallbacks] == [sub.task_id]
    assert len(llm.requests) == 2


def test_llm_endpoint_down_is_an_error_naming_the_url(tmp_path, unused_port):
    url = f"http://127.0.0.1:{unused_port}/v1"
    with pytest.raises(LLMUnavailable, match=f"127.0.0.1:{unused_port}"):
        decompose_tasks([WORKED], client=_client(url, tmp_path, max_retries=0, timeout_s=2))


def test_subtask_ids_are_the_same_in_a_fresh_interpreter():
    code = ("from tests.webgym_data.test_decompose import WORKED, make_task\n"
            "from webgym_data.decompose import decompose_task\n"
            "tasks = [WORKED, make_task([('a', 3), ('b', 4), ('c', 1)])]\n"
            "print(' '.join(s.task_id for t in tasks for s in decompose_task(t)))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2], env={**os.environ,
                                                                       "PYTHONHASHSEED": "123"})
    here = [s.task_id for t in (WORKED, make_task([("a", 3), ("b", 4), ("c", 1)])) for s in decompose_task(t)]
    assert run.stdout.split() == here and len(here) == 6


def test_a_subtask_takes_its_level_from_its_facts_not_the_parents_seed_label():
    from dataclasses import replace

    labelled = replace(WORKED, seed_difficulty_level="hard", rubric_source="seed",
                       seed_criteria=("Check all unit prices", "Add the cheapest to the cart"))
    assert labelled.difficulty_level == "hard"
    (sub,) = decompose_task(labelled)
    assert (sub.seed_difficulty_level, sub.seed_criteria, sub.difficulty, sub.difficulty_level) == (
        "", (), 3, "easy")
    assert sub.rubric_source == "seed"                # its rubric is part of the parent's


def test_a_template_instruction_stays_within_the_instruction_limit():
    from webgym_data.schema import MAX_INSTRUCTION_CHARS

    parent = make_task([("Specs", 3), ("Cart", 1)], name="Find a laptop and compare it. " * 130)
    assert len(parent.task_name) < MAX_INSTRUCTION_CHARS
    long_facts = (FactGroup("1", "Specs", tuple("a long condition " * 30 + str(i) for i in range(10))),
                  FactGroup("2", "Cart", ("in the cart",)))
    for groups in ([parent.evaluator_reference[0]], long_facts):
        text = template_instruction(parent, groups)
        assert len(text) <= MAX_INSTRUCTION_CHARS
        assert text.startswith('Part of the task "Find a laptop') and "Specs" in text
    # Short enough: the parent is quoted whole and the facts are listed.
    short = template_instruction(WORKED, [WORKED.evaluator_reference[0]])
    assert WORKED.task_name in short and "Check amounts of all items" in short
