"""webgym_data.importers: the registry, Hub routing, clear errors and the ``webgym-data import`` command.

Per-seed behaviour is in test_importers_seeds.py (real files) and test_importers_formats.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from datasets import Dataset

from webgym_data.importers import (
    SEED_IMPORTERS,
    HubImportError,
    Importer,
    SeedNotFoundError,
    UnknownImporterError,
    available_importers,
    discover_seeds,
    get_importer,
    import_command,
    import_seed,
)
from webgym_data.schema import Task, TaskValidationError, WebgymDataError, make_task_id, task_features

ALL = {"insta_v3", "pae_webvoyager", "agentsynth_web", "browsecomp", "travelplanner", "mind2web_live",
       "online_mind2web", "deepshop", "mind2web2", "gaia_web", "webvoyager", "generic", "miniwob",
       "local_sites"}


def test_registry_holds_every_seed_importer_with_its_contract():
    assert set(available_importers()) == ALL
    assert set(SEED_IMPORTERS) == ALL - {"webvoyager", "generic", "miniwob", "local_sites"}
    benchmarks = set()
    for name in available_importers():
        importer = get_importer(name)
        assert isinstance(importer, Importer)
        assert importer.name == name
        assert importer.benchmark_name and importer.benchmark_name == importer.benchmark_name.lower()
        assert importer.hub_id is None or importer.hub_id.count("/") == 1
        benchmarks.add(importer.benchmark_name)
    assert len(benchmarks) == len(ALL)  # task ids hash the benchmark: no two seeds may share one
    assert get_importer("online_mind2web").benchmark_name == "online-mind2web"
    assert get_importer("mind2web_live").benchmark_name == "mind2web-live"


def test_unknown_importer_lists_the_known_names():
    with pytest.raises(UnknownImporterError) as caught:
        get_importer("mind2web3")
    message = str(caught.value)
    assert "'mind2web3'" in message and all(name in message for name in ALL)
    assert isinstance(caught.value, WebgymDataError)


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "Online_Mind2Web.json"
    with pytest.raises(SeedNotFoundError, match=str(missing)):
        import_seed("online_mind2web", missing)
    # an 'org/name'-looking relative path to a data file is a local path, not a Hub id
    with pytest.raises(SeedNotFoundError, match="data/tasks.jsonl"):
        import_seed("generic", "data/tasks.jsonl")


def test_folder_without_the_importers_files_says_which_it_expected(tmp_path):
    (tmp_path / "SOURCE.txt").write_text("nothing here")
    with pytest.raises(SeedNotFoundError, match="GAIA_web"):
        import_seed("gaia_web", tmp_path)
    assert discover_seeds(tmp_path) == []


def test_discover_seeds_sees_a_folder_once_it_holds_data(tmp_path):
    (tmp_path / "pae_webvoyager").mkdir()
    (tmp_path / "pae_webvoyager" / "SOURCE.txt").write_text("")
    assert discover_seeds(tmp_path) == []
    (tmp_path / "pae_webvoyager" / "tasks.jsonl").write_text(
        json.dumps({"web_name": "ESPN", "id": "ESPN--1", "ques": "Who won?",
                    "web": "https://www.espn.com/"}) + "\n")
    assert discover_seeds(tmp_path) == [("pae_webvoyager", tmp_path / "pae_webvoyager")]


def test_malformed_row_names_file_row_and_field(tmp_path):
    path = tmp_path / "GAIA_web.jsonl"
    good = {"task_id": "t0", "Level": 1, "Final answer": "42", "id": "level1-0", "web": "https://www.google.com/",
            "ques": "What is six times seven?"}
    bad = {**good, "task_id": "t1", "ques": "   "}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TaskValidationError) as caught:
        import_seed("gaia_web", path)
    assert (caught.value.file, caught.value.row, caught.value.field) == (str(path), 1, "ques")
    assert str(caught.value).startswith(f"{path}, row 1, field 'ques': ")


def test_invalid_json_line_names_the_line(tmp_path):
    path = tmp_path / "deepshop.jsonl"
    path.write_text('{"web_name": "Amazon", "id": "1", "ques": "Buy socks.", "web": "https://www.amazon.com/"}\n'
                    '{"web_name": "Amazon", "id": \n')
    with pytest.raises(TaskValidationError, match=r"deepshop.jsonl, row 1: invalid JSON on line 2"):
        import_seed("deepshop", path)


def test_wrong_type_in_a_nested_field_is_named(tmp_path):
    path = tmp_path / "mind2web-live_x.json"
    path.write_text(json.dumps([{"index": 0, "task": "Open the home page", "evaluation": [
        {"match_function_name": "url_included_match", "content": "not an object"}]}]))
    with pytest.raises(TaskValidationError, match=r"row 0, field 'evaluation\[0\]'"):
        import_seed("mind2web_live", path)


def test_mind2web_live_rows_without_a_usable_url_are_counted(tmp_path):
    rows = [
        {"index": 0, "task": "Find the store hours", "reference_task_length": 3, "evaluation": [
            {"match_function_name": "element_value_exactly_match",
             "content": {"reference_answer": "9-5", "netloc": "shop", "url": ""}},
            {"match_function_name": "url_included_match",
             "content": {"key": "", "reference_answer": "/hours", "url": "https://shop.example.com/hours?x=1"}}]},
        {"index": 1, "task": "Search for boots", "reference_task_length": 2, "evaluation": [
            {"match_function_name": "url_semantic_match",
             "content": {"key": "q", "reference_answer": "Decide whether searching for boots",
                         "url": "about:blank"}}]},
        {"index": 2, "task": "Open the page", "reference_task_length": 1, "evaluation": []},
    ]
    path = tmp_path / "mind2web-live_train.json"
    path.write_text(json.dumps(rows))
    result = import_seed("mind2web_live", path)
    # scheme + host of the first usable URL
    assert [t.website for t in result.tasks] == ["https://shop.example.com/"]
    assert result.unresolved_websites == 2
    assert [reason.split(":")[0] for reason in result.skipped] == [f"{path}, row 1", f"{path}, row 2"]
    facts = result.tasks[0].evaluator_reference[0].facts
    assert len(facts) == 2 and '"9-5"' in facts[0] and '"/hours"' in facts[1]


def test_duplicate_rows_are_skipped_with_a_reason(tmp_path):
    row = {"web_name": "ESPN", "id": "ESPN--1", "ques": "Who won?", "web": "https://www.espn.com/"}
    path = tmp_path / "deepshop.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    result = import_seed("deepshop", path)
    assert len(result.tasks) == 1
    task_id = result.tasks[0].task_id
    assert result.skipped == [f"{path}, row 1: duplicate task_id {task_id} (first at {path}, row 0)"]


def test_task_ids_are_stable_hashes_of_benchmark_and_seed_id(seeds_dir):
    online = import_seed("online_mind2web", seeds_dir / "online_mind2web").tasks[0]
    seed_id = online.source.metadata_dict()["seed_task_id"]
    assert online.task_id == make_task_id("online-mind2web", "id", seed_id)
    live = import_seed("mind2web_live", seeds_dir / "mind2web_live").tasks[0]
    # the same GameStop task in two seeds gets two ids
    assert "Gamestop" in online.task_name and "Gamestop" in live.task_name and live.task_id != online.task_id
    assert live.task_id == make_task_id("mind2web-live", live.website, live.task_name)


def test_a_hub_id_is_loaded_from_the_hub_and_fails_clearly_offline(monkeypatch, tmp_path):
    # conftest sets HF_HUB_OFFLINE/HF_DATASETS_OFFLINE; the endpoint points at a closed loopback port too.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)  # no local folder called osunlp/...
    with pytest.raises(HubImportError) as caught:
        import_seed("online_mind2web", "osunlp/Online-Mind2Web")
    message = str(caught.value)
    assert message.startswith("osunlp/Online-Mind2Web: not a local path, and loading it as a Hub dataset")
    assert "online_mind2web" in message


def test_a_local_folder_named_like_a_hub_id_is_read_locally(tmp_path, monkeypatch, seeds_dir):
    folder = tmp_path / "osunlp" / "Online-Mind2Web"
    folder.mkdir(parents=True)
    (folder / "Online_Mind2Web.json").write_text(
        (seeds_dir / "online_mind2web" / "Online_Mind2Web.json").read_text())
    monkeypatch.chdir(tmp_path)
    assert len(import_seed("online_mind2web", "osunlp/Online-Mind2Web").tasks) == 300


def test_cli_import_writes_rows_and_prints_counts(seeds_dir, tmp_path):
    out = tmp_path / "out" / "m2wl.jsonl"
    result = CliRunner().invoke(import_command, ["mind2web_live", str(seeds_dir / "mind2web_live"),
                                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "mind2web_live: 234 tasks, 0 skipped, 0 unresolved websites" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 234
    tasks = [Task.from_row(row, file=str(out), row_index=i) for i, row in enumerate(rows)]
    assert all(t.evaluator_reference for t in tasks)
    assert len(Dataset.from_list(rows, features=task_features())) == 234
    assert [p.name for p in out.parent.iterdir()] == ["m2wl.jsonl"]  # no temp file left behind


def test_cli_generic_with_mapping_options(tmp_path):
    source = tmp_path / "mine.jsonl"
    source.write_text(json.dumps({"question": "Find the price of tea.", "url": "tea.example.com"}) + "\n")
    out = tmp_path / "mine-tasks.jsonl"
    result = CliRunner().invoke(import_command, ["generic", str(source), "--out", str(out), "--mapping",
                                                 "task_name=question", "--mapping", "website=url",
                                                 "--benchmark-name", "tea"])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["task_name"], row["website"], row["benchmark_name"]) == (
        "Find the price of tea.", "https://tea.example.com", "tea")


@pytest.mark.parametrize(("args", "expected"), [
    (["nope", "x"], "unknown importer 'nope'; known importers: agentsynth_web"),
    (["gaia_web", "missing.jsonl"], "missing.jsonl: no such file or folder"),
    (["generic", "x.jsonl", "--mapping", "task_name"], "mapping (--mapping): expected KEY=VALUE"),
    (["gaia_web", "x.jsonl", "--mapping", "task_name=q"], "applies to the 'generic' importer only"),
])
def test_cli_errors_are_one_line(tmp_path, args, expected):
    out = tmp_path / "o.jsonl"
    result = CliRunner().invoke(import_command, [*args, "--out", str(out)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], result.output
    assert not out.exists()


def test_cli_bad_row_error_names_file_row_and_field(tmp_path):
    source = tmp_path / "deepshop.jsonl"
    source.write_text(json.dumps({"web_name": "Amazon", "id": "1", "ques": "Buy socks."}) + "\n")
    result = CliRunner().invoke(import_command, ["deepshop", str(source), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: {source}, row 0, field 'web': "
                                     "is required and must be a non-empty string (missing)")


def test_cli_help_has_an_example():
    result = CliRunner().invoke(import_command, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "--mapping" in result.output
    assert all(name in result.output for name in SEED_IMPORTERS)


def test_cli_needs_an_out_file_and_names_the_flag(tmp_path):
    result = CliRunner().invoke(import_command, ["gaia_web", "x.jsonl"])
    assert result.exit_code == 1 and "out (--out): required" in result.output


def test_importer_read_accepts_a_path_directly(seeds_dir):
    result = get_importer("gaia_web").read(Path(seeds_dir / "gaia_web" / "GAIA_web.jsonl"))
    assert len(result.tasks) == 90 and result.files == [seeds_dir / "gaia_web" / "GAIA_web.jsonl"]


@pytest.mark.parametrize(("function", "content", "words"), [
    ("url_included_match", {"key": "", "reference_answer": "/aeroapi", "url": "https://x.com/aeroapi/"},
     ["/aeroapi", "https://x.com/aeroapi/"]),
    ("url_exactly_match", {"key": "store", "reference_answer": "2630", "url": "https://x.com/?store=2630"},
     ['"store"', '"2630"']),
    ("url_semantic_match", {"key": "q", "reference_answer": "Decide whether searching for boots", "url": ""},
     ['"q"', "searching for boots"]),
    ("element_path_exactly_match", {"reference_answer": ".btn-primary", "netloc": "x", "url": "https://x.com/"},
     [".btn-primary", "https://x.com/"]),
    ("element_value_exactly_match", {"reference_answer": "Johm", "path": "#name", "url": "https://x.com/"},
     ['"#name"', '"Johm"']),
    ("element_value_semantic_match", {"reference_answer": "means gift card", "path": "#message", "url": None},
     ['"#message"', "means gift card"]),
    ("some_future_match", {"reference_answer": "r", "url": "https://x.com/"}, ["some_future_match", "r"]),
])
def test_every_key_node_kind_reads_as_a_fact(function, content, words):
    from webgym_data.importers.mind2web_live import key_node_fact

    fact = key_node_fact(function, content)
    assert all(word in fact for word in words), fact
    assert "None" not in fact and "  " not in fact


def test_cli_generic_without_a_mapping_lists_the_files_columns_and_an_example_mapping(tmp_path):
    source = tmp_path / "mine.jsonl"
    source.write_text(json.dumps({"question": "Find the cheapest flight to Oslo", "level": "easy",
                                  "page": "https://flights.example"}) + "\n")
    out = tmp_path / "o.jsonl"
    result = CliRunner().invoke(import_command, ["generic", str(source), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "no column for task field 'task_name'" in result.output
    assert "the row's columns are: question, level, page" in result.output
    assert "for example --mapping task_name=question --mapping website=page" in result.output
    assert not out.exists()
    # The example works as given.
    mapped = CliRunner().invoke(import_command, ["generic", str(source), "--out", str(out), "--mapping",
                                                 "task_name=question", "--mapping", "website=page"])
    assert mapped.exit_code == 0 and out.exists(), mapped.output
