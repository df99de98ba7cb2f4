"""webgym_data.rubrics against a real OpenAI-protocol server on 127.0.0.1 with scripted replies."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import free_port
from tests.support.untrusted_input import JSON_VALUES, ODD_TEXT
from tests.webgym_data.helpers import llm_settings
from webgym_data.importers.miniwob import miniwob_task
from webgym_data.llm import EventLoopError, LLMClient, LLMUnavailable
from webgym_data.rubrics import (
    MAX_FACTS_PER_GROUP,
    MAX_GROUPS,
    RUBRIC_PROMPT_VERSION,
    generate_rubrics,
    parse_rubric,
    rubric_messages,
    rubrics_command,
    wants_rubric,
)
from webgym_data.schema import FactGroup, RubricError, Task, WebgymDataError, task_features


def make_task(name: str, website: str = "https://shop.example.com", **kwargs) -> Task:
    return Task.from_row({"task_name": name, "website": website, "benchmark_name": "test"} | kwargs)


def rubric_for(body: dict) -> str:
    """A scripted model: one group per task, the facts taken from the task's words (so each task's
    rubric can be told apart, whatever order concurrent requests arrive in)."""
    task = re.search(r"Task: (.*)", body["messages"][-1]["content"]).group(1)
    words = task.split()
    return json.dumps({"fact_groups": [
        {"id": "1", "description": "Main goal", "facts": [f"Fact about {w}" for w in words[:2]]},
        {"id": "2", "description": "Detail", "facts": [f"Shows {words[-1]}"]},
    ]})


def client_for(base_url: str, **overrides) -> LLMClient:
    values = {"model": "scripted", "backoff_s": 0.001, "max_retries": 2}
    values.update(overrides)
    return LLMClient(llm_settings(base_url, **values))


def test_valid_reply_becomes_the_rubric_and_sets_difficulty(scripted_openai):
    server = scripted_openai(rubric_for)
    tasks = [make_task("Find cheapest red shoes"), make_task("Compare two laptops by weight")]
    report = generate_rubrics(tasks, client_for(server.base_url), progress=False)
    assert report.failed == []
    assert report.generated == 2
    first, second = report.tasks
    assert first.evaluator_reference == (
        FactGroup("1", "Main goal", ("Fact about Find", "Fact about cheapest")),
        FactGroup("2", "Detail", ("Shows shoes",)))
    assert second.evaluator_reference[1].facts == ("Shows weight",)
    assert (first.difficulty, first.difficulty_level) == (3, "easy")
    # The request carried the task and its website.
    user_messages = sorted(body["messages"][-1]["content"] for body in server.requests)
    assert user_messages[0] == "Website: https://shop.example.com\nTask: Compare two laptops by weight"


def test_only_tasks_without_a_rubric_are_sent(scripted_openai):
    server = scripted_openai(rubric_for)
    has_rubric = make_task("Already graded task", evaluator_reference=[{"id": "a", "description": "d",
                                                                         "facts": ["x", "y"]}])
    miniwob = miniwob_task("click-button", 3)     # carries its one-fact rubric from its importer
    todo = make_task("Needs a rubric now")
    assert [t.needs_rubric for t in (has_rubric, miniwob, todo)] == [False, False, True]
    report = generate_rubrics([has_rubric, miniwob, todo], client_for(server.base_url), progress=False)
    assert len(server.requests) == 1
    assert report.tasks[0] is has_rubric and report.tasks[1] is miniwob
    assert report.tasks[2].num_facts == 3


def test_the_decision_is_the_rubric_not_the_task_kind(scripted_openai):
    # A task of any environment without fact groups is asked for; none is skipped by its kind.
    server = scripted_openai(rubric_for)
    bare = make_task("Click the big button", website="miniwob:click-button",
                     environment="miniwob:click-button")
    report = generate_rubrics([bare], client_for(server.base_url), progress=False)
    assert len(server.requests) == 1 and report.tasks[0].num_facts == 3


def test_same_text_on_the_same_site_is_asked_once(scripted_openai):
    server = scripted_openai(rubric_for)
    twins = [make_task("Find the store hours", benchmark_name=name) for name in ("seed-a", "seed-b")]
    assert twins[0].task_id != twins[1].task_id
    report = generate_rubrics(twins, client_for(server.base_url), progress=False)
    assert len(server.requests) == 1
    assert [t.task_id for t in report.tasks] == [t.task_id for t in twins]
    assert report.tasks[0].evaluator_reference == report.tasks[1].evaluator_reference != ()


def test_malformed_reply_then_valid_is_retried_and_kept(scripted_openai):
    valid = rubric_for({"messages": [{"content": "Task: Buy a blue kettle"}]})
    server = scripted_openai(['{"fact_groups": [', '{"fact_groups": []}', valid])
    report = generate_rubrics([make_task("Buy a blue kettle")], client_for(server.base_url), progress=False)
    assert len(server.requests) == 3
    assert report.failed == []
    assert report.tasks[0].num_facts == 3
    assert report.usage.retries == 2


def test_always_malformed_task_is_reported_and_not_kept(scripted_openai):
    good = make_task("Find a pizza place open late")

    def script(body):
        if "unlucky" in body["messages"][-1]["content"]:
            return '{"fact_groups": [{"id": "1", "description": "x", "facts": []}]}'
        return rubric_for(body)

    server = scripted_openai(script)
    bad = make_task("An unlucky task the model cannot grade")
    report = generate_rubrics([bad, good], client_for(server.base_url, max_retries=2), progress=False)
    assert [task.task_id for task in report.tasks] == [good.task_id]
    assert len(report.failed) == 1
    task_id, reason = report.failed[0]
    assert task_id == bad.task_id
    assert "facts" in reason
    assert len(server.requests) == 1 + 3  # good once, bad 1 + 2 retries
    assert report.generated == 1


def test_server_error_then_ok_is_retried(scripted_openai):
    valid = rubric_for({"messages": [{"content": "Task: Find opening hours"}]})
    server = scripted_openai([{"status": 500}, {"status": 429}, valid])
    report = generate_rubrics([make_task("Find opening hours")], client_for(server.base_url), progress=False)
    assert report.tasks[0].num_facts == 3
    assert len(server.requests) == 3


def test_endpoint_down_raises_one_clear_error_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    tasks = [make_task(f"Task number {i}") for i in range(5)]
    with pytest.raises(LLMUnavailable, match=re.escape(url)):
        generate_rubrics(tasks, client_for(url, max_retries=1), progress=False)


def test_rerun_with_the_same_cache_sends_zero_requests(scripted_openai, tmp_path):
    server = scripted_openai(rubric_for)
    tasks = [make_task(f"Look up item {i} and report its price") for i in range(4)]
    first = generate_rubrics(tasks, client_for(server.base_url, cache_dir=tmp_path), progress=False)
    sent = len(server.requests)
    assert sent == 4
    second = generate_rubrics(tasks, client_for(server.base_url, cache_dir=tmp_path), progress=False)
    assert len(server.requests) == sent
    assert second.tasks == first.tasks
    assert (second.usage.requests, second.usage.cache_hits) == (0, 4)


def test_concurrency_bound_is_respected(scripted_openai):
    server = scripted_openai(lambda body: {"content": rubric_for(body), "delay_s": 0.1})
    tasks = [make_task(f"Check store number {i} opening times") for i in range(8)]
    report = generate_rubrics(tasks, client_for(server.base_url, max_concurrency=3), progress=False)
    assert len(report.tasks) == 8
    assert server.max_in_flight == 3
    # Each task got the rubric of its own request.
    assert [t.evaluator_reference[0].facts[1] for t in report.tasks] == ["Fact about store"] * 8
    assert {t.evaluator_reference[1].facts[0] for t in report.tasks} == {"Shows times"}


def test_usage_totals_match_the_scripted_usage(scripted_openai):
    usages = [{"prompt_tokens": 300 + i, "completion_tokens": 40 + i} for i in range(3)]

    def script(body):
        index = int(re.search(r"number (\d)", body["messages"][-1]["content"]).group(1))
        return {"content": rubric_for(body), "usage": usages[index]}

    server = scripted_openai(script)
    client = client_for(server.base_url, price_per_1k_input=1.0, price_per_1k_output=10.0)
    report = generate_rubrics([make_task(f"Task number {i} here") for i in range(3)], client, progress=False)
    assert report.usage.requests == 3
    assert report.usage.prompt_tokens == sum(u["prompt_tokens"] for u in usages)
    assert report.usage.completion_tokens == sum(u["completion_tokens"] for u in usages)
    assert report.usage.cost == pytest.approx(903 / 1000 + 123 * 10 / 1000)


@pytest.mark.parametrize(("reply", "message"), [
    ({}, "missing 'fact_groups'"),
    ({"fact_groups": []}, "empty"),
    ({"fact_groups": "x"}, "must be a list"),
    ({"fact_groups": [{"id": "1", "description": "d", "facts": ["a"]},
                      {"id": "1", "description": "e", "facts": ["b"]}]}, "not unique"),
    ({"fact_groups": [{"id": "1", "description": "d", "facts": ["a", " "]}]}, "fact 1"),
    ({"fact_groups": [{"id": "1", "description": "", "facts": ["a"]}]}, "description"),
    ({"fact_groups": [{"id": "", "description": "d", "facts": ["a"]}]}, "'id'"),
    ({"fact_groups": [{"id": str(i), "description": "d", "facts": ["a"]} for i in range(MAX_GROUPS + 1)]},
     "at most"),
    ({"fact_groups": [{"id": "1", "description": "d", "facts": ["a"] * (MAX_FACTS_PER_GROUP + 1)}]},
     "at most"),
])
def test_parse_rubric_rejects_bad_replies(reply, message):
    with pytest.raises(RubricError, match=re.escape(message)) as caught:
        parse_rubric(reply)
    assert isinstance(caught.value, ValueError)   # what the LLM client asks again for


def test_parse_rubric_accepts_integer_ids_and_normalises_whitespace():
    groups = parse_rubric({"fact_groups": [{"id": 1, "description": " Item  info ", "facts": [" a  b "]}]})
    assert groups == (FactGroup("1", "Item info", ("a b",)),)


def test_prompt_names_task_and_website_and_version_is_set():
    messages = rubric_messages(make_task("Find the return policy", website="https://www.ikea.com"))
    assert messages[0]["role"] == "system" and "fact groups" in messages[0]["content"]
    assert messages[1]["content"] == "Website: https://www.ikea.com\nTask: Find the return policy"
    assert RUBRIC_PROMPT_VERSION


async def test_sync_entry_point_inside_a_running_loop_says_to_await():
    client = client_for("http://127.0.0.1:1/v1")
    with pytest.raises(EventLoopError, match="await") as caught:
        generate_rubrics([make_task("Anything")], client, progress=False)
    assert isinstance(caught.value, WebgymDataError) and isinstance(caught.value, RuntimeError)
    assert client.usage.requests == 0


# -- CLI ---------------------------------------------------------------------------------------
def write_jsonl(path, tasks):
    path.write_text("".join(json.dumps(t.to_row()) + "\n" for t in tasks))


def test_cli_writes_rubrics_and_prints_usage(scripted_openai, tmp_path):
    server = scripted_openai(rubric_for)
    source, out = tmp_path / "tasks.jsonl", tmp_path / "out" / "rubrics.jsonl"
    tasks = [make_task("Find the cheapest monitor"), make_task("List three hiking trails")]
    write_jsonl(source, tasks)
    args = [str(source), "--out", str(out), "--llm-base-url", server.base_url, "--llm-model", "scripted",
            "--llm-cache-dir", str(tmp_path / "cache"), "--llm-max-concurrency", "2"]
    result = CliRunner().invoke(rubrics_command, args)   # with the progress bar
    assert result.exit_code == 0, result.output
    assert "2 rubrics generated, 0 failed" in result.output
    assert "2 requests" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [t.task_id for t in tasks]
    assert all(r["difficulty"] == 3 and len(r["evaluator_reference"]) == 2 for r in rows)

    again = CliRunner().invoke(rubrics_command, args)   # rerun: all from the cache
    assert again.exit_code == 0, again.output
    assert "0 requests" in again.output and "2 cache hits" in again.output
    assert len(server.requests) == 2


def test_cli_reports_failures_and_exits_nonzero(scripted_openai, tmp_path):
    server = scripted_openai(["not json"])
    source, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    task = make_task("Something impossible")
    write_jsonl(source, [task])
    result = CliRunner().invoke(rubrics_command, [
        str(source), "--out", str(out), "--llm-base-url", server.base_url, "--llm-model", "m",
        "--llm-max-retries", "1", "--llm-cache-dir", str(tmp_path / "cache"), "--no-progress"])
    assert result.exit_code == 1
    assert f"failed {task.task_id}: " in result.output
    assert "not JSON" in result.output
    assert out.read_text() == ""


def test_cli_endpoint_down_is_one_error_line(tmp_path):
    source = tmp_path / "tasks.jsonl"
    write_jsonl(source, [make_task("Anything")])
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = CliRunner().invoke(rubrics_command, [
        str(source), "--out", str(tmp_path / "o.jsonl"), "--llm-base-url", url, "--llm-model", "m",
        "--llm-max-retries", "0", "--llm-cache-dir", str(tmp_path / "cache"), "--no-progress"])
    assert result.exit_code == 1
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [
        line for line in result.output.splitlines() if line.strip()]
    assert url in result.output and "connection failed" in result.output
    assert "Traceback" not in result.output


def test_cli_bad_row_names_file_and_row(tmp_path):
    source = tmp_path / "tasks.jsonl"
    source.write_text(json.dumps(make_task("ok").to_row()) + "\n" + '{"task_name": "", "website": "x"}\n')
    result = CliRunner().invoke(rubrics_command, [
        str(source), "--out", str(tmp_path / "o.jsonl"), "--llm-base-url", "http://127.0.0.1:1/v1",
        "--llm-model", "m"])
    assert result.exit_code == 1
    assert f"{source}, row 1, field 'task_name'" in result.output


def test_cli_reads_every_split_of_a_task_folder_unless_one_is_asked(scripted_openai, tmp_path):
    import datasets

    server = scripted_openai(rubric_for)
    tasks = [make_task(f"Folder task {i}", website=f"https://site{i}.example.org") for i in range(3)]
    folder = tmp_path / "tasks"
    (folder / "data").mkdir(parents=True)
    for split, part in (("train", tasks[:2]), ("test", tasks[2:])):
        datasets.Dataset.from_list([t.to_row() for t in part], features=task_features()).to_parquet(
            str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    base = ["--llm-base-url", server.base_url, "--llm-model", "scripted", "--no-llm-cache", "--no-progress"]
    out = tmp_path / "all.jsonl"
    result = CliRunner().invoke(rubrics_command, [str(folder), "--out", str(out), *base])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["task_id"] for r in rows) == sorted(t.task_id for t in tasks)
    result = CliRunner().invoke(rubrics_command, [str(folder), "--out", str(out), "--split", "test", *base])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["task_id"] for line in out.read_text().splitlines()] == [tasks[2].task_id]


def test_cli_settings_errors_name_the_flag(tmp_path):
    source = tmp_path / "tasks.jsonl"
    write_jsonl(source, [make_task("Anything")])
    result = CliRunner().invoke(rubrics_command, [str(source), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1 and "llm.base_url (--llm-base-url): required" in result.output
    result = CliRunner().invoke(rubrics_command, [str(source), "--llm-base-url", "http://127.0.0.1:1/v1",
                                                  "--llm-model", "m"])
    assert result.exit_code == 1 and "out (--out): required" in result.output


def test_cli_help_has_an_example():
    result = CliRunner().invoke(rubrics_command, ["--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "--llm-base-url" in result.output and "--split" in result.output


# -- rubrics for every task (--rubrics all) -----------------------------------------------------
SEED_GROUP = [{"id": "criteria", "description": "Success criteria",
               "facts": ["A search for hiking boots was made", "A product page is open"]}]


def seed_task(name: str = "Find waterproof hiking boots in size 9", **kwargs) -> Task:
    """A task whose rubric an importer read from its seed's criteria, with the seed's own label."""
    return make_task(name, evaluator_reference=SEED_GROUP, rubric_source="seed", seed_difficulty_level="hard",
                     seed_criteria=SEED_GROUP[0]["facts"], **kwargs)


def test_all_mode_asks_for_seed_rubrics_too_and_shows_the_seed_criteria(scripted_openai):
    server = scripted_openai(rubric_for)
    seeded, bare = seed_task(), make_task("Find the store hours")
    given = make_task("Already graded task",
                      evaluator_reference=[{"id": "a", "description": "d", "facts": ["x"]}])
    subtask = seed_task("Only search for the boots", parent_task_id=seeded.task_id)
    assert given.rubric_source == "given"
    report = generate_rubrics([seeded, bare, given, subtask], client_for(server.base_url), progress=False)
    asked = sorted(body["messages"][-1]["content"] for body in server.requests)
    assert len(asked) == 2                                 # the seeded and the bare task, not the others
    assert asked[1] == ("Website: https://shop.example.com\nTask: Find waterproof hiking boots in size 9\n"
                        "Reference criteria from the seed benchmark:\n"
                        "- A search for hiking boots was made\n- A product page is open")
    assert "reference criteria" in server.requests[0]["messages"][0]["content"]
    new_seeded, new_bare, same_given, same_subtask = report.tasks
    assert (report.generated, report.replaced, report.failed, report.kept_seed) == (2, 1, [], [])
    assert new_seeded.rubric_source == "llm" and new_seeded.evaluator_reference[0].description == "Main goal"
    assert new_seeded.seed_criteria == seeded.seed_criteria          # kept as reference material
    # Now the fact count decides the level, not the seed's label.
    assert (seeded.difficulty_level, new_seeded.difficulty, new_seeded.difficulty_level) == (
        "hard", 3, "easy")
    assert same_given is given and same_subtask is subtask


def test_missing_mode_asks_only_for_tasks_without_a_rubric(scripted_openai):
    server = scripted_openai(rubric_for)
    seeded, bare = seed_task(), make_task("Find the store hours")
    assert [wants_rubric(t, "missing") for t in (seeded, bare)] == [False, True]
    assert [wants_rubric(t, "all") for t in (seeded, bare)] == [True, True]
    report = generate_rubrics([seeded, bare], client_for(server.base_url), mode="missing", progress=False)
    assert len(server.requests) == 1 and report.tasks[0] is seeded and report.replaced == 0
    with pytest.raises(ValueError, match="mode: must be one of missing, all"):
        wants_rubric(bare, "some")


def test_a_seed_task_whose_replies_stay_invalid_keeps_its_seed_rubric(scripted_openai):
    server = scripted_openai(['{"fact_groups": []}'])
    seeded, bare = seed_task(), make_task("Find the store hours")
    report = generate_rubrics([seeded, bare], client_for(server.base_url, max_retries=1), progress=False)
    assert report.tasks == [seeded]                                   # the bare task is dropped
    assert [task_id for task_id, _ in report.kept_seed] == [seeded.task_id]
    assert [task_id for task_id, _ in report.failed] == [bare.task_id]
    assert report.generated == 0 and len(server.requests) == 4


def test_cli_rubrics_flag_picks_the_mode(scripted_openai, tmp_path):
    server = scripted_openai(rubric_for)
    source = tmp_path / "tasks.jsonl"
    write_jsonl(source, [seed_task(), make_task("Find the store hours")])
    base = [str(source), "--llm-base-url", server.base_url, "--llm-model", "scripted", "--no-llm-cache",
            "--no-progress"]
    result = CliRunner().invoke(rubrics_command, [*base, "--out", str(tmp_path / "a.jsonl"),
                                                  "--rubrics", "missing"])
    assert result.exit_code == 0, result.output
    assert "1 rubrics generated, 0 failed (0 replaced a seed rubric" in result.output
    result = CliRunner().invoke(rubrics_command, [*base, "--out", str(tmp_path / "b.jsonl")])  # default: all
    assert result.exit_code == 0, result.output
    assert "2 rubrics generated, 0 failed (1 replaced a seed rubric" in result.output
    rows = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [r["rubric_source"] for r in rows] == ["llm", "llm"]
    assert rows[0]["seed_criteria"] == SEED_GROUP[0]["facts"]
    assert "--rubrics [missing|all]" in CliRunner().invoke(rubrics_command, ["--help"]).output


# --------------------------------------------------------- untrusted input: parse_rubric is total

_SOME_TEXT = ODD_TEXT.filter(str.strip)
_FACTS = st.lists(_SOME_TEXT, min_size=1, max_size=3)
_GROUP = st.fixed_dictionaries({}, optional={"id": _SOME_TEXT | st.integers() | JSON_VALUES,
                                             "description": _SOME_TEXT | JSON_VALUES,
                                             "facts": _FACTS | JSON_VALUES})
_WELL_FORMED_GROUP = st.fixed_dictionaries({"id": _SOME_TEXT | st.integers(), "description": _SOME_TEXT,
                                            "facts": _FACTS})


@settings(max_examples=400, deadline=None)
@given(reply=JSON_VALUES | st.lists(_GROUP, max_size=3) | st.fixed_dictionaries(
    {"fact_groups": st.lists(_WELL_FORMED_GROUP | _GROUP | JSON_VALUES, max_size=4)}))
def test_any_reply_gives_fact_groups_or_a_rubric_error(reply):
    try:
        groups = parse_rubric(reply)
    except RubricError:
        return
    assert 1 <= len(groups) <= MAX_GROUPS
    for group in groups:  # what the build writes: it must be storable text
        json.dumps(group.to_dict(), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(("group", "message"), [
    ({"id": 10**5000, "description": "d", "facts": ["a"]}, "too large"),  # beyond int -> str
    ({"id": "1", "description": "d", "facts": ["price \ud800"]}, "fact 0"),
    ({"id": "1\udfff", "description": "d", "facts": ["a"]}, "'id'"),
    ({"id": "1", "description": "\ud800", "facts": ["a"]}, "description"),
    ({"id": True, "description": "d", "facts": ["a"]}, "'id'"),
    ({"id": "1", "description": "d", "facts": [["a"]]}, "fact 0"),
])
def test_hostile_rubric_values_are_rubric_errors(group, message):
    with pytest.raises(RubricError, match=message):
        parse_rubric({"fact_groups": [group]})
