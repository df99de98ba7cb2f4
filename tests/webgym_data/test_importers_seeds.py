"""webgym_data.importers on the real seed files in ../shared/seeds: counts, rubrics, answers, metadata.

Every expected number is computed here from the raw file (or stated in its SOURCE.txt and checked
against the raw file), never copied from the importer's output.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from datasets import Dataset

from webgym_data.importers import discover_seeds, get_importer, import_seed
from webgym_data.schema import Task, task_features


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _metadata(task: Task) -> dict:
    return task.source.metadata_dict()


def test_discover_seeds_finds_each_seed_with_a_file_and_only_those(seeds_dir):
    found = dict(discover_seeds(seeds_dir))
    # insta_v3, pae_webvoyager and browsecomp hold only a SOURCE.txt; deepshop has no folder;
    # webvoyager is not one of the ten seeds.
    assert set(found) == {"online_mind2web", "mind2web_live", "gaia_web", "agentsynth_web",
                          "travelplanner", "mind2web2"}
    for name, path in found.items():
        assert path.exists() and path.is_relative_to(seeds_dir), name


def test_online_mind2web_300_tasks_on_139_sites_with_levels_kept(seeds_dir):
    raw = json.loads((seeds_dir / "online_mind2web" / "Online_Mind2Web.json").read_text())
    assert len(raw) == 300 and len({r["website"] for r in raw}) == 139  # as SOURCE.txt says

    result = import_seed("online_mind2web", seeds_dir / "online_mind2web")
    tasks = result.tasks
    assert len(tasks) == 300 and result.skipped == [] and result.unresolved_websites == 0
    assert len({t.website for t in tasks}) == 139
    assert {t.benchmark_name for t in tasks} == {"online-mind2web"}
    assert len({t.task_id for t in tasks}) == 300
    levels = Counter(_metadata(t)["level"] for t in tasks)
    assert levels == Counter(r["level"] for r in raw) == Counter(easy=83, medium=143, hard=74)
    # The tasks have no rubric: the seed's level is their difficulty level until an LLM writes one.
    assert Counter(t.difficulty_level for t in tasks) == levels
    assert {(t.difficulty, t.rubric_source) for t in tasks} == {(0, "")}
    by_seed_id = {_metadata(t)["seed_task_id"]: t for t in tasks}
    for row in raw:
        task = by_seed_id[row["task_id"]]
        assert task.task_name == " ".join(row["confirmed_task"].split())
        assert task.website == row["website"] and task.start_url == row["website"]
        assert _metadata(task)["reference_length"] == row["reference_length"]


def _key_nodes(row: dict) -> set[str]:
    return {json.dumps([node["match_function_name"], node["content"]], sort_keys=True)
            for node in row["evaluation"]}


@pytest.mark.parametrize(("file_name", "count"), [("mind2web-live_test_20241024.json", 104),
                                                  ("example_130.json", 130)])
def test_mind2web_live_key_nodes_become_one_fact_each(seeds_dir, file_name, count):
    path = seeds_dir / "mind2web_live" / file_name
    raw = json.loads(path.read_text())
    assert len(raw) == count

    result = import_seed("mind2web_live", path)
    assert len(result.tasks) == count and result.unresolved_websites == 0 and result.skipped == []
    for row, task in zip(raw, result.tasks, strict=True):
        assert task.benchmark_name == "mind2web-live"
        assert task.task_name == " ".join(row["task"].split())
        first_url = urlsplit(row["evaluation"][0]["content"]["url"])
        assert task.website == f"{first_url.scheme}://{first_url.netloc}/"
        (group,) = task.evaluator_reference
        # one readable fact per distinct key node; difficulty is that count
        assert len(group.facts) == len(_key_nodes(row)) == task.difficulty
        for node in row["evaluation"]:
            answer = node["content"]["reference_answer"].strip()
            assert any(answer in fact for fact in group.facts), answer
        assert _metadata(task)["reference_task_length"] == row["reference_task_length"]
        # The key nodes are the seed's criteria, and the one group is the seed's reading of them.
        assert task.seed_criteria == group.facts and task.rubric_source == "seed"


def test_mind2web_live_folder_reads_both_files(seeds_dir):
    result = import_seed("mind2web_live", seeds_dir / "mind2web_live")
    assert len(result.tasks) == 104 + 130
    assert sorted(p.name for p in result.files) == ["example_130.json", "mind2web-live_test_20241024.json"]
    first = result.tasks[0]
    assert first.website == "https://www.gamestop.com/"
    assert any('"store"' in fact and '"2630"' in fact for fact in first.evaluator_reference[0].facts)


def _groups_from_flattened(nodes: list[dict]) -> dict[str, int]:
    """Leaves per depth-1 node, from the independently flattened tree (nodes in depth-first order)."""
    leaves: dict[str, int] = {}
    current = None
    for node in nodes:
        if node["depth"] == 1:
            current = node["id"]
            leaves[current] = int(node["is_leaf"])
        elif node["depth"] > 1 and node["is_leaf"]:
            leaves[current] += 1
    return leaves


def test_mind2web2_dev_tasks_and_rubric_trees_become_fact_groups(seeds_dir):
    folder = seeds_dir / "mind2web2"
    raw = _jsonl(folder / "dev_set_tasks.jsonl")
    flattened = {row["task_id"]: row for row in _jsonl(folder / "rubric_trees_flattened.jsonl")}
    result = import_seed("mind2web2", folder)
    assert len(result.tasks) == len(raw) == 10
    by_seed = {_metadata(t)["seed_task_id"]: t for t in result.tasks}
    assert set(by_seed) == {row["task_id"] for row in raw}
    with_rubric = {task_id for task_id in by_seed
                   if (folder / "rubric_trees_from_gh_page" / f"{task_id}_rubric.json").is_file()}
    assert with_rubric == {"find_parks", "lol_sylas", "llava_commit", "nyc_sport_event"}
    for task_id, task in by_seed.items():
        assert task.benchmark_name == "mind2web-2" and task.website.startswith("https://")
        if task_id not in with_rubric:
            assert task.evaluator_reference == () and task.difficulty == 0
            continue
        expected = _groups_from_flattened(flattened[task_id]["nodes"])
        assert {g.id: len(g.facts) for g in task.evaluator_reference} == expected
        assert task.difficulty == flattened[task_id]["n_leaves"]
    parks = by_seed["find_parks"]
    descriptions = [g.description for g in parks.evaluator_reference]
    assert descriptions == [f"Park {i} evaluation node" for i in (1, 2, 3)]
    assert "Park name exists" in parks.evaluator_reference[0].facts
    # Every leaf is one seed criterion, under its depth-1 node's description.
    assert len(parks.seed_criteria) == flattened["find_parks"]["n_leaves"] and parks.rubric_source == "seed"
    assert "Park 1 evaluation node: Park name exists" in parks.seed_criteria
    assert {t.seed_criteria for t in by_seed.values() if not t.evaluator_reference} == {()}


def test_gaia_web_final_answers_become_definite_answers(seeds_dir):
    raw = _jsonl(seeds_dir / "gaia_web" / "GAIA_web.jsonl")
    result = import_seed("gaia_web", seeds_dir / "gaia_web")
    assert len(result.tasks) == len(raw) == 90
    assert [t.definite_answer for t in result.tasks] == [r["Final answer"].strip() for r in raw]
    assert Counter(_metadata(t)["level"] for t in result.tasks) == Counter({1: 26, 2: 64})
    assert {t.website for t in result.tasks} == {"https://www.google.com/"}


def test_travelplanner_train_45_and_validation_180(seeds_dir):
    folder = seeds_dir / "travelplanner"
    result = import_seed("travelplanner", folder)
    splits = Counter(_metadata(t)["split"] for t in result.tasks)
    assert splits == Counter(train=len(_jsonl(folder / "train_queries.jsonl")),
                             validation=len(_jsonl(folder / "validation_queries.jsonl")))
    assert splits == Counter(train=45, validation=180)
    single = import_seed("travelplanner", folder / "validation_queries_with_example_plans.jsonl")
    assert len(single.tasks) == 180
    assert "plan" not in _metadata(single.tasks[0])  # example plans stay out of the task rows
    # the same query gives the same task id whichever file it came from
    assert {t.task_id for t in single.tasks} == {t.task_id for t in result.tasks
                                                 if _metadata(t)["split"] == "validation"}


def test_agentsynth_sample_composite_and_step_tasks(seeds_dir):
    folder = seeds_dir / "agentsynth_web"
    summarized = _jsonl(folder / "summarized_task_sequences.jsonl")
    steps = _jsonl(folder / "task_sequences.jsonl")
    bad_site = [r for r in summarized + steps if " " in r["website"].strip()]
    assert len(summarized) == 61 and len(steps) == 194 and len(bad_site) == 1

    result = import_seed("agentsynth_web", folder)
    kinds = Counter(_metadata(t)["kind"] for t in result.tasks)
    assert kinds == Counter(composite=61 - 1, step=194)
    assert result.unresolved_websites == 1 and len(result.skipped) == 1
    assert "summarized_task_sequences.jsonl, row" in result.skipped[0] and "website" in result.skipped[0]
    good_sites = {r["website"] for r in summarized + steps} - {bad_site[0]["website"]}
    assert {t.website for t in result.tasks} == {"https://" + site for site in good_sites}


def test_webvoyager_643_tasks_golden_answers_are_definite(seeds_dir):
    folder = seeds_dir / "webvoyager"
    reference = json.loads((folder / "reference_answer.json").read_text())
    golden = {(site, str(a["id"])): a["ans"].strip() for site, v in reference.items()
              for a in v["answers"] if a["type"] == "golden"}
    result = get_importer("webvoyager").read(folder)
    assert len(result.tasks) == 643 and len({t.website for t in result.tasks}) == 15
    for task in result.tasks:
        meta = _metadata(task)
        key = tuple(meta["seed_id"].rsplit("--", 1))
        assert task.definite_answer == golden.get(key, "")
        assert meta["reference_answer_type"] in ("golden", "possible")  # every task has an answer
    assert sum(bool(t.definite_answer) for t in result.tasks) == len(golden) == 143


def test_every_real_seed_row_fits_the_declared_features_and_ids_are_stable(seeds_dir):
    tasks = []
    for name, path in discover_seeds(seeds_dir):
        first = import_seed(name, path).tasks
        again = import_seed(name, path).tasks
        assert [t.task_id for t in first] == [t.task_id for t in again], name
        tasks.extend(first)
    assert len({t.task_id for t in tasks}) == len(tasks)
    dataset = Dataset.from_list([t.to_row() for t in tasks], features=task_features())
    # what an importer builds is exactly what the schema rebuilds from the stored row
    assert [Task.from_row(row) for row in dataset] == tasks


def test_mind2web2_task_examples_file_gives_the_same_tasks_and_rubrics(seeds_dir):
    folder = seeds_dir / "mind2web2" / "rubric_trees_from_gh_page"
    examples = json.loads((folder / "task_examples.json").read_text())
    from_examples = import_seed("mind2web2", folder / "task_examples.json").tasks
    from_dev = {t.task_id: t for t in import_seed("mind2web2", seeds_dir / "mind2web2").tasks}
    assert len(from_examples) == len(examples) == 10
    for task in from_examples:
        # ids come from the seed's task_id, so a reworded description keeps its id
        assert from_dev[task.task_id].evaluator_reference == task.evaluator_reference
        has_rubric = examples[task.source.metadata_dict()["seed_task_id"]]["rubric_path"] is not None
        assert bool(task.evaluator_reference) == has_rubric


def _deepshop_file(seeds_dir: Path) -> Path:
    found = [path for name, path in discover_seeds(seeds_dir) if name == "deepshop"]
    if not found:
        pytest.skip(f"DeepShop's public test file (deepshop_test.jsonl) is not in {seeds_dir}")
    return found[0]


def test_deepshop_public_file_levels_rubrics_and_garbled_rows(seeds_dir):
    path = _deepshop_file(seeds_dir)
    files = [path] if path.is_file() else get_importer("deepshop").files_in(path)
    raw = [row for file in files for row in _jsonl(file)]
    result = import_seed("deepshop", path)
    tasks = result.tasks
    assert len(tasks) == len(raw) and result.skipped == []                 # every row kept, garbled too
    labels = Counter(r["difficulty"] for r in raw)
    assert Counter(t.difficulty_level for t in tasks) == labels              # hard stays hard; none "unknown"
    garbled = [t for t in tasks if "garbled" in _metadata(t)]
    assert 0 < len(garbled) <= 10                                            # "a few rows"
    for row, task in zip(raw, tasks, strict=True):
        parts = [name for name in ("attribute", "filter", "sort") if row[name].strip() not in ("None", "")]
        if "garbled" in _metadata(task):
            assert task.evaluator_reference == ()
        else:
            assert [g.id for g in task.evaluator_reference] == parts
            assert "**" not in " ".join(f for g in task.evaluator_reference for f in g.facts)
        assert len(task.seed_criteria) <= len(parts)


def test_the_upstream_file_names_are_found_in_a_flat_seeds_folder(seeds_dir, tmp_path):
    # The upstream files dropped side by side, as downloaded (links to the read-only originals).
    upstream = {name: seeds_dir / folder / name for folder, name in [
        ("online_mind2web", "Online_Mind2Web.json"), ("mind2web_live", "mind2web-live_test_20241024.json"),
        ("gaia_web", "GAIA_web.jsonl"), ("agentsynth_web", "summarized_task_sequences.jsonl"),
        ("agentsynth_web", "task_sequences.jsonl")]}
    for name, target in upstream.items():
        (tmp_path / name).symlink_to(target)
    found = discover_seeds(tmp_path)
    assert found == [("agentsynth_web", tmp_path / "summarized_task_sequences.jsonl"),
                     ("agentsynth_web", tmp_path / "task_sequences.jsonl"),
                     ("mind2web_live", tmp_path / "mind2web-live_test_20241024.json"),
                     ("online_mind2web", tmp_path / "Online_Mind2Web.json"),
                     ("gaia_web", tmp_path / "GAIA_web.jsonl")]
    assert sum(len(import_seed(name, path).tasks) for name, path in found) == 60 + 194 + 104 + 300 + 90
    # An upstream repository's folder name is a seed folder too.
    (tmp_path / "clone").mkdir()
    (tmp_path / "clone" / "Online-Mind2Web").symlink_to(seeds_dir / "online_mind2web")
    assert discover_seeds(tmp_path / "clone") == [("online_mind2web", tmp_path / "clone" / "Online-Mind2Web")]
