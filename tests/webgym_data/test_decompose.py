"""Decomposition: which subsets become subtasks, their rubric, ids and instructions (which never
carry the facts or the answer that grade them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
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
    instruction_leak,
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


def words(text: str) -> str:
    """Case and punctuation aside, padded: ``words(a) in words(b)`` asks whether b says a."""
    return " " + " ".join(re.findall(r"[^\W_]+", text.casefold())) + " "


def states_grading(instruction: str, task: Task) -> list[str]:
    """The fact texts and definite answer of `task` that `instruction` says and `task`'s own
    instruction does not."""
    said, own = words(instruction), words(task.task_name)
    texts = [f for g in task.evaluator_reference for f in g.facts] + [task.definite_answer]
    return [t for t in texts if words(t).strip() and words(t) in said and words(t) not in own]


def test_template_instruction_is_deterministic_and_names_the_groups_not_their_facts():
    groups = list(WORKED.evaluator_reference[:1])
    text = template_instruction(WORKED, groups)
    assert text == template_instruction(WORKED, groups)
    assert text == (f'Part of the task "{WORKED.task_name}": do only the following and report what you '
                    "find: Item Information.")
    assert not states_grading(text, WORKED)


SITE = Task(
    task_id="site", website="http://webgym-reference.test", benchmark_name="test",
    task_name="Which is the oldest city of Dorvia in the Webgym Reference? Give its name and founding year.",
    evaluator_reference=(
        FactGroup("1", "Articles", ("The article Dorvia was opened.", "The article Ostsolford was opened.",
                                    "The article Kagrad was opened.")),
        FactGroup("2", "Answer", ("The answer names Ostsolford.",
                                  "The answer gives the founding year 1032.")),
        FactGroup("3", "Watchlist", ("The watchlist holds Ostsolford.",)),
    ),
    definite_answer="Ostsolford, 1032",
)


def test_no_subtask_instruction_states_a_fact_or_the_answer():
    # The instruction of the issue: "... Answer (The answer names Ostsolford; The answer gives the
    # founding year 1032)" paid an agent that echoed it.
    subtasks = decompose_task(SITE)
    assert [s.fact_group_ids for s in subtasks] == [["1"], ["1", "2"], ["1", "3"]]
    for sub in subtasks:
        assert sub.definite_answer == ""
        assert not states_grading(sub.task_name, SITE), sub.task_name
        for name in ("ostsolford", "1032", "kagrad"):
            assert name not in sub.task_name.casefold()
    assert subtasks[1].task_name.endswith("report what you find: Articles and Answer.")


@pytest.mark.parametrize(("description", "group_id", "label"), [
    ("Answer: Ostsolford", "answer", "answer"),                 # a name only the facts hold: the id
    ("The answer names Ostsolford.", "2", "part 2 of the task's rubric"),  # a fact text; the id is no name
    ("Founded 1032", "founding_year", "founding year"),         # a number only the facts hold
    ("", "reply", "reply"),                                     # no description: the id
    ("Answer about Dorvia", "2", "Answer about Dorvia"),        # the task itself names Dorvia
])
def test_a_description_that_gives_something_away_is_replaced(description, group_id, label):
    answer = FactGroup(group_id, description, SITE.evaluator_reference[1].facts)
    groups = (SITE.evaluator_reference[0], answer)
    parent = replace(SITE, evaluator_reference=groups)
    text = template_instruction(parent, groups)
    assert text.endswith(f"report what you find: Articles and {label}.")
    assert not states_grading(text, parent)


def test_instruction_leak_names_what_is_given_away():
    assert instruction_leak(SITE.task_name, SITE) == ""
    assert instruction_leak("Open the article Dorvia and give the oldest city's founding year.", SITE) == ""
    assert "the fact 'The answer gives the founding year 1032.'" in instruction_leak(
        "Do this: the ANSWER gives the founding-year 1032!", SITE)
    assert "definite answer" in instruction_leak("Reply 'Ostsolford 1032'.", SITE)
    assert "'kagrad'" in instruction_leak("Open the article of Kagrad.", SITE)
    assert "'1032'" in instruction_leak("It was founded in 1032.", SITE)
    # A multiple-choice task names its answer among the candidates: quoting it gives nothing away.
    choice = replace(SITE, task_name="Which of Ostsolford and Kagrad was founded first?",
                     definite_answer="Ostsolford")
    assert instruction_leak(f'Part of "{choice.task_name}": the answer.', choice) == ""
    # Capitalised words that open a sentence or a quote are not names.
    opener = replace(SITE, evaluator_reference=(FactGroup("1", "a", ("Check: Prices are shown",)),))
    assert instruction_leak("Check the prices.", opener) == ""


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
        assert not states_grading(sub.task_name, parent)           # no fact text, no answer
    # Ids are stable across runs and unique.
    again = decompose_task(make_task(groups), options)
    assert [s.task_id for s in again] == [s.task_id for s in subtasks]
    assert len({s.task_id for s in subtasks}) == len(subtasks)


# Words that an instruction, a description, a fact and an answer may share (not the template's own
# framing words, "part of the task ... report what you find": a fact that is one of them alone says
# nothing an instruction could avoid).
_VOCABULARY = ("cart", "price", "Lamp", "blue", "12.95", "Kagrad", "opened", "names", "1032", "Answer", "in")
phrases = st.lists(st.sampled_from(_VOCABULARY), min_size=1, max_size=4).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(instruction=phrases, answer=st.one_of(st.just(""), phrases),
       groups=st.lists(st.tuples(st.one_of(st.just(""), phrases), st.lists(phrases, min_size=1, max_size=4)),
                       min_size=2, max_size=4))
def test_no_instruction_states_a_fact_or_the_answer_whatever_the_descriptions(instruction, answer, groups):
    parent = Task(task_id="p", task_name=instruction, website="https://shop.example.com",
                  benchmark_name="test", definite_answer=answer,
                  evaluator_reference=tuple(FactGroup(str(i), description, tuple(facts))
                                            for i, (description, facts) in enumerate(groups, 1)))
    for sub in decompose_task(parent, DecomposeSettings(large_threshold=1)):
        assert not states_grading(sub.task_name, parent), sub.task_name
        assert instruction_leak(sub.task_name, parent) == ""


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
    assert "Item Information" in prompt and "Cart Manipulation" in prompt and WORKED.task_name in prompt
    # The facts grade the subtask: the prompt never sees them.
    assert not [f for g in WORKED.evaluator_reference for f in g.facts if f in prompt]
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


def test_an_llm_reply_that_gives_the_answer_away_is_asked_again_then_replaced(scripted_openai, tmp_path):
    clean = json.dumps({"instruction": "In the Webgym Reference, open the articles needed to find the oldest "
                                       "city of Dorvia and say which it is."})
    leaky = json.dumps({"instruction": "Open the articles of Dorvia and Ostsolford."})
    parent = replace(SITE, evaluator_reference=SITE.evaluator_reference[:2])   # one subtask: Articles
    llm = scripted_openai([leaky, clean])
    report = decompose_tasks([parent], client=_client(llm.base_url, tmp_path / "a", max_retries=1))
    [sub] = report.subtasks
    assert (sub.instruction_source, sub.task_name) == ("llm", json.loads(clean)["instruction"])
    assert len(llm.requests) == 2 and not report.llm_fallbacks
    prompt = "\n".join(m["content"] for m in llm.requests[0]["messages"])
    assert "Ostsolford" not in prompt and "1032" not in prompt
    assert 'Parts to keep: ["Articles"]\nParts to drop: ["Answer"]' in prompt

    # Leaky every time: the template, counted as a fallback that says why.
    llm = scripted_openai([leaky])
    report = decompose_tasks([parent], client=_client(llm.base_url, tmp_path / "b", max_retries=1))
    [sub] = report.subtasks
    assert sub.instruction_source == "template" and not states_grading(sub.task_name, parent)
    [(task_id, reason)] = report.llm_fallbacks
    assert task_id == sub.task_id and "'ostsolford', which only the rubric or the answer names" in reason


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
    long_names = (FactGroup("1", "Specs " * 400, ("a",) * 3), FactGroup("2", "Cart", ("in the cart",)))
    for groups in ([parent.evaluator_reference[0]], long_facts, long_names):
        text = template_instruction(parent, groups)
        assert len(text) <= MAX_INSTRUCTION_CHARS
        assert text.startswith('Part of the task "Find a laptop') and "Specs" in text
        assert "condition" not in text
    # Short enough: the parent is quoted whole.
    short = template_instruction(WORKED, [WORKED.evaluator_reference[0]])
    assert WORKED.task_name in short


# -- every built task: the seed sets, the local sites' generated tasks, the sample tasks --------------

SAMPLE_TASKS = Path(__file__).resolve().parents[2] / "webgym" / "sample_tasks.jsonl"


@pytest.fixture(scope="module")
def every_built_task(seeds_dir, tmp_path_factory) -> list[Task]:
    """One offline build of every task the project ships or generates (as ``webgym-data build
    --seeds ../shared/seeds --importer local_sites=... --importer generic=webgym/sample_tasks.jsonl``)."""
    from webgym_data.build import BuildSettings, build
    from webgym_data.loading import read_task_set
    from webgym_data.split import SplitSettings
    from webgym_sites.generate import site_tasks

    folder = tmp_path_factory.mktemp("every")
    sites = folder / "sites.jsonl"
    sites.write_text("".join(json.dumps(t.to_row()) + "\n" for t in site_tasks(100)), encoding="utf-8")
    out = folder / "tasks"
    build(BuildSettings(out=out, seeds=seeds_dir, split=SplitSettings(test_size=300), progress=False,
                        importers=(("local_sites", str(sites)), ("generic", str(SAMPLE_TASKS)))))
    train, test, _ = read_task_set(out)
    return [*train, *test]


def test_no_built_instruction_states_its_facts_or_its_answer(every_built_task):
    from webgym_sites.encyclopedia import encyclopedia

    tasks = {t.task_id: t for t in every_built_task}
    subtasks = [t for t in tasks.values() if t.parent_task_id]
    benchmarks = {t.benchmark_name for t in subtasks}
    assert {"webgym-shop", "webgym-travel", "webgym-reference", "webgym-sample", "mind2web-2"} <= benchmarks
    # A subtask says nothing of its own rubric, of its parent's, or of its parent's answer that its
    # parent's instruction (which it quotes) does not say; it has no definite answer of its own.
    for sub in subtasks:
        parent = tasks[sub.parent_task_id]
        assert set(sub.evaluator_reference) < set(parent.evaluator_reference)
        assert not states_grading(sub.task_name, parent), (sub.task_name, parent.task_name)
        assert sub.definite_answer == ""

    # Our own instructions (generated sites, sample tasks) state no fact text; they name their
    # definite answer only as one of the candidates of a multiple-choice question.
    titles = [words(a.title) for a in encyclopedia(0).articles]
    ours = [t for t in tasks.values() if not t.parent_task_id and t.benchmark_name.startswith("webgym-")]
    assert len(ours) >= 300
    choices = 0
    for task in ours:
        said = words(task.task_name)
        assert not [f for g in task.evaluator_reference for f in g.facts if words(f) in said], task.task_name
        if task.definite_answer and words(task.definite_answer) in said:
            named = [title for title in titles if title in said]
            assert words(task.definite_answer) in named and len(named) >= 3, task.task_name
            choices += 1
    assert choices > 0

    # The third-party seeds' instructions are theirs: none states a fact text of its rubric; one
    # GAIA-Web question quotes a citation and asks for the word in it that is wrong (its answer).
    theirs = [t for t in tasks.values()
              if not t.parent_task_id and not t.benchmark_name.startswith("webgym-")]
    assert not [t for t in theirs for g in t.evaluator_reference for f in g.facts
                if words(f) in words(t.task_name)]
    answered = [t.benchmark_name for t in theirs
                if t.definite_answer.strip() and words(t.definite_answer) in words(t.task_name)]
    assert answered == ["gaia-web"]


def test_the_build_decomposes_the_same_way_twice(every_built_task, seeds_dir, tmp_path):
    from webgym_data.build import BuildSettings, build
    from webgym_data.loading import read_task_set
    from webgym_data.split import SplitSettings

    sites = tmp_path / "sites.jsonl"
    rows = [t for t in every_built_task if t.environment.startswith("site:") and not t.parent_task_id]
    sites.write_text("".join(json.dumps(t.to_row()) + "\n" for t in rows), encoding="utf-8")
    build(BuildSettings(out=tmp_path / "again", importers=(("local_sites", str(sites)),),
                        split=SplitSettings(test_size=300), progress=False))
    train, test, _ = read_task_set(tmp_path / "again")
    again = {t.task_id: t.task_name for t in [*train, *test] if t.parent_task_id}
    first = {t.task_id: t.task_name for t in every_built_task if t.task_id in again}
    assert len(again) > 300 and again == first


@settings(max_examples=300, deadline=None)
@given(name=st.text(min_size=1, max_size=300), labels=st.lists(st.text(max_size=40), min_size=1, max_size=4),
       long=st.booleans())
def test_the_template_words_put_together_from_its_pieces_are_the_words_of_the_whole_text(name, labels, long):
    from webgym_data.decompose import _template, _words

    parent = make_task([("Price", 3), ("Cart", 1)], name=name * (300 if long else 1))
    text, said = _template(parent, labels)
    assert said == _words(text)
    text, said = _template(parent, ["Straße ΣΑΣ", "x_1 part2", "ǅ ﬁ"])
    assert said == _words(text)
